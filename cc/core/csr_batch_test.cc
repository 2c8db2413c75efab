// ValidateRowSplits and ValidateCsrBatch: valid batches pass, and each fault is reported with
// its message (the ones the ops' Python tests match, without the table prefix).
#include "cc/core/csr_batch.h"

#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

using Batch = testing::CsrArrays;

Status ValidateSplits(const std::vector<int64_t>& splits, int64_t num_values) {
  return ValidateRowSplits(splits.data(), static_cast<int64_t>(splits.size()), num_values);
}

TFE_TEST(RowSplitsAcceptsPartitions) {
  TFE_EXPECT_OK(ValidateSplits({0}, 0));
  TFE_EXPECT_OK(ValidateSplits({0, 0, 2, 2, 5}, 5));
  TFE_EXPECT_OK(ValidateSplits({0, 3}, 3));
}

TFE_TEST(RowSplitsErrors) {
  TFE_EXPECT_ERROR(ValidateSplits({}, 0),
                   "row_splits must have at least one element (R + 1 for R rows), got none");
  TFE_EXPECT_ERROR(ValidateSplits({1, 2, 3}, 3), "row_splits[0] must be 0, got 1");
  TFE_EXPECT_ERROR(ValidateSplits({0, 3, 2, 3}, 3),
                   "row_splits must be non-decreasing, but row_splits[2] = 2 < row_splits[1] = 3");
  TFE_EXPECT_ERROR(ValidateSplits({0, 2}, 3), "row_splits[1] = 2 must equal the number of ids, 3");
  TFE_EXPECT_ERROR(ValidateSplits({0, 2, 4}, 3),
                   "row_splits[2] = 4 must equal the number of ids, 3");
}

TFE_TEST(CsrBatchAcceptsIdsBelowTheVocabulary) {
  const Batch batch{{0, 2, 3}, {0, 3, 1}, {1, 1, 1}};
  TFE_EXPECT_OK(ValidateCsrBatch(batch.View(), 4));
  TFE_EXPECT_OK(ValidateCsrBatch(batch.View(), -1));
  const Batch empty{{0, 0}, {}, {}};
  TFE_EXPECT_OK(ValidateCsrBatch(empty.View(), 0));
  TFE_EXPECT_EQ(empty.View().num_rows(), 1);
}

TFE_TEST(CsrBatchErrors) {
  TFE_EXPECT_ERROR(ValidateCsrBatch(Batch{{0, 3, 1}, {0, 1, 2}, {1, 1, 1}}.View(), 4),
                   "row_splits must be non-decreasing, but row_splits[2] = 1 < row_splits[1] = 3");
  TFE_EXPECT_ERROR(ValidateCsrBatch(Batch{{0, 3}, {0, 1, 2}, {1, 1}}.View(), 4),
                   "gains has 2 elements but ids has 3");
  TFE_EXPECT_ERROR(ValidateCsrBatch(Batch{{0, 3}, {0, 5, 1}, {1, 1, 1}}.View(), 4),
                   "id 5 at ids[1] is out of range for vocabulary size 4");
  TFE_EXPECT_ERROR(ValidateCsrBatch(Batch{{0, 3}, {0, 1, -1}, {1, 1, 1}}.View(), 4),
                   "id -1 at ids[2] is out of range for vocabulary size 4");
  // Unknown vocabulary: only the sign is checked.
  TFE_EXPECT_OK(ValidateCsrBatch(Batch{{0, 1}, {int64_t{1} << 62}, {1}}.View(), -1));
  TFE_EXPECT_ERROR(ValidateCsrBatch(Batch{{0, 2}, {3, -7}, {1, 1}}.View(), -1),
                   "id -7 at ids[1] is negative");
}

// The checks the XLA kernels make when they compile, from the arrays' sizes alone.
TFE_TEST(CsrBatchSizes) {
  TFE_EXPECT_OK(ValidateCsrBatchSizes(3, 5, 5));
  TFE_EXPECT_OK(ValidateCsrBatchSizes(1, 0, 0));
  TFE_EXPECT_ERROR(ValidateCsrBatchSizes(0, 0, 0),
                   "row_splits must have at least one element (R + 1 for R rows), got none");
  TFE_EXPECT_ERROR(ValidateCsrBatchSizes(3, 5, 4), "gains has 4 elements but ids has 5");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
