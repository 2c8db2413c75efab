#include "cc/core/sparse_lookup.h"

#include <algorithm>

#include "cc/core/combine_row.h"
#include "cc/core/isa_dispatch.h"

namespace tf_embedding {
namespace {

// The first of the sparse lookups [low, high) whose row is `row` or later, by binary search.
int64_t FirstSparseLookupOfRow(const int64_t* indices, int64_t low, int64_t high, int64_t row) {
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (indices[2 * middle] < row) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// Whether the lookups [first, last) of a chunk of rows [chunk, chunk + span) are valid: each
// one's row within the chunk and not before the previous one's, its column and id in bounds.
// Unsigned compares reject negative values too, and no difference overflows. Branch-free and
// without stores, so that its loops vectorise: with the row ends found in the same loop (a store
// per lookup), the sparse forward took 7%-13% longer (tools/core_ab/run.sh, Zipf ids, one
// thread, AVX2 EPYC).
__attribute__((always_inline)) inline bool ChunkLookupsValid(
    const int64_t* __restrict indices, const int64_t* __restrict ids, int64_t first,
    int64_t last, int64_t chunk, uint64_t span, uint64_t columns, uint64_t vocabulary) {
  if (first == last) return true;
  const uint64_t start = static_cast<uint64_t>(chunk);
  uint64_t bad = static_cast<uint64_t>(indices[2 * first]) - start >= span;
  for (int64_t k = first; k < last; ++k) {
    bad |= (static_cast<uint64_t>(indices[2 * k + 1]) >= columns) |
           (static_cast<uint64_t>(ids[k]) >= vocabulary);
  }
  // Rows non-decreasing, and the last one within the chunk: then every one is.
  for (int64_t k = first + 1; k < last; ++k) bad |= indices[2 * k] < indices[2 * k - 2];
  bad |= static_cast<uint64_t>(indices[2 * (last - 1)]) - start >= span;
  return bad == 0;
}

// Whether ids[begin, end) are all below `vocabulary` (unsigned compares reject negative ids
// too), without branches, so that the loop vectorises.
__attribute__((always_inline)) inline bool IdsBelow(const int64_t* __restrict ids, int64_t begin,
                                                    int64_t end, uint64_t vocabulary) {
  uint64_t bad = 0;
  for (int64_t k = begin; k < end; ++k) bad |= static_cast<uint64_t>(ids[k]) >= vocabulary;
  return bad == 0;
}

// Sparse features are checked and combined a chunk of rows at a time.
constexpr int64_t kChunkRows = 64;

// CombineSparseRows (isa_dispatch.h). A sparse feature's rows are checked and combined a chunk at
// a time, a ragged feature's row by row; either way with one prefetcher over the whole range, so
// the rows' fetches run on across chunks and rows. kUnitGains: the sum combiner, whose gains are
// all 1.
template <bool kUnitGains>
struct CombineSparseRowsKernel {
  // One row's lookups [begin, end), checked, into `out`, each with the gain its combiner gives
  // a row of that many lookups without weights.
  template <int64_t kDim>
  __attribute__((always_inline)) static void CombineLookups(
      Combiner combiner, const int64_t* ids, int64_t begin, int64_t end, const float* table,
      int64_t dim, const RowPrefetcher<kDim>& prefetcher, float* out) {
    const float gain = kUnitGains ? 1.0f : UnitWeightGain(combiner, end - begin);
    CombineRow<kDim, kUnitGains>(ids, begin, end, [gain](int64_t) { return gain; }, table, dim,
                                 prefetcher, out);
  }

  template <int64_t kDim>
  __attribute__((always_inline)) static bool Run(const SparseLookups* lookups,
                                                 uint64_t vocabulary, Combiner combiner,
                                                 const float* table, int64_t dim,
                                                 int64_t row_begin, int64_t row_end,
                                                 int64_t lookup_begin, int64_t lookup_end,
                                                 float* activations) {
    if (lookups->row_splits != nullptr || lookups->dense) {
      // A dense range's lookups are its rows (FirstLookupOfRow).
      if (lookups->dense && (lookup_begin != row_begin || lookup_end != row_end)) return false;
      return RunRowSplits<kDim>(*lookups, vocabulary, combiner, table, dim, row_begin, row_end,
                                activations);
    }
    const int64_t d = kDim > 0 ? kDim : dim;
    const int64_t* indices = lookups->indices;
    const int64_t* ids = lookups->ids;
    const uint64_t columns = lookups->columns;
    const RowPrefetcher<kDim> prefetcher(ids, table, d, lookup_end, vocabulary);
    prefetcher.Start(lookup_begin);
    // A chunk of rows at a time: its lookups checked, its rows' ends found (a few cache lines,
    // kept in L1), then its rows combined.
    int64_t row_ends[kChunkRows + 1];
    int64_t next = lookup_begin;
    for (int64_t chunk = row_begin; chunk < row_end; chunk += kChunkRows) {
      const int64_t chunk_rows = std::min(kChunkRows, row_end - chunk);
      const uint64_t span = chunk_rows;
      // The chunk's lookups: from `next` to the first lookup of the next chunk's first row (by
      // binary search, as if the rows were in order: the checks below fail if they are not), or
      // to the range's end for its last chunk.
      const int64_t first = next;
      const int64_t last =
          chunk + chunk_rows == row_end
              ? lookup_end
              : FirstSparseLookupOfRow(indices, first, lookup_end, chunk + chunk_rows);
      if (!ChunkLookupsValid(indices, ids, first, last, chunk, span, columns, vocabulary)) {
        return false;
      }
      // Each lookup writes its position + 1 as its row's end, so the last lookup of a row
      // leaves the row's end there (a separate pass: its stores would keep the checks above
      // from vectorising).
      std::fill(row_ends, row_ends + chunk_rows + 1, first);
      for (int64_t k = first; k < last; ++k) row_ends[indices[2 * k] - chunk + 1] = k + 1;
      for (int64_t r = 0; r < chunk_rows; ++r) {
        // A row without lookups ends where the row before it does.
        const int64_t begin = row_ends[r], end = std::max(row_ends[r + 1], begin);
        row_ends[r + 1] = end;
        CombineLookups<kDim>(combiner, ids, begin, end, table, d, prefetcher,
                             activations + (chunk + r) * d);
      }
      next = last;
    }
    // The last chunk took the range's remaining lookups; a range without rows must have none.
    return next == lookup_end;
  }

  // Run's ragged and dense cases: row r's lookups are [split(r), split(r + 1)), the ragged
  // feature's row_splits, or for a dense feature (one lookup per row) the splits 0, 1, ..., nnz.
  template <int64_t kDim>
  __attribute__((always_inline)) static bool RunRowSplits(const SparseLookups& lookups,
                                                          uint64_t vocabulary, Combiner combiner,
                                                          const float* table, int64_t dim,
                                                          int64_t row_begin, int64_t row_end,
                                                          float* activations) {
    const int64_t d = kDim > 0 ? kDim : dim;
    const int64_t* splits = lookups.row_splits;
    const auto split = [splits](int64_t r) { return splits != nullptr ? splits[r] : r; };
    const uint64_t nnz = lookups.nnz;
    if ((row_begin == 0 && split(0) != 0) ||
        (row_end == lookups.rows && split(lookups.rows) != lookups.nnz)) {
      return false;
    }
    // Splits non-decreasing within [0, nnz] (unsigned compares reject negative ones too). The
    // prefetcher reads ids up to the range's last split, or nnz if that one is out of bounds.
    const RowPrefetcher<kDim> prefetcher(
        lookups.ids, table, d,
        static_cast<int64_t>(std::min(static_cast<uint64_t>(split(row_end)), nnz)), vocabulary);
    int64_t begin = split(row_begin);
    if (static_cast<uint64_t>(begin) > nnz) return false;
    prefetcher.Start(begin);
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t end = split(r + 1);
      if (end < begin || static_cast<uint64_t>(end) > nnz ||
          !IdsBelow(lookups.ids, begin, end, vocabulary)) {
        return false;
      }
      CombineLookups<kDim>(combiner, lookups.ids, begin, end, table, d, prefetcher,
                           activations + r * d);
      begin = end;
    }
    return true;
  }
};

}  // namespace

bool AsSparseLookups(const std::string& table_name, const FeatureSpec& spec,
                     const FeatureTensors& t, FeatureLayout* layout, SparseLookups* lookups) {
  const bool sparse = spec.kind == InputKind::kSparse;
  if (spec.has_weights || !t.ids.is_int64() ||
      spec.max_sequence_length != 0 || (sparse && t.dense_shape.size != 2) ||
      !FeatureLayoutOf(table_name, spec, t, layout).ok() || layout->sequence) {
    return false;
  }
  *lookups = SparseLookups();
  lookups->ids = t.ids.int64_data();
  lookups->nnz = t.ids.size();
  lookups->rows = layout->num_rows;
  switch (spec.kind) {
    case InputKind::kSparse:
      lookups->indices = t.row_info.data;
      lookups->columns = t.dense_shape[1];
      break;
    case InputKind::kRagged:
      lookups->row_splits = t.row_info.data;
      break;
    case InputKind::kDense:
      lookups->dense = true;
      break;
  }
  return true;
}

int64_t FirstLookupOfRow(const SparseLookups& lookups, int64_t row) {
  if (lookups.row_splits != nullptr) return lookups.row_splits[row];
  if (lookups.dense) return row;
  return FirstSparseLookupOfRow(lookups.indices, 0, lookups.nnz, row);
}

bool CombineSparseRows(const SparseLookups& lookups, int64_t vocabulary_size, Combiner combiner,
                       const float* table, int64_t dim, int64_t row_begin, int64_t row_end,
                       int64_t lookup_begin, int64_t lookup_end, float* activations) {
  return CombineSparseRowsWithIsa(SelectedSimdIsa(), lookups, vocabulary_size, combiner, table,
                                  dim, row_begin, row_end, lookup_begin, lookup_end,
                                  activations);
}

bool CombineSparseRowsWithIsa(SimdIsa isa, const SparseLookups& lookups,
                              int64_t vocabulary_size, Combiner combiner, const float* table,
                              int64_t dim, int64_t row_begin, int64_t row_end,
                              int64_t lookup_begin, int64_t lookup_end, float* activations) {
  // The checks need a vocabulary (the conversion reports its absence), and the prefetcher
  // bounds the ids it has not checked yet by it.
  if (vocabulary_size < 1) return false;
  const uint64_t vocabulary = vocabulary_size;
  if (combiner == Combiner::kSum) {
    return RunForIsaAndDim<CombineSparseRowsKernel<true>>(
        isa, dim, &lookups, vocabulary, combiner, table, dim, row_begin, row_end, lookup_begin,
        lookup_end, activations);
  }
  return RunForIsaAndDim<CombineSparseRowsKernel<false>>(
      isa, dim, &lookups, vocabulary, combiner, table, dim, row_begin, row_end, lookup_begin,
      lookup_end, activations);
}

}  // namespace tf_embedding
