#include "cc/core/lookup.h"

#include <algorithm>

#include "cc/core/cache_lines.h"

namespace tf_embedding {
namespace {

// Table rows are prefetched this many 64-byte lines ahead of the lookup being combined: the
// table is usually far larger than the caches and ids are random, so each row would otherwise
// cost a full memory latency. 128 lines keep enough misses in flight to cover it (measured on
// 1M x 64 tables: 8 lookups ahead took 1.6x as long as 32).
constexpr int64_t kPrefetchLinesAhead = 128;

int64_t PrefetchDistance(int64_t dim) {
  return RowsAhead(kPrefetchLinesAhead, CacheLinesPerRow(dim), /*min_rows=*/4);
}

// kDim > 0 fixes the dimension at compile time: the row's sums then live in registers and the
// loops unroll and vectorise for whatever ISA the caller is compiled for (always_inline puts
// this body into each ISA's wrapper). kDim == 0 handles any dimension, summing in `activations`.
// kUnitGains: every gain is 1 (batch.gains is null) and the rows are added as they are, which
// gives the same bits (1 * x == x) for half the arithmetic and no gains to read.
template <int64_t kDim, bool kUnitGains>
__attribute__((always_inline)) inline void CombineRowsImpl(
    const CsrBatch& batch, const float* __restrict table, int64_t dim, int64_t row_begin,
    int64_t row_end, float* __restrict activations) {
  const int64_t d = kDim > 0 ? kDim : dim;
  const int64_t prefetch_distance = PrefetchDistance(d);
  const int64_t* __restrict ids = batch.ids;
  const float* __restrict gains = batch.gains;
  const int64_t begin_lookup = batch.row_splits[row_begin];
  const int64_t end_lookup = batch.row_splits[row_end];
  const auto prefetch = [&](int64_t k) {
    const float* row = table + ids[k] * d;
    for (int64_t j = 0; j < d; j += kFloatsPerCacheLine) __builtin_prefetch(row + j);
  };
  const auto prefetch_ahead = [&](int64_t k) {
    if (k + prefetch_distance < end_lookup) prefetch(k + prefetch_distance);
  };
  // The loop prefetches each lookup's row `prefetch_distance` lookups before it; the first ones,
  // which no earlier lookup prefetches, are prefetched here at once, so that their misses
  // overlap instead of stalling the first rows one by one. Callers combine many short ranges
  // (a thread's rows, a chunk of rows), so these misses are not rare.
  for (int64_t k = begin_lookup; k < std::min(end_lookup, begin_lookup + prefetch_distance); ++k) {
    prefetch(k);
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    float* __restrict out = activations + r * d;
    const int64_t begin = batch.row_splits[r], end = batch.row_splits[r + 1];
    if (begin == end) {
      std::fill(out, out + d, 0.0f);
      continue;
    }
    // The first lookup sets the sum to 0 + term, the value of summing from zero, so the sum's
    // registers need no zeroed memory behind them.
    float register_sum[kDim > 0 ? kDim : 1];
    float* __restrict sum = kDim > 0 ? register_sum : out;
    prefetch_ahead(begin);
    // A gain of 1 (the sum combiner's, whenever the caller has gains at all) adds the row
    // without the multiplication: a predictable branch costs less than the products.
    const float first_gain = kUnitGains ? 1.0f : gains[begin];
    const float* __restrict first_row = table + ids[begin] * d;
    if (first_gain == 1.0f) {
      for (int64_t j = 0; j < d; ++j) sum[j] = 0.0f + first_row[j];
    } else {
      for (int64_t j = 0; j < d; ++j) sum[j] = 0.0f + first_gain * first_row[j];
    }
    for (int64_t k = begin + 1; k < end; ++k) {
      prefetch_ahead(k);
      const float gain = kUnitGains ? 1.0f : gains[k];
      const float* __restrict row = table + ids[k] * d;
      if (gain == 1.0f) {
        for (int64_t j = 0; j < d; ++j) sum[j] += row[j];
      } else {
        for (int64_t j = 0; j < d; ++j) sum[j] += gain * row[j];
      }
    }
    if (kDim > 0) std::copy(sum, sum + d, out);
  }
}

#if defined(TF_EMBEDDING_X86_DISPATCH)
template <int64_t kDim, bool kUnitGains>
TF_EMBEDDING_TARGET_AVX2 void CombineRowsAvx2(const CsrBatch& batch, const float* table,
                                              int64_t dim, int64_t row_begin, int64_t row_end,
                                              float* activations) {
  CombineRowsImpl<kDim, kUnitGains>(batch, table, dim, row_begin, row_end, activations);
}

template <int64_t kDim, bool kUnitGains>
TF_EMBEDDING_TARGET_AVX512 void CombineRowsAvx512(const CsrBatch& batch, const float* table,
                                                  int64_t dim, int64_t row_begin,
                                                  int64_t row_end, float* activations) {
  CombineRowsImpl<kDim, kUnitGains>(batch, table, dim, row_begin, row_end, activations);
}
#endif

template <int64_t kDim, bool kUnitGains>
void CombineRowsForIsa(SimdIsa isa, const CsrBatch& batch, const float* table, int64_t dim,
                       int64_t row_begin, int64_t row_end, float* activations) {
#if defined(TF_EMBEDDING_X86_DISPATCH)
  switch (isa) {
    case SimdIsa::kAvx512:
      return CombineRowsAvx512<kDim, kUnitGains>(batch, table, dim, row_begin, row_end,
                                                 activations);
    case SimdIsa::kAvx2:
      return CombineRowsAvx2<kDim, kUnitGains>(batch, table, dim, row_begin, row_end,
                                               activations);
    case SimdIsa::kBaseline:
      break;
  }
#else
  (void)isa;
#endif
  // Baseline ISA: the body inlines here, compiled with the library's own flags.
  CombineRowsImpl<kDim, kUnitGains>(batch, table, dim, row_begin, row_end, activations);
}

template <int64_t kDim>
void CombineRowsForDim(SimdIsa isa, const CsrBatch& batch, const float* table, int64_t dim,
                       int64_t row_begin, int64_t row_end, float* activations) {
  if (batch.gains == nullptr) {
    return CombineRowsForIsa<kDim, true>(isa, batch, table, dim, row_begin, row_end, activations);
  }
  CombineRowsForIsa<kDim, false>(isa, batch, table, dim, row_begin, row_end, activations);
}

}  // namespace

void CombineRows(const CsrBatch& batch, const float* table, int64_t dim, int64_t row_begin,
                 int64_t row_end, float* activations) {
  CombineRowsWithIsa(SelectedSimdIsa(), batch, table, dim, row_begin, row_end, activations);
}

void CombineRowsWithIsa(SimdIsa isa, const CsrBatch& batch, const float* table, int64_t dim,
                        int64_t row_begin, int64_t row_end, float* activations) {
  const int64_t b = row_begin, e = row_end;
  switch (dim) {
    case 8: return CombineRowsForDim<8>(isa, batch, table, dim, b, e, activations);
    case 16: return CombineRowsForDim<16>(isa, batch, table, dim, b, e, activations);
    case 32: return CombineRowsForDim<32>(isa, batch, table, dim, b, e, activations);
    case 64: return CombineRowsForDim<64>(isa, batch, table, dim, b, e, activations);
    case 128: return CombineRowsForDim<128>(isa, batch, table, dim, b, e, activations);
    default: return CombineRowsForDim<0>(isa, batch, table, dim, b, e, activations);
  }
}

}  // namespace tf_embedding
