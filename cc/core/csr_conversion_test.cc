// CsrBuilder: the row layout of each input kind, the combiners folded into gains, pruning,
// stacking of several features, and errors that name the table and feature.
#include "cc/core/csr_conversion.h"

#include <cmath>
#include <limits>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

// One feature's spec and tensors, owning the arrays.
struct Feature {
  FeatureSpec spec;
  std::vector<int64_t> ids;
  std::vector<int64_t> row_info;  // sparse indices (row-major) or ragged row_splits
  std::vector<int64_t> row_info_shape;
  std::vector<int64_t> dense_shape;
  std::vector<float> weights;
};

struct Csr {
  std::vector<int64_t> row_splits;
  std::vector<int64_t> ids;
  std::vector<float> gains;
  std::vector<int64_t> feature_row_counts;
};

FeatureSpec Spec(InputKind kind, bool has_weights = false, int64_t max_sequence_length = 0,
                 bool prune_invalid = false) {
  return {"f", kind, has_weights, max_sequence_length, prune_invalid};
}

template <typename T>
Span<T> SpanOf(const std::vector<T>& values) {
  return {values.data(), static_cast<int64_t>(values.size())};
}

FeatureTensors TensorsOf(const Feature& feature) {
  FeatureTensors tensors;
  tensors.ids = IdSpan(feature.ids.data(), static_cast<int64_t>(feature.ids.size()));
  tensors.row_info = SpanOf(feature.row_info);
  tensors.row_info_shape = feature.row_info_shape;
  tensors.dense_shape = SpanOf(feature.dense_shape);
  tensors.weights = SpanOf(feature.weights);
  return tensors;
}

Status AddFeatures(const std::vector<Feature>& features, CsrBuilder* builder) {
  for (const Feature& feature : features) {
    TFE_RETURN_IF_ERROR(builder->AddFeature(feature.spec, TensorsOf(feature)));
  }
  return Status();
}

Status Convert(const std::vector<Feature>& features, Csr* out, Combiner combiner = Combiner::kSum,
               int64_t vocabulary_size = 10) {
  CsrBuilder builder(TableSpec{"tbl", vocabulary_size, combiner});
  TFE_RETURN_IF_ERROR(AddFeatures(features, &builder));
  out->row_splits.assign(builder.num_rows() + 1, -1);
  out->ids.assign(builder.num_lookups(), -1);
  out->gains.assign(builder.num_lookups(), -1.0f);
  builder.Build(out->row_splits.data(), out->ids.data(), out->gains.data());
  out->feature_row_counts = builder.feature_row_counts();
  return Status();
}

Feature Sparse(std::vector<int64_t> ids, std::vector<int64_t> indices,
               std::vector<int64_t> dense_shape, FeatureSpec spec = Spec(InputKind::kSparse)) {
  const int64_t rank = static_cast<int64_t>(dense_shape.size());
  const int64_t nnz = static_cast<int64_t>(ids.size());
  return {spec, std::move(ids), std::move(indices), {nnz, rank}, std::move(dense_shape), {}};
}

Feature Ragged(std::vector<int64_t> ids, std::vector<int64_t> row_splits,
               FeatureSpec spec = Spec(InputKind::kRagged)) {
  return {spec, std::move(ids), std::move(row_splits), {}, {}, {}};
}

TFE_TEST(DenseIdsAreOneRowEach) {
  Csr csr;
  TFE_ASSERT_OK(Convert({{Spec(InputKind::kDense), {3, 1, 4}, {}, {}, {}, {}}}, &csr));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 1, 2, 3}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{3, 1, 4}));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{1, 1, 1}));
}

TFE_TEST(SparseRowsWithMeanCombiner) {
  Feature feature = Sparse({5, 6, 7}, {0, 0, 0, 1, 2, 0}, {3, 2},
                           Spec(InputKind::kSparse, /*has_weights=*/true));
  feature.weights = {1, 3, 2};
  Csr csr;
  TFE_ASSERT_OK(Convert({feature}, &csr, Combiner::kMean));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 2, 2, 3}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{5, 6, 7}));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{0.25f, 0.75f, 1.0f}));
}

TFE_TEST(UnsortedSparseIndicesKeepInputOrderWithinARow) {
  Csr csr;
  TFE_ASSERT_OK(Convert({Sparse({1, 2, 3}, {1, 0, 0, 0, 1, 1}, {2, 2})}, &csr));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 1, 3}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{2, 1, 3}));
}

TFE_TEST(SparseRankThreeRowsAreRowMajorOuterIndices) {
  Csr csr;
  TFE_ASSERT_OK(Convert({Sparse({1, 2}, {0, 1, 0, 1, 0, 1}, {2, 2, 2})}, &csr));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 0, 1, 2, 2}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{1, 2}));
}

