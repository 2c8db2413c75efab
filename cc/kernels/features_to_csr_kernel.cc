// TfeFeaturesToCsr: validate and stack one table's features into a CSR batch
// (core: csr_conversion.h).
#include <string>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "cc/core/errors.h"
#include "cc/kernels/status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_embedding {
namespace {

using ::tensorflow::DataType;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

template <typename T>
Span<T> FlatSpan(const Tensor& tensor) {
  const auto flat = tensor.flat<T>();
  return {flat.data(), flat.size()};
}

IdSpan IdsOf(const Tensor& ids) {
  if (ids.dtype() == ::tensorflow::DT_INT32) {
    return {ids.flat<int32_t>().data(), ids.NumElements()};
  }
  return {ids.flat<int64_t>().data(), ids.NumElements()};
}

// The tensor's elements as an output buffer of T.
template <typename T>
T* OutputData(Tensor* tensor) {
  return tensor->flat<T>().data();
}

class FeaturesToCsrOp : public OpKernel {
 public:
  explicit FeaturesToCsrOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string table_name, combiner;
    int64_t vocabulary_size = 0, num_features = 0;
    std::vector<DataType> id_types;
    std::vector<std::string> feature_names, input_kinds;
    std::vector<bool> has_weights, prune_invalid;
    std::vector<int64_t> max_sequence_lengths;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("combiner", &combiner));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &vocabulary_size));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &num_features));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tids", &id_types));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("feature_names", &feature_names));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("input_kinds", &input_kinds));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("has_weights", &has_weights));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_sequence_lengths", &max_sequence_lengths));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("prune_invalid", &prune_invalid));
    OP_REQUIRES(ctx, static_cast<int64_t>(id_types.size()) == num_features,
                ToAbslStatus(TableError(table_name, id_types.size(), " ids tensors but ",
                                        num_features, " features")));
    OP_REQUIRES_OK(ctx,
                   ToAbslStatus(ParseTableSpec(table_name, vocabulary_size, combiner, &table_)));
    OP_REQUIRES_OK(ctx, ToAbslStatus(ParseFeatureSpecs(table_name, num_features, feature_names,
                                                       input_kinds, has_weights,
                                                       max_sequence_lengths, prune_invalid,
                                                       &features_)));
  }

  // Single-threaded: conversion is one linear pass over a step's ids, memory-bound and short
  // next to the lookup it feeds.
  void Compute(OpKernelContext* ctx) override {
    OpInputList ids, row_info, dense_shapes, weights;
    OP_REQUIRES_OK(ctx, ctx->input_list("ids", &ids));
    OP_REQUIRES_OK(ctx, ctx->input_list("row_info", &row_info));
    OP_REQUIRES_OK(ctx, ctx->input_list("dense_shapes", &dense_shapes));
    OP_REQUIRES_OK(ctx, ctx->input_list("weights", &weights));

    CsrBuilder builder(table_);
    for (size_t f = 0; f < features_.size(); ++f) {
      FeatureTensors tensors;
      tensors.ids = IdsOf(ids[f]);
      tensors.row_info = FlatSpan<int64_t>(row_info[f]);
      const auto row_info_dims = row_info[f].shape().dim_sizes();
      tensors.row_info_shape.assign(row_info_dims.begin(), row_info_dims.end());
      tensors.dense_shape = FlatSpan<int64_t>(dense_shapes[f]);
      tensors.weights = FlatSpan<float>(weights[f]);
      OP_REQUIRES_OK(ctx, ToAbslStatus(builder.AddFeature(features_[f], tensors)));
    }

    Tensor *row_splits = nullptr, *csr_ids = nullptr, *gains = nullptr, *row_counts = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({builder.num_rows() + 1}),
                                             &row_splits));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({builder.num_lookups()}), &csr_ids));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({builder.num_lookups()}), &gains));
    const std::vector<int64_t>& counts = builder.feature_row_counts();
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({static_cast<int64_t>(counts.size())}),
                                             &row_counts));
    builder.Build(OutputData<int64_t>(row_splits), OutputData<int64_t>(csr_ids),
                  OutputData<float>(gains));
    std::copy(counts.begin(), counts.end(), OutputData<int64_t>(row_counts));
  }

 private:
  TableSpec table_;
  std::vector<FeatureSpec> features_;
};

REGISTER_KERNEL_BUILDER(Name("TfeFeaturesToCsr").Device(::tensorflow::DEVICE_CPU),
                        FeaturesToCsrOp);

}  // namespace
}  // namespace tf_embedding
