// CombineSparseRows against converting the feature (CsrBuilder) and looking its batch up
// (CombineRows on the baseline ISA): the same bits for every combiner, any split of the rows,
// every row width and every vector ISA, and a failed check for every invalid or out-of-order
// feature; for sparse, ragged and dense features.
#include "cc/core/sparse_lookup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "cc/core/lookup.h"
#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

constexpr int64_t kVocabulary = 50;
// The row width of the tests that do not vary it.
constexpr int64_t kDim = 16;
constexpr InputKind kKinds[] = {InputKind::kSparse, InputKind::kRagged, InputKind::kDense};

// One feature's lookups every way: as a rank-2 SparseTensor (indices), as a ragged feature
// (row_splits) and, when every row has one lookup, as a dense feature (its ids).
struct Feature {
  std::vector<int64_t> indices;  // [nnz, 2]
  std::vector<int64_t> row_splits;  // [rows + 1]
  std::vector<int64_t> ids;
  int64_t rows = 0;
  int64_t columns = 0;

  SparseLookups View(InputKind kind) const {
    SparseLookups view{indices.data(), ids.data(), static_cast<int64_t>(ids.size()), rows,
                       columns};
    if (kind == InputKind::kRagged) view.row_splits = row_splits.data();
    if (kind == InputKind::kDense) view.dense = true;
    return view;
  }
};

// Rows of 0 to 6 lookups in row order (runs of empty rows included, at both ends too), or with
// `one_per_row` one lookup each (a feature dense ids can give).
Feature RandomFeature(int64_t rows, uint32_t seed, bool one_per_row = false) {
  std::mt19937 random(seed);
  Feature feature;
  feature.rows = rows;
  feature.columns = 6;
  feature.row_splits.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t count = one_per_row ? 1 : random() % 4 == 0 ? 0 : random() % 7;
    for (int64_t c = 0; c < count; ++c) {
      feature.indices.insert(feature.indices.end(), {r, c});
      feature.ids.push_back(random() % kVocabulary);
    }
    feature.row_splits.push_back(static_cast<int64_t>(feature.ids.size()));
  }
  return feature;
}

std::vector<float> RandomTable(uint32_t seed, int64_t dim = kDim) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal;
  std::vector<float> table(kVocabulary * dim);
  for (float& value : table) value = normal(random);
  return table;
}

// The converted feature's batch looked up, the path TfeFeaturesToCsr + TfeEmbeddingLookup take.
std::vector<float> ConvertedLookup(const Feature& feature, Combiner combiner,
                                   const std::vector<float>& table, int64_t dim, InputKind kind) {
  CsrBuilder builder(TableSpec{"tbl", kVocabulary, combiner});
  FeatureTensors tensors;
  tensors.ids = IdSpan(feature.ids.data(), static_cast<int64_t>(feature.ids.size()));
  const std::vector<int64_t> dense_shape = {feature.rows, feature.columns};
  if (kind == InputKind::kRagged) {
    tensors.row_info = {feature.row_splits.data(),
                        static_cast<int64_t>(feature.row_splits.size())};
    tensors.row_info_shape = {static_cast<int64_t>(feature.row_splits.size())};
  } else if (kind == InputKind::kSparse) {
    tensors.row_info = {feature.indices.data(), static_cast<int64_t>(feature.indices.size())};
    tensors.row_info_shape = {static_cast<int64_t>(feature.ids.size()), 2};
    tensors.dense_shape = {dense_shape.data(), 2};
  }
  const Status status = builder.AddFeature({"f", kind}, tensors);
  TFE_EXPECT_OK(status);
  testing::CsrArrays csr;
  csr.row_splits.resize(builder.num_rows() + 1);
  csr.ids.resize(builder.num_lookups());
  csr.gains.resize(builder.num_lookups());
  builder.Build(csr.row_splits.data(), csr.ids.data(), csr.gains.data());
  std::vector<float> out(feature.rows * dim);
  CombineRowsWithIsa(SimdIsa::kBaseline, csr.View(), table.data(), dim, 0, feature.rows,
                     out.data());
  return out;
}