TFE_TEST(SparseSequenceRowsTruncateAtTheMaxLength) {
  Csr csr;
  const FeatureSpec spec = Spec(InputKind::kSparse, false, /*max_sequence_length=*/2);
  TFE_ASSERT_OK(Convert({Sparse({1, 2, 3}, {0, 0, 0, 2, 1, 1}, {2, 3}, spec)}, &csr,
                        Combiner::kMean));
  // (0, 0) -> row 0; (0, 2) is past the length; (1, 1) -> row 3. No combiner on sequences.
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 1, 1, 1, 2}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{1, 3}));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{1, 1}));
}

TFE_TEST(RaggedRowsWithSqrtnCombiner) {
  Feature feature = Ragged({1, 2, 3}, {0, 2, 3}, Spec(InputKind::kRagged, true));
  feature.weights = {3, 4, 5};
  Csr csr;
  TFE_ASSERT_OK(Convert({feature}, &csr, Combiner::kSqrtn));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 2, 3}));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{0.6f, 0.8f, 1.0f}));
}

TFE_TEST(ZeroDenominatorsGiveZeroGains) {
  Feature feature = Ragged({1, 2}, {0, 2}, Spec(InputKind::kRagged, true));
  feature.weights = {1, -1};
  Csr csr;
  TFE_ASSERT_OK(Convert({feature}, &csr, Combiner::kMean));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{0, 0}));
}

TFE_TEST(PruningDropsNegativeIdsAndNonPositiveWeightsOfMeanRows) {
  Feature feature = Ragged({-1, 2, 3, 4}, {0, 4}, Spec(InputKind::kRagged, true, 0, true));
  feature.weights = {1, 0, 2, 2};
  Csr csr;
  TFE_ASSERT_OK(Convert({feature}, &csr, Combiner::kMean));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{3, 4}));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{0.5f, 0.5f}));
  TFE_ASSERT_OK(Convert({feature}, &csr, Combiner::kSum));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{2, 3, 4}));
}

TFE_TEST(FeaturesStackInOrder) {
  const Feature dense = {Spec(InputKind::kDense), {4}, {}, {}, {}, {}};
  Csr csr;
  TFE_ASSERT_OK(Convert({Ragged({1, 2, 3}, {0, 1, 3}), dense, Sparse({5}, {1, 0}, {2, 4})}, &csr));
  TFE_EXPECT_EQ(csr.feature_row_counts, (std::vector<int64_t>{2, 1, 2}));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 1, 3, 4, 4, 5}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

// Build copies a feature whose lookups are all kept and in row order and scatters the others by
// row; in one table each feature must land in its own rows either way.
TFE_TEST(CopiedAndScatteredFeaturesStackInOrder) {
  const Feature unsorted = Sparse({1, 2, 3}, {1, 0, 0, 0, 1, 1}, {2, 2});
  const Feature pruned = Ragged({-1, 4, 5}, {0, 2, 3}, Spec(InputKind::kRagged, false, 0, true));
  Feature weighted = Sparse({6, 7}, {0, 0, 1, 0}, {2, 2}, Spec(InputKind::kSparse, true));
  weighted.weights = {0.5f, 2.0f};
  Csr csr;
  TFE_ASSERT_OK(Convert({weighted, unsorted, pruned, weighted}, &csr));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, 8, 9}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{6, 7, 2, 1, 3, 4, 5, 6, 7}));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{0.5f, 2.0f, 1, 1, 1, 1, 1, 0.5f, 2.0f}));
}

TFE_TEST(Int32IdsAreWidened) {
  const std::vector<int32_t> ids32 = {8, 9};
  CsrBuilder builder(TableSpec{"tbl", 10, Combiner::kSum});
  FeatureTensors tensors;
  tensors.ids = IdSpan(ids32.data(), 2);
  TFE_ASSERT_OK(builder.AddFeature(Spec(InputKind::kDense), tensors));
  std::vector<int64_t> row_splits(3), ids(2);
  std::vector<float> gains(2);
  builder.Build(row_splits.data(), ids.data(), gains.data());
  TFE_EXPECT_EQ(ids, (std::vector<int64_t>{8, 9}));
  TFE_EXPECT_EQ(row_splits, (std::vector<int64_t>{0, 1, 2}));
}

