// LookUpTablesFeatures against converting each table's features (CsrBuilder) and looking the
// batch up (CombineRows): the same bits and row counts, on one thread and on threads that claim
// the row ranges (ClaimingSharder); the first table's error when tables are invalid, after asking
// a table that failed its direct checks for its outputs again, for the same rows.
#include "cc/core/features_lookup.h"

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cc/core/claiming_sharder.h"
#include "cc/core/csr_conversion.h"
#include "cc/core/lookup.h"
#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

constexpr int64_t kVocabulary = 40;

// One feature's inputs, owned: rows of 0-5 ids as a rank-2 SparseTensor (indices, dense_shape)
// and as a ragged tensor (row_splits).
struct FeatureInputs {
  std::vector<int64_t> ids, indices, row_splits, dense_shape;

  FeatureTensors View(InputKind kind) const {
    FeatureTensors tensors;
    tensors.ids = IdSpan(ids.data(), static_cast<int64_t>(ids.size()));
    if (kind == InputKind::kRagged) {
      tensors.row_info = {row_splits.data(), static_cast<int64_t>(row_splits.size())};
      tensors.row_info_shape = {static_cast<int64_t>(row_splits.size())};
    } else {
      tensors.row_info = {indices.data(), static_cast<int64_t>(indices.size())};
      tensors.row_info_shape = {static_cast<int64_t>(ids.size()), 2};
      tensors.dense_shape = {dense_shape.data(), 2};
    }
    return tensors;
  }
};

FeatureInputs RandomFeature(int64_t rows, std::mt19937* random) {
  FeatureInputs feature;
  feature.row_splits.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t count = (*random)() % 6;
    for (int64_t c = 0; c < count; ++c) {
      feature.indices.insert(feature.indices.end(), {r, c});
      feature.ids.push_back((*random)() % kVocabulary);
    }
    feature.row_splits.push_back(static_cast<int64_t>(feature.ids.size()));
  }
  feature.dense_shape = {rows, 5};
  return feature;
}

// A table of the call with everything it points to.
struct Table {
  TableSpec spec;
  std::vector<FeatureSpec> features;
  std::vector<FeatureInputs> inputs;
  std::vector<FeatureTensors> tensors;
  std::vector<float> rows;
  int64_t dim = 0;

  TableFeatures View() const {
    return {&spec, &features, tensors.data(), rows.data(), dim};
  }
};

// Table t: `kinds` features of a few hundred rows, dim 3 + t.
Table RandomTable(int t, Combiner combiner, const std::vector<InputKind>& kinds) {
  std::mt19937 random(17 + t);
  Table table;
  table.spec = TableSpec{"t" + std::to_string(t), kVocabulary, combiner};
  table.dim = 3 + t;
  std::normal_distribution<float> normal;
  table.rows.resize(kVocabulary * table.dim);
  for (float& value : table.rows) value = normal(random);
  for (size_t f = 0; f < kinds.size(); ++f) {
    table.features.push_back({"f" + std::to_string(f), kinds[f]});
    table.inputs.push_back(RandomFeature(100 + 97 * f, &random));
  }
  for (size_t f = 0; f < kinds.size(); ++f) table.tensors.push_back(table.inputs[f].View(kinds[f]));
  return table;
}

// The table's outputs by conversion, then lookup: activations and row counts.
struct Outputs {
  std::vector<float> activations;
  std::vector<int64_t> row_counts;
};

Outputs Converted(const Table& table) {
  CsrBuilder builder(table.spec);
  for (size_t f = 0; f < table.features.size(); ++f) {
    TFE_EXPECT_OK(builder.AddFeature(table.features[f], table.tensors[f]));
  }
  testing::CsrArrays csr;
  csr.row_splits.resize(builder.num_rows() + 1);
  csr.ids.resize(builder.num_lookups());
  csr.gains.resize(builder.num_lookups());
  builder.Build(csr.row_splits.data(), csr.ids.data(), csr.gains.data());
  Outputs outputs;
  outputs.activations.resize(builder.num_rows() * table.dim);
  CombineRows(csr.View(), table.rows.data(), table.dim, 0, builder.num_rows(),
              outputs.activations.data());
  outputs.row_counts = builder.feature_row_counts();
  return outputs;
}

