// Fuzz target: the CSR conversion of one table's features (CsrBuilder: dense, sparse and ragged
// inputs, with and without weights, sequences, pruning, every combiner), as TfeFeaturesToCsr
// runs it. Properties beyond memory safety: a conversion that succeeds gives a batch that
// ValidateCsrBatch accepts for the table, with the row counts it announced; and a pooled rank-2
// sparse or ragged feature looked up straight from its indices or row splits (CombineSparseRows,
// TfeFeaturesLookup's path) either reports the input invalid or, only when the conversion
// succeeds, gives the converted batch's activations bit for bit.
#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/csr_conversion.h"
#include "cc/core/lookup.h"
#include "cc/core/sparse_lookup.h"
#include "tools/fuzz_core/fuzz_input.h"

namespace tf_embedding::fuzz {
namespace {

constexpr int64_t kDim = 3;
// A feature's output rows come from its dense_shape or row_splits, up to kMaxRows (2^31 - 1):
// the conversion then allocates 8 bytes per row, as its outputs will, which is a legitimate
// request of the caller's making (TensorFlow's own sparse ops allocate the same). Inputs that
// declare more rows than this only exercise the allocator, and are skipped.
constexpr int64_t kMaxOutputRows = 1 << 16;

struct FeatureBuffers {
  std::vector<int64_t> ids64;
  std::vector<int32_t> ids32;
  std::vector<int64_t> row_info;
  std::vector<int64_t> dense_shape;
  std::vector<float> weights;
};

FeatureSpec ConsumeSpec(FuzzedDataProvider& in, int index) {
  FeatureSpec spec;
  spec.name = "f" + std::to_string(index);
  spec.kind = static_cast<InputKind>(in.ConsumeIntegralInRange<int>(0, 2));
  spec.has_weights = in.ConsumeBool();
  spec.max_sequence_length = in.ConsumeBool() ? 0 : SmallOrAny(in, 4);
  spec.prune_invalid = in.ConsumeBool();
  return spec;
}

// Tensors as TF hands them over: row_info holds exactly the elements its shape says.
FeatureTensors ConsumeTensors(FuzzedDataProvider& in, const FeatureSpec& spec,
                              FeatureBuffers& b) {
  FeatureTensors t;
  if (in.ConsumeBool()) {
    b.ids64 = Int64s(in, 12);
    t.ids = IdSpan(b.ids64.data(), static_cast<int64_t>(b.ids64.size()));
  } else {
    for (int64_t id : Int64s(in, 12)) b.ids32.push_back(static_cast<int32_t>(id));
    t.ids = IdSpan(b.ids32.data(), static_cast<int64_t>(b.ids32.size()));
  }
  const int64_t nnz = t.ids.size();
  if (spec.kind == InputKind::kSparse) {
    const int64_t rank = in.ConsumeIntegralInRange<int64_t>(0, 3);
    const int64_t rows = in.ConsumeBool() ? nnz : in.ConsumeIntegralInRange<int64_t>(0, 9);
    t.row_info_shape = in.ConsumeIntegralInRange<int>(0, 9) == 0
                           ? std::vector<int64_t>{rows}
                           : std::vector<int64_t>{rows, rank};
    int64_t elements = 1;
    for (int64_t dim : t.row_info_shape) elements *= dim;
    for (int64_t i = 0; i < elements; ++i) b.row_info.push_back(SmallOrAny(in, 5));
    const int64_t dense_rank = in.ConsumeBool() ? rank : in.ConsumeIntegralInRange<int64_t>(0, 3);
    for (int64_t i = 0; i < dense_rank; ++i) b.dense_shape.push_back(SmallOrAny(in, 6));
  } else if (spec.kind == InputKind::kRagged) {
    b.row_info = Splits(in, nnz);
    t.row_info_shape = {static_cast<int64_t>(b.row_info.size())};
  }
  t.row_info = {b.row_info.data(), static_cast<int64_t>(b.row_info.size())};
  t.dense_shape = {b.dense_shape.data(), static_cast<int64_t>(b.dense_shape.size())};
  if (spec.has_weights) {
    b.weights = Floats(in, in.ConsumeBool() ? nnz : in.ConsumeIntegralInRange<int64_t>(0, 9));
    t.weights = {b.weights.data(), static_cast<int64_t>(b.weights.size())};
  }
  return t;
}

// The direct lookup of a lone pooled rank-2 sparse, ragged or dense feature without weights, as the
// kernel reads it, in two ranges of rows split where the kernel would split them: invalid
// whenever the conversion failed (`batch` null), else the converted batch's lookup bit for bit.
void CheckDirectLookup(const TableSpec& table, const FeatureSpec& spec, const FeatureTensors& t,
                       const CsrBatch* batch, const std::vector<float>& table_rows) {
  FeatureLayout layout;
  SparseLookups lookups;
  // (The op's specs have max_sequence_length >= 0, which AsSparseLookups takes as pooled only
  // when 0.)
  if (!AsSparseLookups(table.name, spec, t, &layout, &lookups) ||
      layout.num_rows > kMaxOutputRows) {
    return;
  }
  const int64_t middle = lookups.rows / 2;
  std::vector<float> direct(lookups.rows * kDim, -1.0f);
  const bool valid =
      CombineSparseRows(lookups, table.vocabulary_size, table.combiner, table_rows.data(), kDim,
                        0, middle, 0, FirstLookupOfRow(lookups, middle), direct.data()) &&
      CombineSparseRows(lookups, table.vocabulary_size, table.combiner, table_rows.data(), kDim,
                        middle, lookups.rows, FirstLookupOfRow(lookups, middle), lookups.nnz,
                        direct.data());
  if (!valid) return;  // The kernel then converts the feature, as here.
  FUZZ_CHECK(batch != nullptr);
  std::vector<float> converted(batch->num_rows() * kDim);
  CombineRows(*batch, table_rows.data(), kDim, 0, batch->num_rows(), converted.data());
  FUZZ_CHECK(SameFloats(direct.data(), converted.data(), lookups.rows * kDim));
}

}  // namespace
}  // namespace tf_embedding::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tf_embedding;        // NOLINT(build/namespaces)
  using namespace tf_embedding::fuzz;  // NOLINT(build/namespaces)
  FuzzedDataProvider in(data, size);
  const int64_t vocabulary_size = SmallOrAny(in, 16);
  static const char* const kCombiners[] = {"sum", "mean", "sqrtn", "max"};
  TableSpec table;
  if (!ParseTableSpec("t", vocabulary_size, kCombiners[in.ConsumeIntegralInRange<int>(0, 3)],
                      &table).ok()) {
    return 0;
  }
  const int num_features = in.ConsumeIntegralInRange<int>(1, 3);
  std::vector<FeatureSpec> specs;
  std::vector<FeatureBuffers> buffers(num_features);
  std::vector<FeatureTensors> tensors;
  for (int f = 0; f < num_features; ++f) specs.push_back(ConsumeSpec(in, f));
  for (int f = 0; f < num_features; ++f) {
    tensors.push_back(ConsumeTensors(in, specs[f], buffers[f]));
  }

  int64_t declared_rows = 0;
  for (int f = 0; f < num_features; ++f) {
    FeatureLayout layout;
    if (FeatureLayoutOf(table.name, specs[f], tensors[f], &layout).ok()) {
      declared_rows += layout.num_rows;
    }
  }
  if (declared_rows > kMaxOutputRows) return 0;
  std::vector<float> table_rows;
  const bool direct_checked =
      num_features == 1 && table.vocabulary_size > 0 && table.vocabulary_size <= 64;
  if (direct_checked) {
    table_rows.resize(table.vocabulary_size * kDim);
    for (size_t i = 0; i < table_rows.size(); ++i) table_rows[i] = static_cast<float>(i % 7) - 3;
  }
  CsrBuilder builder(table);
  if (!builder.AddFeatures(specs, tensors.data()).ok()) {
    if (direct_checked) CheckDirectLookup(table, specs[0], tensors[0], nullptr, table_rows);
    return 0;
  }
  std::vector<int64_t> row_splits(builder.num_rows() + 1);
  std::vector<int64_t> ids(builder.num_lookups());
  std::vector<float> gains(builder.num_lookups());
  const bool ids_are_input = builder.CsrIdsAreFeatureIds();
  builder.Build(row_splits.data(), ids_are_input ? nullptr : ids.data(), gains.data());
  const int64_t* batch_ids = ids_are_input ? tensors[0].ids.int64_data() : ids.data();
  const CsrBatch batch{row_splits.data(), static_cast<int64_t>(row_splits.size()), batch_ids,
                       builder.num_lookups(), gains.data(), builder.num_lookups()};
  FUZZ_CHECK(ValidateCsrBatch(batch, table.vocabulary_size).ok());
  int64_t rows = 0;
  for (int64_t count : builder.feature_row_counts()) rows += count;
  FUZZ_CHECK(rows == builder.num_rows());

  if (direct_checked) CheckDirectLookup(table, specs[0], tensors[0], &batch, table_rows);
  return 0;
}
