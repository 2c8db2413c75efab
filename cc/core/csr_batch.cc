#include "cc/core/csr_batch.h"

#include "cc/core/errors.h"
#include "cc/core/range_checks.h"

namespace tf_embedding {
namespace {

Status CheckGainsCount(int64_t num_gains, int64_t num_ids) {
  if (num_gains == num_ids) return Status();
  return InvalidArgument("gains has ", num_gains, " elements but ids has ", num_ids);
}

}  // namespace

Status CheckRowSplitsNotEmpty(int64_t size) {
  if (size >= 1) return Status();
  return InvalidArgument("row_splits must have at least one element (R + 1 for R rows), got none");
}

Status ValidateRowSplits(const int64_t* row_splits, int64_t size, int64_t num_values) {
  TFE_RETURN_IF_ERROR(CheckRowSplitsNotEmpty(size));
  if (row_splits[0] != 0) return InvalidArgument("row_splits[0] must be 0, got ", row_splits[0]);
  for (int64_t r = 1; r < size; ++r) {
    if (row_splits[r] < row_splits[r - 1]) {
      return InvalidArgument("row_splits must be non-decreasing, but row_splits[", r, "] = ",
                             row_splits[r], " < row_splits[", r - 1, "] = ", row_splits[r - 1]);
    }
  }
  const int64_t last = row_splits[size - 1];
  if (last != num_values) {
    return InvalidArgument("row_splits[", size - 1, "] = ", last,
                           " must equal the number of ids, ", num_values);
  }
  return Status();
}

Status ValidateCsrBatch(const CsrBatch& batch, int64_t vocabulary_size) {
  TFE_RETURN_IF_ERROR(ValidateRowSplits(batch.row_splits, batch.num_row_splits, batch.num_ids));
  TFE_RETURN_IF_ERROR(CheckGainsCount(batch.num_gains, batch.num_ids));
  // Unsigned comparison folds the two bounds into one test; a negative bound admits every
  // non-negative id.
  const uint64_t bound = vocabulary_size < 0 ? (uint64_t{1} << 63) : vocabulary_size;
  if (AllInRange(batch.ids, batch.num_ids, bound)) return Status();
  for (int64_t k = 0; k < batch.num_ids; ++k) {
    if (static_cast<uint64_t>(batch.ids[k]) >= bound) {
      return Status::Error(
          IdOutOfRange(batch.ids[k], ElementName("ids", k), vocabulary_size));
    }
  }
  return Status();
}

Status ValidateCsrBatchSizes(int64_t num_row_splits, int64_t num_ids, int64_t num_gains) {
  TFE_RETURN_IF_ERROR(CheckRowSplitsNotEmpty(num_row_splits));
  return CheckGainsCount(num_gains, num_ids);
}

}  // namespace tf_embedding
