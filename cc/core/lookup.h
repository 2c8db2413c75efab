// Fused lookup-combine: each output row is the gain-weighted sum of its looked-up table rows.
#ifndef TF_EMBEDDING_CC_CORE_LOOKUP_H_
#define TF_EMBEDDING_CC_CORE_LOOKUP_H_

#include <cstdint>

#include "cc/core/csr_batch.h"
#include "cc/core/simd_dispatch.h"

namespace tf_embedding {

// activations[r, :] = sum over k in row r of gains[k] * table[ids[k], :], summed in lookup
// order, for rows [row_begin, row_end); empty rows become zeros. `batch` must have passed
// ValidateCsrBatch against the table's row count, or be valid with null gains (all 1); `table`
// is [rows, dim] and `activations` [batch.num_rows(), dim], both row-major. Rows are
// independent, so callers may run disjoint ranges concurrently.
// Runs the loop compiled for SelectedSimdIsa().
void CombineRows(const CsrBatch& batch, const float* table, int64_t dim, int64_t row_begin,
                 int64_t row_end, float* activations);

// CombineRows with the loop compiled for `isa`, which gives the same bits as every other ISA.
// REQUIRES: isa is at most SupportedSimdIsa().
void CombineRowsWithIsa(SimdIsa isa, const CsrBatch& batch, const float* table, int64_t dim,
                        int64_t row_begin, int64_t row_end, float* activations);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_LOOKUP_H_