// Only a lone int64 feature whose lookups are all kept in row order has CSR ids equal to its
// ids; Build then leaves the ids to the caller and writes the rest.
TFE_TEST(CsrIdsAreFeatureIdsOnlyForOneContiguousInt64Feature) {
  const auto ids_are_feature_ids = [](const std::vector<Feature>& features) {
    CsrBuilder builder(TableSpec{"tbl", 10, Combiner::kMean});
    return AddFeatures(features, &builder).ok() && builder.CsrIdsAreFeatureIds();
  };
  const FeatureSpec pruning = Spec(InputKind::kSparse, false, 0, /*prune_invalid=*/true);
  TFE_EXPECT(ids_are_feature_ids({Sparse({4, 5, 6}, {0, 0, 0, 1, 2, 0}, {3, 2})}));
  TFE_EXPECT(ids_are_feature_ids({Ragged({1, 2, 3}, {0, 2, 2, 3})}));
  // Out of row order, a pruned lookup, two features.
  TFE_EXPECT(!ids_are_feature_ids({Sparse({4, 5}, {1, 0, 0, 0}, {2, 2})}));
  TFE_EXPECT(!ids_are_feature_ids({Sparse({4, -1}, {0, 0, 1, 0}, {2, 2}, pruning)}));
  TFE_EXPECT(!ids_are_feature_ids({Ragged({1}, {0, 1}), Ragged({2}, {0, 1})}));
  // A position beyond max_sequence_length, and a non-positive weight under a mean, are dropped.
  TFE_EXPECT(!ids_are_feature_ids(
      {Sparse({4, 5}, {0, 0, 0, 1}, {1, 2}, Spec(InputKind::kSparse, false, 1))}));
  Feature weighted = Sparse({4, 5}, {0, 0, 1, 0}, {2, 2}, Spec(InputKind::kSparse, true, 0, true));
  weighted.weights = {1.0f, 0.0f};
  TFE_EXPECT(!ids_are_feature_ids({weighted}));
  weighted.weights = {1.0f, 2.0f};
  TFE_EXPECT(ids_are_feature_ids({weighted}));

  const std::vector<int32_t> ids32 = {8, 9};
  CsrBuilder int32_builder(TableSpec{"tbl", 10, Combiner::kSum});
  FeatureTensors tensors;
  tensors.ids = IdSpan(ids32.data(), 2);
  TFE_ASSERT_OK(int32_builder.AddFeature(Spec(InputKind::kDense), tensors));
  TFE_EXPECT(!int32_builder.CsrIdsAreFeatureIds());

  CsrBuilder builder(TableSpec{"tbl", 10, Combiner::kMean});
  const std::vector<Feature> ragged = {Ragged({1, 2, 3}, {0, 2, 2, 3})};
  TFE_ASSERT_OK(AddFeatures(ragged, &builder));
  std::vector<int64_t> row_splits(4);
  std::vector<float> gains(3);
  builder.Build(row_splits.data(), nullptr, gains.data());
  TFE_EXPECT_EQ(row_splits, (std::vector<int64_t>{0, 2, 2, 3}));
  TFE_EXPECT_EQ(gains, (std::vector<float>{0.5f, 0.5f, 1.0f}));
}

// The vectorised path of valid, in-order rank-2 lookups gives the rows the per-lookup path
// gives: empty rows first, between and last, and a repeated row index.
TFE_TEST(InOrderSparseRowsCountEveryRowIncludingEmptyOnes) {
  Csr csr;
  TFE_ASSERT_OK(Convert({Sparse({4, 5, 6, 7, 8}, {1, 0, 1, 1, 3, 0, 3, 0, 4, 2}, {6, 3})}, &csr));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 0, 2, 2, 4, 5, 5}));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{4, 5, 6, 7, 8}));
  TFE_EXPECT_EQ(csr.gains, (std::vector<float>{1, 1, 1, 1, 1}));
  // Stacked after another feature, its rows start after that feature's.
  TFE_ASSERT_OK(Convert({Ragged({1}, {0, 1}), Sparse({2, 3}, {0, 0, 2, 1}, {3, 2})}, &csr));
  TFE_EXPECT_EQ(csr.row_splits, (std::vector<int64_t>{0, 1, 2, 2, 3}));
}

// A bad lookup after valid in-order ones is reported as the per-lookup pass reports it.
TFE_TEST(BadInOrderSparseLookupsNameTheFirstBadOne) {
  Csr csr;
  TFE_EXPECT_ERROR(Convert({Sparse({1, 2, 10, 11}, {0, 0, 0, 1, 1, 0, 1, 1}, {2, 2})}, &csr),
                   "Table 'tbl', feature 'f': id 10 at lookup 2 is out of range for vocabulary "
                   "size 10");
  TFE_EXPECT_ERROR(Convert({Sparse({1, 2}, {0, 0, 0, 2}, {2, 2})}, &csr),
                   "Table 'tbl', feature 'f': sparse indices[1] = [0, 2] is out of bounds for "
                   "dense_shape [2, 2]");
}

