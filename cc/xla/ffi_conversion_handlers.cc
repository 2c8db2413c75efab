// The handlers of the XLA CPU custom calls of the CSR conversion (TfeFeaturesToCsr) and the
// features lookup (TfeFeaturesLookup), as ffi_handlers.cc's: each runs its TF kernel's cc/core
// code on XLA's buffers, with the TF kernel's checks and messages, and returns an
// InvalidArgument error where the TF kernel fails.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "cc/core/errors.h"
#include "cc/core/features_lookup.h"
#include "cc/core/huge_pages.h"
#include "cc/xla/custom_calls.h"
#include "cc/xla/ffi_buffers.h"
#include "xla/ffi/api/ffi.h"

namespace tf_embedding {
namespace {

// The table and feature specs of the attributes `prefix`... (AddCsrConversionAttributes).
ffi::Error ReadConversionSpecs(const ffi::Dictionary& attributes, const std::string& prefix,
                               TableSpec* table, std::vector<FeatureSpec>* specs) {
  const auto table_name = attributes.get<std::string_view>(prefix + "table_name");
  const auto vocabulary_size = attributes.get<int64_t>(prefix + "vocabulary_size");
  const auto combiner = attributes.get<int64_t>(prefix + "combiner");
  const auto kinds = attributes.get<ffi::Span<const int64_t>>(prefix + "input_kinds");
  const auto has_weights = attributes.get<ffi::Span<const int64_t>>(prefix + "has_weights");
  const auto max_sequence_lengths =
      attributes.get<ffi::Span<const int64_t>>(prefix + "max_sequence_lengths");
  const auto prune_invalid = attributes.get<ffi::Span<const int64_t>>(prefix + "prune_invalid");
  for (const ffi::Error* error :
       {table_name.has_error() ? &table_name.error() : nullptr,
        vocabulary_size.has_error() ? &vocabulary_size.error() : nullptr,
        combiner.has_error() ? &combiner.error() : nullptr,
        kinds.has_error() ? &kinds.error() : nullptr,
        has_weights.has_error() ? &has_weights.error() : nullptr,
        max_sequence_lengths.has_error() ? &max_sequence_lengths.error() : nullptr,
        prune_invalid.has_error() ? &prune_invalid.error() : nullptr}) {
    if (error != nullptr) return *error;
  }
  *table = TableSpec{std::string(table_name.value()), vocabulary_size.value(),
                     static_cast<Combiner>(combiner.value())};
  const size_t num_features = kinds.value().size();
  if (has_weights.value().size() != num_features ||
      max_sequence_lengths.value().size() != num_features ||
      prune_invalid.value().size() != num_features) {
    return ToFfiError(TableError(table->name, "the custom call's feature attributes differ in "
                                 "length"));
  }
  specs->assign(num_features, FeatureSpec());
  for (size_t f = 0; f < num_features; ++f) {
    const auto feature_name =
        attributes.get<std::string_view>(prefix + "feature_name_" + std::to_string(f));
    if (feature_name.has_error()) return feature_name.error();
    (*specs)[f] = FeatureSpec{std::string(feature_name.value()),
                              static_cast<InputKind>(kinds.value()[f]),
                              has_weights.value()[f] != 0, max_sequence_lengths.value()[f],
                              prune_invalid.value()[f] != 0};
  }
  return ffi::Error::Success();
}

// Feature f's tensors from operands [first, first + 4N): ids, row_info, dense_shapes and
// weights, N of each.
ffi::Error ReadFeatureOperands(const ffi::RemainingArgs& args, size_t first, int64_t num_features,
                               int64_t f, FeatureTensors* t) {
  ffi::AnyBuffer operands[4] = {ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr),
                                ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr)};
  for (int64_t k = 0; k < 4; ++k) {
    const auto operand = args.get<ffi::AnyBuffer>(first + k * num_features + f);
    if (operand.has_error()) return operand.error();
    operands[k] = operand.value();
  }
  if (operands[0].element_type() == ffi::DataType::S32) {
    t->ids = IdSpan(Data<int32_t>(operands[0]), Size(operands[0]));
  } else {
    t->ids = IdSpan(Data<int64_t>(operands[0]), Size(operands[0]));
  }
  t->row_info = {Data<int64_t>(operands[1]), Size(operands[1])};
  t->row_info_shape.clear();
  for (const int64_t d : operands[1].dimensions()) t->row_info_shape.push_back(d);
  t->dense_shape = {Data<int64_t>(operands[2]), Size(operands[2])};
  t->weights = {Data<float>(operands[3]), Size(operands[3])};
  return ffi::Error::Success();
}