// Runs the call over `tables` into owned outputs; `requests` counts each table's requests.
Status LookUp(const std::vector<Table>& tables, int64_t threads, std::vector<Outputs>* outputs,
              std::vector<int>* requests) {
  std::vector<TableFeatures> views;
  for (const Table& table : tables) views.push_back(table.View());
  outputs->assign(tables.size(), Outputs());
  requests->assign(tables.size(), 0);
  const LookupOutputs give = [&](size_t t, int64_t rows, float** activations,
                                 int64_t** row_counts) {
    Outputs& out = (*outputs)[t];
    if ((*requests)[t]++ == 0) {
      out.activations.assign(rows * tables[t].dim, -1.0f);
      out.row_counts.assign(tables[t].features.size(), -1);
    } else if (static_cast<int64_t>(out.activations.size()) != rows * tables[t].dim) {
      return Status::Error("asked again for other rows");
    }
    *activations = out.activations.data();
    *row_counts = out.row_counts.data();
    return Status();
  };
  std::vector<std::thread> workers;
  const Sharder shard = ClaimingSharder(threads - 1, [&](std::function<void()> task) {
    workers.emplace_back(std::move(task));
  });
  const Status status = LookUpTablesFeatures(views, give, threads, shard);
  for (std::thread& worker : workers) worker.join();
  return status;
}

TFE_TEST(SameBitsAsConvertingEachTableOnOneThreadOrSeveral) {
  std::vector<Table> tables;
  tables.push_back(RandomTable(0, Combiner::kSum, {InputKind::kSparse, InputKind::kSparse}));
  tables.push_back(RandomTable(1, Combiner::kMean, {InputKind::kRagged}));
  // A dense feature beside a ragged one: both combined directly.
  tables.push_back(RandomTable(2, Combiner::kSqrtn, {InputKind::kRagged, InputKind::kDense}));
  for (const int64_t threads : {1, 3}) {
    std::vector<Outputs> outputs;
    std::vector<int> requests;
    TFE_ASSERT_OK(LookUp(tables, threads, &outputs, &requests));
    for (size_t t = 0; t < tables.size(); ++t) {
      const Outputs expected = Converted(tables[t]);
      TFE_EXPECT_EQ(requests[t], 1);
      TFE_EXPECT_EQ(outputs[t].row_counts, expected.row_counts);
      TFE_ASSERT(outputs[t].activations.size() == expected.activations.size());
      TFE_EXPECT(std::memcmp(outputs[t].activations.data(), expected.activations.data(),
                             expected.activations.size() * sizeof(float)) == 0);
    }
  }
}

TFE_TEST(AnOutOfOrderTableIsConvertedIntoTheSameOutputs) {
  std::vector<Table> tables = {RandomTable(0, Combiner::kSum, {InputKind::kSparse})};
  // Swap two lookups of different rows: valid, but not in row order.
  std::vector<int64_t>& indices = tables[0].inputs[0].indices;
  std::swap(indices[0], indices[indices.size() - 2]);
  std::swap(indices[1], indices[indices.size() - 1]);
  tables[0].tensors[0] = tables[0].inputs[0].View(InputKind::kSparse);
  std::vector<Outputs> outputs;
  std::vector<int> requests;
  TFE_ASSERT_OK(LookUp(tables, 3, &outputs, &requests));
  TFE_EXPECT_EQ(requests[0], 2);
  const Outputs expected = Converted(tables[0]);
  TFE_EXPECT(std::memcmp(outputs[0].activations.data(), expected.activations.data(),
                         expected.activations.size() * sizeof(float)) == 0);
}

TFE_TEST(TheFirstInvalidTablesErrorIsReturned) {
  std::vector<Table> tables;
  for (int t = 0; t < 3; ++t) {
    tables.push_back(RandomTable(t, Combiner::kSum, {InputKind::kSparse, InputKind::kRagged}));
  }
  tables[1].inputs[1].ids[0] = kVocabulary;  // out of range
  tables[2].inputs[0].ids[0] = -1;
  std::vector<Outputs> outputs;
  std::vector<int> requests;
  const Status status = LookUp(tables, 2, &outputs, &requests);
  TFE_EXPECT(status.message().find("Table 't1', feature 'f1': id 40") != std::string::npos);
}

TFE_TEST(TablesMustHoldTheirVocabulary) {
  TFE_EXPECT_OK(CheckTableHoldsVocabulary(TableSpec{"t", 10, Combiner::kSum}, 10));
  TFE_EXPECT_ERROR(CheckTableHoldsVocabulary(TableSpec{"t", 10, Combiner::kSum}, 9),
                   "Table 't': the table has 9 rows but vocabulary_size is 10");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