// A dynamic table's keys (vocabulary_size kAnyKey): any id >= 0 passes, on the in-order sparse
// fast path and the per-lookup pass alike; a negative one is named as negative.
TFE_TEST(AnyKeyTablesTakeEveryNonNegativeId) {
  constexpr int64_t kLargest = std::numeric_limits<int64_t>::max();
  Csr csr;
  TFE_ASSERT_OK(Convert({Sparse({kLargest, 0}, {0, 0, 1, 0}, {2, 2}),
                         Ragged({kLargest - 1}, {0, 1})},
                        &csr, Combiner::kSum, kAnyKey));
  TFE_EXPECT_EQ(csr.ids, (std::vector<int64_t>{kLargest, 0, kLargest - 1}));
  TFE_EXPECT_ERROR(Convert({Sparse({1, -4}, {0, 0, 1, 0}, {2, 2})}, &csr, Combiner::kSum, kAnyKey),
                   "Table 'tbl', feature 'f': id -4 at lookup 1 is negative");
  TFE_EXPECT_ERROR(Convert({Ragged({-1}, {0, 1})}, &csr, Combiner::kSum, kAnyKey),
                   "Table 'tbl', feature 'f': id -1 at lookup 0 is negative");
  TableSpec table;
  TFE_ASSERT_OK(ParseTableSpec("tbl", kAnyKey, "sum", &table, /*any_key=*/true));
  TFE_EXPECT_ERROR(ParseTableSpec("tbl", kAnyKey, "sum", &table),
                   "Table 'tbl': vocabulary_size must be >= 1, got -1");
}

TFE_TEST(ErrorsNameTheTableAndFeature) {
  Csr csr;
  TFE_EXPECT_ERROR(Convert({Ragged({1, 10}, {0, 2})}, &csr),
                   "Table 'tbl', feature 'f': id 10 at lookup 1 is out of range for vocabulary "
                   "size 10");
  TFE_EXPECT_ERROR(Convert({Ragged({1, 2}, {0, 1})}, &csr),
                   "Table 'tbl', feature 'f': row_splits[1] = 1 must equal the number of ids, 2");
  TFE_EXPECT_ERROR(Convert({Ragged({}, {})}, &csr),
                   "Table 'tbl', feature 'f': row_splits must have at least one element (R + 1 "
                   "for R rows), got none");
  TFE_EXPECT_ERROR(Convert({Sparse({1, 2}, {0, 0, 2, 0}, {2, 2})}, &csr),
                   "Table 'tbl', feature 'f': sparse indices[1] = [2, 0] is out of bounds for "
                   "dense_shape [2, 2]");
  Feature weighted = Ragged({1}, {0, 1}, Spec(InputKind::kRagged, true));
  TFE_EXPECT_ERROR(Convert({weighted}, &csr),
                   "Table 'tbl', feature 'f': weights have 0 elements but there are 1 ids");

  TableSpec table;
  TFE_EXPECT_ERROR(ParseTableSpec("tbl", 10, "max", &table),
                   "Table 'tbl': unknown combiner 'max' (expected sum, mean or sqrtn)");
  std::vector<FeatureSpec> specs;
  TFE_EXPECT_ERROR(
      ParseFeatureSpecs("tbl", 1, {"f"}, {"dense"}, {false}, {2}, {false}, &specs),
      "Table 'tbl', feature 'f': is a sequence feature (max_sequence_length 2) but its input is "
      "dense");
  TFE_EXPECT_ERROR(ParseFeatureSpecs("tbl", 1, {"a", "b"}, {"dense"}, {false}, {0}, {false},
                                     &specs),
                   "Table 'tbl': attr feature_names has 2 entries but there are 1 features");
}

// The structure check refuses what AddFeature refuses of a feature's structure, with the same
// message, and reads no id: an id past the table passes it.
TFE_TEST(StructureChecksAreAddFeaturesWithoutTheIds) {
  const std::vector<Feature> malformed = {
      Ragged({1, 2}, {0, 1}), Ragged({1, 2}, {0, 2, 1, 2}), Ragged({}, {}),
      Sparse({1, 2}, {0, 0, 2, 0}, {2, 2}), Ragged({1}, {0, 1}, Spec(InputKind::kRagged, true))};
  for (const Feature& feature : malformed) {
    CsrBuilder builder(TableSpec{"tbl", 10, Combiner::kSum});
    const Status added = builder.AddFeature(feature.spec, TensorsOf(feature));
    const Status checked = CheckFeatureStructure("tbl", feature.spec, TensorsOf(feature));
    TFE_EXPECT(!added.ok());
    TFE_EXPECT_EQ(checked.message(), added.message());
  }
  const std::vector<Feature> well_formed = {
      Ragged({1, 10}, {0, 2}), Sparse({1, 20}, {0, 0, 1, 1}, {2, 2}),
      Sparse({3, 4}, {0, 0, 0, 3}, {1, 4}, Spec(InputKind::kSparse, false, 2))};
  for (const Feature& feature : well_formed) {
    TFE_EXPECT_OK(CheckFeatureStructure("tbl", feature.spec, TensorsOf(feature)));
  }
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
