// The forward lookup of a pooled rank-2 sparse feature straight from its indices and ids, without
// building its CSR batch first: what TfeFeaturesLookup runs when its inputs allow (see
// docs/internals.md). The sums are CombineRows' (same gains, same order), so the activations are
// bit-identical to converting the feature (CsrBuilder) and looking the batch up.
#ifndef TF_EMBEDDING_CC_CORE_SPARSE_LOOKUP_H_
#define TF_EMBEDDING_CC_CORE_SPARSE_LOOKUP_H_

#include <cstdint>

#include "cc/core/csr_conversion.h"

namespace tf_embedding {

// The lookups of one rank-2 SparseTensor without weights: lookup k has output row indices[2k],
// column indices[2k + 1] and id ids[k].
struct SparseLookups {
  const int64_t* indices = nullptr;  // [nnz, 2], row-major
  const int64_t* ids = nullptr;      // [nnz]
  int64_t nnz = 0;
  int64_t rows = 0;     // dense_shape[0]: the output rows
  int64_t columns = 0;  // dense_shape[1]
};

// The first lookup of `row` or of a later row, by binary search: meaningful when the lookups are
// in row order, which CombineSparseRows checks.
int64_t FirstLookupOfRow(const SparseLookups& lookups, int64_t row);

// Whether lookups [begin, end) are valid and in row order, each after the one before it (lookup
// begin after lookup begin - 1 too): SparseLookupsValidInRowOrder over a range. All ranges of a
// partition of [0, nnz) passing is SparseLookupsValidInRowOrder of the whole feature.
bool SparseLookupRangeValid(const SparseLookups& lookups, int64_t begin, int64_t end,
                            int64_t vocabulary_size);

// activations[r, :] for output rows [row_begin, row_end), whose lookups should be
// [lookup_begin, lookup_end): the combiner's gain times each looked-up table row, summed in lookup
// order as CombineRows does; rows without lookups become zeros. `activations` is
// [lookups.rows, dim]; `table` has at least `vocabulary_size` rows.
// First checks those lookups (SparseLookupRangeValid, and their rows within the range) and
// returns false, having read no table row and written nothing, if they fail. Called on ranges of
// a partition of the rows, from 0 to lookups.rows, with lookup ranges partitioning [0, nnz)
// (from FirstLookupOfRow of each range's first row): all returning true means the whole feature
// is valid and in row order, so each range combined exactly its rows' lookups. Ranges are
// independent, so callers may run them concurrently.
bool CombineSparseRows(const SparseLookups& lookups, int64_t vocabulary_size, Combiner combiner,
                       const float* table, int64_t dim, int64_t row_begin, int64_t row_end,
                       int64_t lookup_begin, int64_t lookup_end, float* activations);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_SPARSE_LOOKUP_H_
