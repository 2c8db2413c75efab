#include "cc/kernels/csr_conversion_attrs.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cc/core/errors.h"
#include "cc/kernels/tf_status.h"

namespace tf_embedding {

namespace {

// The per-feature attrs, one entry per feature of every table the op takes.
struct FeatureAttrs {
  std::vector<tensorflow::DataType> id_types;
  std::vector<std::string> feature_names, input_kinds;
  std::vector<bool> has_weights, prune_invalid;
  std::vector<int64_t> max_sequence_lengths;
};

absl::Status ReadFeatureAttrs(tensorflow::OpKernelConstruction* ctx, FeatureAttrs* attrs) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("Tids", &attrs->id_types));
  TF_RETURN_IF_ERROR(ctx->GetAttr("feature_names", &attrs->feature_names));
  TF_RETURN_IF_ERROR(ctx->GetAttr("input_kinds", &attrs->input_kinds));
  TF_RETURN_IF_ERROR(ctx->GetAttr("has_weights", &attrs->has_weights));
  TF_RETURN_IF_ERROR(ctx->GetAttr("max_sequence_lengths", &attrs->max_sequence_lengths));
  return ctx->GetAttr("prune_invalid", &attrs->prune_invalid);
}

// Entries [begin, begin + count) of `values`. REQUIRES: values has that many.
template <typename T>
std::vector<T> Slice(const std::vector<T>& values, size_t begin, size_t count) {
  return std::vector<T>(values.begin() + begin, values.begin() + begin + count);
}

// Checks that every (attr, length) pair has `count` entries, one per one of the op's `what`.
absl::Status CheckListLengths(std::initializer_list<std::pair<const char*, size_t>> lengths,
                              int64_t count, const char* what) {
  for (const auto& [attr, length] : lengths) {
    if (static_cast<int64_t>(length) != count) {
      return absl::InvalidArgumentError(absl::StrCat("attr ", attr, " has ", length,
                                                     " entries but there are ", count, " ",
                                                     what));
    }
  }
  return absl::OkStatus();
}

// The specs of features [begin, begin + count) of `attrs`, which belong to table `table_name`.
absl::Status ParseTableFeatures(const std::string& table_name, const FeatureAttrs& attrs,
                                size_t begin, size_t count, std::vector<FeatureSpec>* features) {
  return ToAbslStatus(ParseFeatureSpecs(
      table_name, count, Slice(attrs.feature_names, begin, count),
      Slice(attrs.input_kinds, begin, count), Slice(attrs.has_weights, begin, count),
      Slice(attrs.max_sequence_lengths, begin, count), Slice(attrs.prune_invalid, begin, count),
      features));
}

absl::Status CheckIdTypeCount(const std::string& table_name, const FeatureAttrs& attrs,
                              int64_t num_features) {
  if (static_cast<int64_t>(attrs.id_types.size()) == num_features) return absl::OkStatus();
  return ToAbslStatus(TableError(table_name, attrs.id_types.size(), " ids tensors but ",
                                 num_features, " features"));
}

}  // namespace

