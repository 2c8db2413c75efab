// A CSR batch for one table (docs/kernels.md, "The CSR batch"): a non-owning view and its
// validation, and the row_splits validator that the CSR conversion shares for ragged inputs.
// Plain C++: kernels wrap tensors in it, core/ algorithms read it.
#ifndef TF_EMBEDDING_CC_CORE_CSR_BATCH_H_
#define TF_EMBEDDING_CC_CORE_CSR_BATCH_H_

#include <cstdint>

#include "cc/core/status.h"

namespace tf_embedding {

// Lookups of output row r are ids[row_splits[r] : row_splits[r + 1]], each weighted by its gain.
// The view does not own the arrays; sizes are those of the underlying tensors, so a malformed
// batch is representable and ValidateCsrBatch can reject it.
struct CsrBatch {
  const int64_t* row_splits = nullptr;
  int64_t num_row_splits = 0;  // R + 1 for a well-formed batch
  const int64_t* ids = nullptr;
  int64_t num_ids = 0;
  // Null (with num_gains 0) means every gain is 1: CombineRows accepts that, from callers that
  // build the batch themselves for the sum combiner; ValidateCsrBatch does not.
  const float* gains = nullptr;
  int64_t num_gains = 0;

  // Only meaningful once validated (num_row_splits >= 1).
  int64_t num_rows() const { return num_row_splits - 1; }
};

// Checks that row_splits has at least one element (the first check of ValidateRowSplits).
Status CheckRowSplitsNotEmpty(int64_t size);

// Checks that row_splits[0 .. size) partitions `num_values` values into size - 1 rows: it is
// non-empty, starts at 0, never decreases and ends at num_values. The one validator of row_splits,
// those of a CSR batch (the lookup, gradient and apply ops) and those of a ragged feature (the CSR
// conversion) alike. Messages name no table: the caller adds what the splits belong to.
Status ValidateRowSplits(const int64_t* row_splits, int64_t size, int64_t num_values);

// Checks that every array access the batch implies stays in bounds: valid row_splits (above),
// one gain per id, and every id in [0, vocabulary_size). A negative vocabulary_size means
// "unknown": ids are only checked to be non-negative. Messages name no table.
Status ValidateCsrBatch(const CsrBatch& batch, int64_t vocabulary_size);

// The checks of ValidateCsrBatch that need only the sizes of the arrays: row_splits is not
// empty and there is one gain per id: what the XLA kernels check when they compile, for shapes.
Status ValidateCsrBatchSizes(int64_t num_row_splits, int64_t num_ids, int64_t num_gains);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_CSR_BATCH_H_
