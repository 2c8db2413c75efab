#include "cc/kernels/csr_conversion_attrs.h"

#include <string>

#include "cc/core/errors.h"
#include "cc/kernels/tf_status.h"

namespace tf_embedding {

absl::Status ReadCsrConversionAttrs(tensorflow::OpKernelConstruction* ctx, TableSpec* table,
                                    std::vector<FeatureSpec>* features) {
  std::string table_name, combiner;
  int64_t vocabulary_size = 0, num_features = 0;
  std::vector<tensorflow::DataType> id_types;
  std::vector<std::string> feature_names, input_kinds;
  std::vector<bool> has_weights, prune_invalid;
  std::vector<int64_t> max_sequence_lengths;
  TF_RETURN_IF_ERROR(ctx->GetAttr("table_name", &table_name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("combiner", &combiner));
  TF_RETURN_IF_ERROR(ctx->GetAttr("vocabulary_size", &vocabulary_size));
  TF_RETURN_IF_ERROR(ctx->GetAttr("N", &num_features));
  TF_RETURN_IF_ERROR(ctx->GetAttr("Tids", &id_types));
  TF_RETURN_IF_ERROR(ctx->GetAttr("feature_names", &feature_names));
  TF_RETURN_IF_ERROR(ctx->GetAttr("input_kinds", &input_kinds));
  TF_RETURN_IF_ERROR(ctx->GetAttr("has_weights", &has_weights));
  TF_RETURN_IF_ERROR(ctx->GetAttr("max_sequence_lengths", &max_sequence_lengths));
  TF_RETURN_IF_ERROR(ctx->GetAttr("prune_invalid", &prune_invalid));
  if (static_cast<int64_t>(id_types.size()) != num_features) {
    return ToAbslStatus(
        TableError(table_name, id_types.size(), " ids tensors but ", num_features, " features"));
  }
  TF_RETURN_IF_ERROR(ToAbslStatus(ParseTableSpec(table_name, vocabulary_size, combiner, table)));
  return ToAbslStatus(ParseFeatureSpecs(table_name, num_features, feature_names, input_kinds,
                                        has_weights, max_sequence_lengths, prune_invalid,
                                        features));
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
