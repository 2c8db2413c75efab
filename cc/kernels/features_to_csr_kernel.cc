// TfeFeaturesToCsr: validate and stack one table's features into a CSR batch, and
// TfeFeaturesCheck: report what that validation would refuse (core: csr_conversion.h).
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cc/core/csr_conversion.h"
#include "cc/kernels/csr_conversion_attrs.h"
#include "cc/kernels/tf_status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// The tensor's elements as an output buffer of T.
template <typename T>
T* OutputData(Tensor* tensor) {
  return tensor->flat<T>().data();
}

class FeaturesToCsrOp : public OpKernel {
 public:
  explicit FeaturesToCsrOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCsrConversionAttrs(ctx, &table_, &features_));
  }

  // Single-threaded: conversion is one linear pass over a step's ids, memory-bound and short
  // next to the lookup it feeds.
  void Compute(OpKernelContext* ctx) override {
    std::vector<FeatureTensors> tensors;
    OP_REQUIRES_OK(ctx, ReadFeatureTensors(ctx, features_.size(), &tensors));
    CsrBuilder builder(table_);
    OP_REQUIRES_OK(ctx, ToAbslStatus(builder.AddFeatures(features_, tensors.data())));

    Tensor *row_splits = nullptr, *csr_ids = nullptr, *gains = nullptr, *row_counts = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({builder.num_rows() + 1}),
                                             &row_splits));
    // A lone contiguous int64 feature's ids are the CSR ids: passed on (reshaped to 1-D, the
    // same buffer) instead of copied.
    const bool forward_ids = builder.CsrIdsAreFeatureIds();
    if (forward_ids) {
      const Tensor& ids = ctx->input(0);
      Tensor flat_ids;
      OP_REQUIRES(ctx, flat_ids.CopyFrom(ids, TensorShape({builder.num_lookups()})),
                  absl::InternalError(absl::StrCat("table '", table_.name, "': ",
                                                   ids.NumElements(), " ids for ",
                                                   builder.num_lookups(), " lookups")));
      ctx->set_output(1, flat_ids);
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({builder.num_lookups()}),
                                               &csr_ids));
    }
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({builder.num_lookups()}), &gains));
    const std::vector<int64_t>& counts = builder.feature_row_counts();
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({static_cast<int64_t>(counts.size())}),
                                             &row_counts));
    builder.Build(OutputData<int64_t>(row_splits),
                  forward_ids ? nullptr : OutputData<int64_t>(csr_ids), OutputData<float>(gains));
    std::copy(counts.begin(), counts.end(), OutputData<int64_t>(row_counts));
  }

 private:
  TableSpec table_;
  std::vector<FeatureSpec> features_;
};

REGISTER_KERNEL_BUILDER(Name("TfeFeaturesToCsr").Device(::tensorflow::DEVICE_CPU),
                        FeaturesToCsrOp);

// TfeFeaturesCheck: the conversion's checks of each feature's structure (CheckFeatureStructure,
// AddFeature's own; not the ids' range), reported as the first refused feature and its message.
class FeaturesCheckOp : public OpKernel {
 public:
  explicit FeaturesCheckOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCsrConversionAttrs(ctx, &table_, &features_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<FeatureTensors> tensors;
    OP_REQUIRES_OK(ctx, ReadFeatureTensors(ctx, features_.size(), &tensors));
    int32_t invalid_feature = -1;
    std::string message;
    for (size_t f = 0; f < features_.size() && invalid_feature < 0; ++f) {
      const Status status = CheckFeatureStructure(table_.name, features_[f], tensors[f]);
      if (!status.ok()) {
        invalid_feature = static_cast<int32_t>(f);
        message = status.message();
      }
    }
    Tensor* index = nullptr;
    Tensor* text = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &index));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &text));
    index->scalar<int32_t>()() = invalid_feature;
    text->scalar<::tensorflow::tstring>()() = message;
  }

 private:
  TableSpec table_;
  std::vector<FeatureSpec> features_;
};

REGISTER_KERNEL_BUILDER(Name("TfeFeaturesCheck").Device(::tensorflow::DEVICE_CPU),
                        FeaturesCheckOp);

}  // namespace
}  // namespace tf_embedding