absl::Status ReadCsrConversionAttrs(tensorflow::OpKernelConstruction* ctx, TableSpec* table,
                                    std::vector<FeatureSpec>* features) {
  std::string table_name, combiner;
  int64_t vocabulary_size = 0, num_features = 0;
  FeatureAttrs attrs;
  TF_RETURN_IF_ERROR(ctx->GetAttr("table_name", &table_name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("combiner", &combiner));
  TF_RETURN_IF_ERROR(ctx->GetAttr("vocabulary_size", &vocabulary_size));
  TF_RETURN_IF_ERROR(ctx->GetAttr("N", &num_features));
  TF_RETURN_IF_ERROR(ReadFeatureAttrs(ctx, &attrs));
  TF_RETURN_IF_ERROR(CheckIdTypeCount(table_name, attrs, num_features));
  TF_RETURN_IF_ERROR(ToAbslStatus(
      ParseTableSpec(table_name, vocabulary_size, combiner, table, /*any_key=*/true)));
  return ToAbslStatus(ParseFeatureSpecs(table_name, num_features, attrs.feature_names,
                                        attrs.input_kinds, attrs.has_weights,
                                        attrs.max_sequence_lengths, attrs.prune_invalid,
                                        features));
}

absl::Status ReadTablesLookupAttrs(tensorflow::OpKernelConstruction* ctx,
                                   std::vector<TableSpec>* tables,
                                   std::vector<std::vector<FeatureSpec>>* features) {
  std::vector<std::string> table_names, combiners;
  std::vector<int64_t> vocabulary_sizes, table_feature_counts;
  int64_t num_tables = 0, num_features = 0;
  FeatureAttrs attrs;
  TF_RETURN_IF_ERROR(ctx->GetAttr("M", &num_tables));
  TF_RETURN_IF_ERROR(ctx->GetAttr("N", &num_features));
  TF_RETURN_IF_ERROR(ctx->GetAttr("table_names", &table_names));
  TF_RETURN_IF_ERROR(ctx->GetAttr("combiners", &combiners));
  TF_RETURN_IF_ERROR(ctx->GetAttr("vocabulary_sizes", &vocabulary_sizes));
  TF_RETURN_IF_ERROR(ctx->GetAttr("table_feature_counts", &table_feature_counts));
  TF_RETURN_IF_ERROR(ReadFeatureAttrs(ctx, &attrs));
  TF_RETURN_IF_ERROR(CheckListLengths({{"table_names", table_names.size()},
                                        {"combiners", combiners.size()},
                                        {"vocabulary_sizes", vocabulary_sizes.size()},
                                        {"table_feature_counts", table_feature_counts.size()}},
                                       num_tables, "tables"));
  TF_RETURN_IF_ERROR(CheckListLengths({{"Tids", attrs.id_types.size()},
                                        {"feature_names", attrs.feature_names.size()},
                                        {"input_kinds", attrs.input_kinds.size()},
                                        {"has_weights", attrs.has_weights.size()},
                                        {"max_sequence_lengths",
                                         attrs.max_sequence_lengths.size()},
                                        {"prune_invalid", attrs.prune_invalid.size()}},
                                       num_features, "features"));
  tables->assign(num_tables, TableSpec{});
  features->assign(num_tables, {});
  int64_t begin = 0;
  for (int64_t t = 0; t < num_tables; ++t) {
    const std::string& name = table_names[t];
    TF_RETURN_IF_ERROR(ToAbslStatus(
        ParseTableSpec(name, vocabulary_sizes[t], combiners[t], &(*tables)[t])));
    const int64_t count = table_feature_counts[t];
    if (count < 1 || begin + count > num_features) {
      return ToAbslStatus(TableError(name, "table_feature_counts gives it ", count,
                                     " features from feature ", begin, " of ", num_features));
    }
    TF_RETURN_IF_ERROR(ParseTableFeatures(name, attrs, begin, count, &(*features)[t]));
    begin += count;
  }
  if (begin != num_features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table_feature_counts sum to ", begin, " but there are ", num_features, " features"));
  }
  return absl::OkStatus();
}

namespace {

template <typename T>
Span<T> FlatSpan(const tensorflow::Tensor& tensor) {
  const auto flat = tensor.flat<T>();
  return {flat.data(), flat.size()};
}

IdSpan IdsOf(const tensorflow::Tensor& ids) {
  if (ids.dtype() == tensorflow::DT_INT32) {
    return {ids.flat<int32_t>().data(), ids.NumElements()};
  }
  return {ids.flat<int64_t>().data(), ids.NumElements()};
}

}  // namespace

absl::Status ReadFeatureTensors(tensorflow::OpKernelContext* ctx, size_t num_features,
                                std::vector<FeatureTensors>* features) {
  tensorflow::OpInputList ids, row_info, dense_shapes, weights;
  TF_RETURN_IF_ERROR(ctx->input_list("ids", &ids));
  TF_RETURN_IF_ERROR(ctx->input_list("row_info", &row_info));
  TF_RETURN_IF_ERROR(ctx->input_list("dense_shapes", &dense_shapes));
  TF_RETURN_IF_ERROR(ctx->input_list("weights", &weights));
  features->assign(num_features, FeatureTensors{});
  for (size_t f = 0; f < num_features; ++f) {
    FeatureTensors& tensors = (*features)[f];
    tensors.ids = IdsOf(ids[f]);
    tensors.row_info = FlatSpan<int64_t>(row_info[f]);
    const auto row_info_dims = row_info[f].shape().dim_sizes();
    tensors.row_info_shape.assign(row_info_dims.begin(), row_info_dims.end());
    tensors.dense_shape = FlatSpan<int64_t>(dense_shapes[f]);
    tensors.weights = FlatSpan<float>(weights[f]);
  }
  return absl::OkStatus();
}

}  // namespace tf_embedding