// Combines `feature` over the row ranges [bounds[i], bounds[i + 1]), as TfeFeaturesLookup
// does; whether every range passed its checks.
bool CombineInRanges(const Feature& feature, InputKind kind, Combiner combiner,
                     const std::vector<float>& table, const std::vector<int64_t>& bounds,
                     std::vector<float>* out, int64_t dim = kDim,
                     SimdIsa isa = SelectedSimdIsa()) {
  const SparseLookups lookups = feature.View(kind);
  bool valid = true;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const int64_t lookup_begin = i == 0 ? 0 : FirstLookupOfRow(lookups, bounds[i]);
    const int64_t lookup_end =
        i + 2 == bounds.size() ? lookups.nnz : FirstLookupOfRow(lookups, bounds[i + 1]);
    valid = CombineSparseRowsWithIsa(isa, lookups, kVocabulary, combiner, table.data(), dim,
                                     bounds[i], bounds[i + 1], lookup_begin, lookup_end,
                                     out->data()) &&
            valid;
  }
  return valid;
}

TFE_TEST(SameBitsAsConvertingAndLookingUpForEveryCombinerAndSplit) {
  const std::vector<float> table = RandomTable(1);
  for (const InputKind kind : kKinds) {
    for (const Combiner combiner : {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn}) {
      for (const int64_t rows : {0, 1, 7, 64, 65, 300}) {
        const Feature feature = RandomFeature(rows, static_cast<uint32_t>(rows) + 3,
                                              kind == InputKind::kDense);
        const std::vector<float> expected =
            ConvertedLookup(feature, combiner, table, kDim, kind);
        // Whole, then in three ranges of odd sizes (a range may start inside a run of empty rows).
        for (const int64_t split : {int64_t{0}, rows / 3 + 1}) {
          std::vector<float> out(rows * kDim, std::nanf(""));
          const int64_t first = std::min(split, rows), second = std::min(2 * split + 5, rows);
          TFE_EXPECT(CombineInRanges(feature, kind, combiner, table, {0, first, second, rows},
                                     &out));
          TFE_EXPECT(out.empty() ||
                     std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TFE_TEST(SameBitsWithEveryIsaAndRowWidth) {
  // The widths the kernel fixes at compile time, and others on its generic loop.
  for (const int64_t dim : {int64_t{8}, int64_t{64}, int64_t{128}, int64_t{7}, int64_t{40}}) {
    const std::vector<float> table = RandomTable(5, dim);
    for (const InputKind kind : kKinds) {
      const Feature feature = RandomFeature(150, 17, kind == InputKind::kDense);
      for (const Combiner combiner : {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn}) {
        const std::vector<float> expected =
            ConvertedLookup(feature, combiner, table, dim, kind);
        for (const SimdIsa isa : testing::RunnableIsas()) {
          std::vector<float> out(feature.rows * dim, std::nanf(""));
          TFE_EXPECT(CombineInRanges(feature, kind, combiner, table, {0, 70, feature.rows},
                                     &out, dim, isa));
          if (!TFE_EXPECT(std::memcmp(out.data(), expected.data(),
                                      out.size() * sizeof(float)) == 0)) {
            std::printf("  dim %ld, ISA %s\n", static_cast<long>(dim), testing::IsaName(isa));
          }
        }
      }
    }
  }
}

TFE_TEST(NoVocabularyFailsTheChecks) {
  const Feature feature = RandomFeature(10, 19);
  const std::vector<float> table = RandomTable(6);
  std::vector<float> out(feature.rows * kDim);
  for (const InputKind kind : {InputKind::kSparse, InputKind::kRagged}) {
    TFE_EXPECT(!CombineSparseRows(feature.View(kind), 0, Combiner::kSum, table.data(), kDim, 0,
                                  feature.rows, 0, feature.View(kind).nnz, out.data()));
  }
  const Feature dense = RandomFeature(10, 19, /*one_per_row=*/true);
  TFE_EXPECT(!CombineSparseRows(dense.View(InputKind::kDense), 0, Combiner::kSum, table.data(),
                                kDim, 0, dense.rows, 0, dense.rows, out.data()));
}

// Every one of `cases` fails some range, however the rows are split in two.
void ExpectEveryCaseFails(const std::vector<Feature>& cases, InputKind kind,
                          const std::vector<float>& table) {
  for (const Feature& feature : cases) {
    for (const int64_t split : {int64_t{1}, int64_t{13}, int64_t{20}, int64_t{39}}) {
      std::vector<float> out(feature.rows * kDim);
      TFE_EXPECT(!CombineInRanges(feature, kind, Combiner::kSum, table,
                                  {0, split, feature.rows}, &out));
    }
  }
}

TFE_TEST(SomeRangeFailsOnEveryInvalidOrOutOfOrderFeature) {
  const std::vector<float> table = RandomTable(2);
  const Feature valid = RandomFeature(40, 9);
  const int64_t nnz = valid.View(InputKind::kSparse).nnz;
  std::vector<Feature> cases(5, valid);
  cases[0].ids[nnz / 2] = kVocabulary;            // id out of range
  cases[1].indices[2 * (nnz - 1)] = valid.rows;   // row out of bounds (the last)
  cases[2].indices[2 * 5 + 1] = valid.columns;    // column out of bounds
  std::swap(cases[3].indices[2 * 2], cases[3].indices[2 * (nnz - 3)]);  // out of order
  cases[4].indices[2 * (nnz / 2)] = 0;            // out of order: a row back to 0
  ExpectEveryCaseFails(cases, InputKind::kSparse, table);
}

TFE_TEST(ARangeWithoutRowsFailsOnLookupsGivenToIt) {
  // Rows out of order make the binary search give every lookup to the empty first range.
  Feature feature;
  feature.rows = 1;
  feature.columns = 1;
  feature.indices = {0, 0, -1, 0, -1, 0};
  feature.ids = {0, 7, 7};
  const SparseLookups lookups = feature.View(InputKind::kSparse);
  std::vector<float> out(kDim);
  const std::vector<float> table = RandomTable(4);
  TFE_EXPECT(!CombineSparseRows(lookups, kVocabulary, Combiner::kSum, table.data(), kDim, 0, 0,
                                0, FirstLookupOfRow(lookups, 0), out.data()));
}

TFE_TEST(SomeRangeFailsOnEveryInvalidRaggedFeature) {
  const std::vector<float> table = RandomTable(3);
  const Feature valid = RandomFeature(40, 11);
  const int64_t nnz = valid.View(InputKind::kRagged).nnz;
  std::vector<Feature> cases(6, valid);
  cases[0].ids[nnz / 2] = kVocabulary;            // id out of range
  cases[1].ids[0] = -1;                           // negative id
  cases[2].row_splits[0] = 1;                     // does not start at 0
  cases[3].row_splits[valid.rows] = nnz - 1;      // does not end at nnz
  cases[4].row_splits[20] = cases[4].row_splits[19] - 1;  // decreasing
  cases[5].row_splits[10] = nnz + 5;              // beyond the ids (then decreasing)
  ExpectEveryCaseFails(cases, InputKind::kRagged, table);
}

TFE_TEST(SomeRangeFailsOnEveryInvalidDenseFeature) {
  const std::vector<float> table = RandomTable(7);
  const Feature valid = RandomFeature(40, 13, /*one_per_row=*/true);
  std::vector<Feature> cases(3, valid);
  cases[0].ids[17] = kVocabulary;  // id out of range
  cases[1].ids[0] = -1;            // negative id
  cases[2].ids[39] = -7;           // negative id, the last
  ExpectEveryCaseFails(cases, InputKind::kDense, table);
}

TFE_TEST(ADenseRangeFailsOnLookupsOtherThanItsRows) {
  const Feature feature = RandomFeature(8, 23, /*one_per_row=*/true);
  const SparseLookups lookups = feature.View(InputKind::kDense);
  const std::vector<float> table = RandomTable(8);
  std::vector<float> out(feature.rows * kDim);
  TFE_EXPECT(!CombineSparseRows(lookups, kVocabulary, Combiner::kSum, table.data(), kDim, 2, 5,
                                1, 5, out.data()));
  TFE_EXPECT(!CombineSparseRows(lookups, kVocabulary, Combiner::kSum, table.data(), kDim, 6, 9,
                                6, 9, out.data()));
  TFE_EXPECT(CombineSparseRows(lookups, kVocabulary, Combiner::kSum, table.data(), kDim, 2, 5, 2,
                               5, out.data()));
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
