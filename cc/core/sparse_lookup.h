// The forward lookup of a pooled rank-2 sparse or ragged feature straight from its indices (row
// splits) and ids, or of a dense one from its ids, without building its CSR batch first: what
// TfeFeaturesLookup runs when its inputs allow (see docs/kernels.md). The sums are CombineRows'
// (same gains, same order), so the activations are bit-identical to converting the feature
// (CsrBuilder) and looking the batch up.
#ifndef TF_EMBEDDING_CC_CORE_SPARSE_LOOKUP_H_
#define TF_EMBEDDING_CC_CORE_SPARSE_LOOKUP_H_

#include <cstdint>
#include <string>

#include "cc/core/csr_conversion.h"
#include "cc/core/simd_dispatch.h"

namespace tf_embedding {

// The lookups of one pooled feature without weights, read in place: a rank-2 SparseTensor (lookup
// k has output row indices[2k], column indices[2k + 1] and id ids[k]) or, when row_splits is set,
// a ragged feature (row r's lookups are [row_splits[r], row_splits[r + 1]); indices unused), or
// when `dense` is set a dense feature (one row per id: row r's only lookup is r).
struct SparseLookups {
  const int64_t* indices = nullptr;     // sparse: [nnz, 2], row-major
  const int64_t* ids = nullptr;         // [nnz]
  int64_t nnz = 0;
  int64_t rows = 0;     // the output rows: dense_shape[0], or ragged rows
  int64_t columns = 0;  // sparse: dense_shape[1]
  const int64_t* row_splits = nullptr;  // ragged: [rows + 1]
  bool dense = false;                   // rows == nnz; indices and row_splits unused
};

// The feature as SparseLookups, with its output rows in *layout, if TfeFeaturesLookup may combine
// it directly: a pooled (max_sequence_length 0) rank-2 sparse, ragged or dense feature without
// weights, with int64 ids, whose tensors' sizes pass FeatureLayoutOf. Else false (the conversion
// then checks it).
bool AsSparseLookups(const std::string& table_name, const FeatureSpec& spec,
                     const FeatureTensors& t, FeatureLayout* layout, SparseLookups* lookups);

// The first lookup of `row` or of a later row (by binary search for a sparse feature):
// meaningful when the lookups are in row order, which CombineSparseRows checks. Ragged features:
// row_splits[row], which CombineSparseRows checks; dense ones: `row`.
int64_t FirstLookupOfRow(const SparseLookups& lookups, int64_t row);

// activations[r, :] for output rows [row_begin, row_end), whose lookups should be [lookup_begin,
// lookup_end): the combiner's gain times each looked-up table row, summed in lookup order as
// CombineRows does; rows without lookups become zeros. `activations` is [lookups.rows, dim];
// `table` has at least `vocabulary_size` rows. Returns false if those lookups are not exactly the
// range's rows' in row order, or one has a column or id out of bounds (dense_shape[1],
// vocabulary_size), or (ragged) the range's row_splits decrease, leave [0, nnz], or do not start at
// 0 (the first range) or end at nnz (the last), or (dense) the lookups are not the range's rows,
// having read only table rows of checked lookups. A sparse feature's rows are combined a chunk at a
// time, each chunk's lookups checked as its rows are found; a ragged or dense feature's row by row,
// each row's checked first.
// Called on ranges of a partition of the rows [0, lookups.rows), the first range's lookups from
// 0, the last's to nnz, the others' bounds from FirstLookupOfRow: all returning true means the
// whole feature is valid and in row order, so each range combined exactly its rows' lookups
// (every lookup lies in some range's [lookup_begin, lookup_end), whatever the bounds; one lying
// in two ranges' would have failed one of them, their rows being disjoint). Ranges are
// independent, so callers may run them concurrently.
// Runs the loop compiled for SelectedSimdIsa().
bool CombineSparseRows(const SparseLookups& lookups, int64_t vocabulary_size, Combiner combiner,
                       const float* table, int64_t dim, int64_t row_begin, int64_t row_end,
                       int64_t lookup_begin, int64_t lookup_end, float* activations);

// CombineSparseRows with the loop compiled for `isa`, which gives the same bits as every other
// ISA. REQUIRES: isa is at most SupportedSimdIsa().
bool CombineSparseRowsWithIsa(SimdIsa isa, const SparseLookups& lookups,
                              int64_t vocabulary_size, Combiner combiner, const float* table,
                              int64_t dim, int64_t row_begin, int64_t row_end,
                              int64_t lookup_begin, int64_t lookup_end, float* activations);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_SPARSE_LOOKUP_H_
