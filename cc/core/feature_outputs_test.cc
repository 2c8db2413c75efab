// Rows per feature against output shapes: full batches, smaller final batches of whole samples,
// and counts that do not describe the activations.
#include "cc/core/feature_outputs.h"

#include <cstdint>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

// Two features of table "t": pooled [4, 3] and a sequence [2, 5, 3] (5 rows per sample).
FeatureOutputsSpec TwoFeatures(bool partial) {
  return {"t", {{4, 3}, {2, 5, 3}}, partial, "Table t: the rows do not fit."};
}

Status FirstDims(const FeatureOutputsSpec& spec, std::vector<int64_t> counts, int64_t rows,
                 std::vector<int64_t>* first_dims, int64_t dim = 3) {
  return FeatureOutputFirstDims(spec, counts.data(), static_cast<int64_t>(counts.size()), rows,
                                dim, first_dims);
}

TFE_TEST(AFullBatchHasTheShapesFirstDimensions) {
  std::vector<int64_t> first_dims;
  TFE_ASSERT_OK(FirstDims(TwoFeatures(false), {4, 10}, 14, &first_dims));
  TFE_EXPECT_EQ(first_dims, (std::vector<int64_t>{4, 2}));
}

TFE_TEST(AFullBatchMustFillEveryShape) {
  std::vector<int64_t> first_dims;
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(false), {3, 10}, 13, &first_dims),
                   "Table t: the rows do not fit. Rows per feature: [3, 10].");
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(false), {4, 5}, 9, &first_dims),
                   "Table t: the rows do not fit. Rows per feature: [4, 5].");
}

TFE_TEST(APartialBatchHasWholeSamplesUpToTheShapes) {
  std::vector<int64_t> first_dims;
  TFE_ASSERT_OK(FirstDims(TwoFeatures(true), {3, 5}, 8, &first_dims));
  TFE_EXPECT_EQ(first_dims, (std::vector<int64_t>{3, 1}));
  TFE_ASSERT_OK(FirstDims(TwoFeatures(true), {0, 0}, 0, &first_dims));
  TFE_EXPECT_EQ(first_dims, (std::vector<int64_t>{0, 0}));
  // Part of a sample, or more rows than the shape holds.
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(true), {3, 6}, 9, &first_dims),
                   "Table t: the rows do not fit. Rows per feature: [3, 6].");
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(true), {5, 5}, 10, &first_dims),
                   "Table t: the rows do not fit. Rows per feature: [5, 5].");
}

TFE_TEST(SamplesWithoutRowsKeepTheShapesBatchSize) {
  const FeatureOutputsSpec spec{"t", {{2, 0, 3}}, /*partial=*/true, "No fit."};
  std::vector<int64_t> first_dims;
  TFE_ASSERT_OK(FirstDims(spec, {0}, 0, &first_dims));
  TFE_EXPECT_EQ(first_dims, (std::vector<int64_t>{2}));
  TFE_EXPECT_ERROR(FirstDims(spec, {1}, 1, &first_dims), "No fit. Rows per feature: [1].");
}

// Shapes fixed while the batch size was unknown (a distributed dataset's, traced): any number
// of whole samples, only in a partial batch, only of samples that have rows.
TFE_TEST(AnUnknownBatchDimensionTakesAnyNumberOfWholeSamples) {
  const FeatureOutputsSpec spec{"t", {{-1, 3}, {-1, 5, 3}}, /*partial=*/true, "No fit."};
  std::vector<int64_t> first_dims;
  TFE_ASSERT_OK(FirstDims(spec, {1000, 5000}, 6000, &first_dims));
  TFE_EXPECT_EQ(first_dims, (std::vector<int64_t>{1000, 1000}));
  TFE_EXPECT_ERROR(FirstDims(spec, {2, 6}, 8, &first_dims), "No fit. Rows per feature: [2, 6].");
  const FeatureOutputsSpec full{"t", {{-1, 3}}, /*partial=*/false, "No fit."};
  TFE_EXPECT_ERROR(FirstDims(full, {2}, 2, &first_dims),
                   "Table 't': output shape 0 has an unknown batch dimension, which only a "
                   "partial batch of samples with rows may have");
  const FeatureOutputsSpec rowless{"t", {{-1, 0, 3}}, /*partial=*/true, "No fit."};
  TFE_EXPECT_ERROR(FirstDims(rowless, {0}, 0, &first_dims),
                   "Table 't': output shape 0 has an unknown batch dimension, which only a "
                   "partial batch of samples with rows may have");
}

TFE_TEST(CountsThatDoNotDescribeTheActivationsFail) {
  std::vector<int64_t> first_dims;
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(false), {4, 10}, 15, &first_dims),
                   "Table 't': the rows per feature [4, 10] do not add up to the activations' "
                   "15 rows");
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(false), {4}, 4, &first_dims),
                   "Table 't': feature_row_counts has 1 entries for 2 features");
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(true), {-5, 10}, 5, &first_dims),
                   "Table 't': feature_row_counts[0] = -5 is negative");
  TFE_EXPECT_ERROR(FirstDims(TwoFeatures(false), {4, 10}, 14, &first_dims, /*dim=*/4),
                   "Table 't': output shape 0 has 2 dimensions, the last of them not the "
                   "activations' 4");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