// TfeFeaturesToCsr. Operands: ids, row_info, dense_shapes and weights, N of each; results:
// row_splits, then ids and gains sized for every input id, padded after the last row
// (CompiledCsrBatch) with id 0 and gain 0.
ffi::Error FeaturesToCsr(ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> row_splits,
                         ffi::Result<ffi::AnyBuffer> ids, ffi::Result<ffi::AnyBuffer> gains,
                         ffi::Dictionary attributes) {
  TableSpec table;
  std::vector<FeatureSpec> specs;
  if (ffi::Error error = ReadConversionSpecs(attributes, "", &table, &specs); error.failure()) {
    return error;
  }
  const int64_t num_features = static_cast<int64_t>(specs.size());
  if (static_cast<int64_t>(args.size()) != 4 * num_features) {
    return ToFfiError(TableError(table.name, "the custom call has the wrong number of operands"));
  }
  std::vector<FeatureTensors> tensors(num_features);
  for (int64_t f = 0; f < num_features; ++f) {
    if (ffi::Error error = ReadFeatureOperands(args, 0, num_features, f, &tensors[f]);
        error.failure()) {
      return error;
    }
  }
  CsrBuilder builder(table);
  Status status = builder.AddFeatures(specs, tensors.data());
  const int64_t capacity = Size(*ids);
  if (status.ok() && (Size(*row_splits) != builder.num_rows() + 1 || Size(*gains) != capacity ||
                      builder.num_lookups() > capacity)) {
    status = TableError(table.name, "the conversion's outputs do not fit its ",
                        builder.num_rows(), " rows and ", builder.num_lookups(), " lookups");
  }
  if (!status.ok()) return ToFfiError(status);
  int64_t* out_ids = Data<int64_t>(*ids);
  float* out_gains = Data<float>(*gains);
  // A lone contiguous int64 feature's ids are the CSR ids, which Build then does not write.
  const bool copy_ids = builder.CsrIdsAreFeatureIds();
  builder.Build(Data<int64_t>(*row_splits), copy_ids ? nullptr : out_ids, out_gains);
  if (copy_ids) tensors[0].ids.CopyTo(out_ids);
  std::fill(out_ids + builder.num_lookups(), out_ids + capacity, 0);
  std::fill(out_gains + builder.num_lookups(), out_gains + capacity, 0.0f);
  return ffi::Error::Success();
}


// TfeFeaturesLookup. Operands: the M tables, then ids, row_info, dense_shapes and weights, N of
// each (every table's features, table by table); results: each table's activations. Attributes:
// num_tables, and each table's specs under TablePrefix(t).
ffi::Error FeaturesLookup(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                          ffi::Dictionary attributes) {
  const auto num_tables = attributes.get<int64_t>("num_tables");
  if (num_tables.has_error()) return num_tables.error();
  const size_t m = static_cast<size_t>(num_tables.value());
  std::vector<TableSpec> specs(m);
  std::vector<std::vector<FeatureSpec>> features(m);
  int64_t num_features = 0;
  for (size_t t = 0; t < m; ++t) {
    if (ffi::Error error = ReadConversionSpecs(attributes, TablePrefix(t), &specs[t],
                                               &features[t]);
        error.failure()) {
      return error;
    }
    num_features += static_cast<int64_t>(features[t].size());
  }
  if (args.size() != m + 4 * num_features || rets.size() != m) {
    return ToFfiError(Status::Error("the features lookup's custom call has the wrong number of "
                                    "operands"));
  }
  std::vector<FeatureTensors> tensors(num_features);
  for (int64_t f = 0; f < num_features; ++f) {
    if (ffi::Error error = ReadFeatureOperands(args, m, num_features, f, &tensors[f]);
        error.failure()) {
      return error;
    }
  }
  std::vector<TableFeatures> tables(m);
  std::vector<std::vector<int64_t>> row_counts(m);  // known when compiling: not a result
  size_t first_feature = 0;
  for (size_t t = 0; t < m; ++t) {
    const auto table = args.get<ffi::AnyBuffer>(t);
    if (table.has_error()) return table.error();
    const auto dims = table.value().dimensions();
    if (dims.size() != 2) return ToFfiError(TableError(specs[t].name, "table must be a matrix"));
    const Status rows = CheckTableHoldsVocabulary(specs[t], dims[0]);
    if (!rows.ok()) return ToFfiError(rows);
    AdviseHugePages(table.value().untyped_data(), table.value().size_bytes());
    tables[t] = {&specs[t], &features[t], &tensors[first_feature], Data<float>(table.value()),
                 dims[1]};
    first_feature += features[t].size();
    row_counts[t].resize(features[t].size());
  }
  const LookupOutputs outputs = [&](size_t t, int64_t rows, float** activations,
                                    int64_t** counts) {
    auto result = rets.get<ffi::AnyBuffer>(t);
    if (result.has_error()) return Status::Error(std::string(result.error().message()));
    ffi::Result<ffi::AnyBuffer> buffer = result.value();
    TFE_RETURN_IF_ERROR(CheckMatrix(*buffer, "activations", rows, tables[t].dim)
                            .WithContext(TableContext(specs[t].name)));
    *activations = Data<float>(*buffer);
    *counts = row_counts[t].data();
    return Status();
  };
  return ToFfiError(LookUpTablesFeatures(tables, outputs, pool.num_threads(), PoolSharder(pool)));
}

XLA_FFI_DEFINE_HANDLER(kFeaturesLookupHandler, FeaturesLookup,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::ThreadPool>()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attrs<ffi::Dictionary>());

XLA_FFI_DEFINE_HANDLER(kFeaturesToCsrHandler, FeaturesToCsr,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Attrs<ffi::Dictionary>());

[[maybe_unused]] const bool kRegistered = [] {
  RegisterFfiHandler(kFeaturesToCsrTarget, kFeaturesToCsrHandler);
  RegisterFfiHandler(kFeaturesLookupTarget, kFeaturesLookupHandler);
  return true;
}();

}  // namespace
}  // namespace tf_embedding
