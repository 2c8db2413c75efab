// The gather-sum of one output row, shared by the kernels that combine rows (CombineRows, and
// CombineSparseRows, which reads its rows' lookups straight from a sparse or ragged feature), so
// that both give the same bits: each row is 0 + gain * its first looked-up table row, then each
// further one added in lookup order (a gain of 1 adds the row as it is, which is the same
// value).
//
// Both are inlined (always_inline) into the kernels' per-ISA wrappers (isa_dispatch.h), so their
// loops vectorise for the ISA of each.
#ifndef TF_EMBEDDING_CC_CORE_COMBINE_ROW_H_
#define TF_EMBEDDING_CC_CORE_COMBINE_ROW_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "cc/core/cache_lines.h"

namespace tf_embedding {

// Prefetches the table rows of the lookups a fixed distance ahead of the one being combined:
// tables are usually far larger than the caches and ids are random, so each row would otherwise
// cost a full memory latency. The distance keeps 128 lines in flight, enough to cover it
// (measured on 1M x 64 tables: 8 lookups ahead took 1.6x as long as 32). The ids it reads must
// exist (below `end`). With `id_bound` (>= 1, at most the table's rows) given, they need not be
// checked yet: an id at or above it (or negative) prefetches row id_bound - 1 instead, so every
// address it forms lies in the table; without, they must be below the table's rows.
template <int64_t kDim>
class RowPrefetcher {
 public:
  RowPrefetcher(const int64_t* ids, const float* table, int64_t dim, int64_t end,
                uint64_t id_bound = std::numeric_limits<uint64_t>::max())
      : ids_(ids),
        table_(table),
        dim_(kDim > 0 ? kDim : dim),
        distance_(RowsAhead(/*lines_ahead=*/128, CacheLinesPerRow(dim_), /*min_rows=*/4)),
        end_(end),
        last_id_(id_bound - 1) {}

  // Prefetches the rows of the first lookups, [begin, begin + distance), which no earlier
  // lookup prefetches, at once, so that their misses overlap instead of stalling the first rows
  // one by one. Callers combine many short ranges (a thread's share of rows), so these misses
  // are not rare.
  __attribute__((always_inline)) void Start(int64_t begin) const {
    for (int64_t k = begin; k < std::min(end_, begin + distance_); ++k) Prefetch(k);
  }

  // Called as lookup k is combined.
  __attribute__((always_inline)) void Ahead(int64_t k) const {
    if (k + distance_ < end_) Prefetch(k + distance_);
  }

 private:
  __attribute__((always_inline)) void Prefetch(int64_t k) const {
    const uint64_t id = std::min(static_cast<uint64_t>(ids_[k]), last_id_);
    const float* row = table_ + static_cast<int64_t>(id) * dim_;
    for (int64_t j = 0; j < dim_; j += kFloatsPerCacheLine) __builtin_prefetch(row + j);
  }

  const int64_t* ids_;
  const float* table_;
  int64_t dim_, distance_, end_;
  uint64_t last_id_;
};

// out[:] = sum over k in [begin, end) of gain(k) * table[ids[k], :], in lookup order; zeros
// when the row has no lookups. kDim > 0 fixes the dimension at compile time, and the sum then
// lives in registers; kDim == 0 handles any dimension, summing in `out`. kUnitGains: every gain
// is 1 and the rows are added as they are, which gives the same bits (1 * x == x) for half the
// arithmetic and no gains to read. The ids must be in the table's bounds.
template <int64_t kDim, bool kUnitGains, typename Gain>
__attribute__((always_inline)) inline void CombineRow(const int64_t* __restrict ids,
                                                      int64_t begin, int64_t end, Gain gain,
                                                      const float* __restrict table, int64_t dim,
                                                      const RowPrefetcher<kDim>& prefetcher,
                                                      float* __restrict out) {
  const int64_t d = kDim > 0 ? kDim : dim;
  if (begin == end) {
    std::fill(out, out + d, 0.0f);
    return;
  }
  // The first lookup sets the sum to 0 + term, the value of summing from zero, so the sum's
  // registers need no zeroed memory behind them.
  float register_sum[kDim > 0 ? kDim : 1];
  float* __restrict sum = kDim > 0 ? register_sum : out;
  prefetcher.Ahead(begin);
  // A gain of 1 (the sum combiner's, whenever the caller has gains at all) adds the row
  // without the multiplication: a predictable branch costs less than the products.
  const float first_gain = kUnitGains ? 1.0f : gain(begin);
  const float* __restrict first_row = table + ids[begin] * d;
  if (first_gain == 1.0f) {
    for (int64_t j = 0; j < d; ++j) sum[j] = 0.0f + first_row[j];
  } else {
    for (int64_t j = 0; j < d; ++j) sum[j] = 0.0f + first_gain * first_row[j];
  }
  for (int64_t k = begin + 1; k < end; ++k) {
    prefetcher.Ahead(k);
    const float g = kUnitGains ? 1.0f : gain(k);
    const float* __restrict row = table + ids[k] * d;
    if (g == 1.0f) {
      for (int64_t j = 0; j < d; ++j) sum[j] += row[j];
    } else {
      for (int64_t j = 0; j < d; ++j) sum[j] += g * row[j];
    }
  }
  if (kDim > 0) std::copy(sum, sum + d, out);
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_COMBINE_ROW_H_
