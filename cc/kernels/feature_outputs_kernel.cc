// TfeFeatureOutputs: a table's stacked activations as its features' outputs (core:
// feature_outputs.h). Each output shares the activations' buffer where TensorFlow's alignment
// allows (as SplitV does), so a step pays one cheap op per table for the check, split and shapes.
#include <cstring>
#include <vector>

#include "cc/core/errors.h"
#include "cc/core/feature_outputs.h"
#include "cc/kernels/feature_outputs_attrs.h"
#include "cc/kernels/shape_checks.h"
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

class FeatureOutputsOp : public OpKernel {
 public:
  explicit FeatureOutputsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadFeatureOutputsAttrs(ctx, &spec_));
  }

  // A slice and a check: the executor runs it inline instead of handing it to another thread.
  bool IsExpensive() override { return false; }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& activations = ctx->input(0);
    const Tensor& row_counts = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckRank(spec_.table_name, "", "activations", activations.shape(), 2));
    OP_REQUIRES_OK(ctx, CheckRank(spec_.table_name, "", "feature_row_counts", row_counts.shape(),
                                  1));
    std::vector<int64_t> first_dims;
    OP_REQUIRES_OK(ctx, ToAbslStatus(FeatureOutputFirstDims(
                            spec_, row_counts.flat<int64_t>().data(), row_counts.dim_size(0),
                            activations.dim_size(0), activations.dim_size(1), &first_dims)));
    const auto counts = row_counts.flat<int64_t>();
    int64_t first_row = 0;
    for (size_t f = 0; f < first_dims.size(); ++f) {
      // The first dimension is the batch's (the spec's may be -1: unknown).
      std::vector<int64_t> dims = spec_.output_shapes[f];
      dims[0] = first_dims[f];
      TensorShape shape;
      OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape(dims, &shape));
      const Tensor rows = activations.Slice(first_row, first_row + counts(f));
      first_row += counts(f);
      Tensor output;
      if (rows.IsAligned()) {
        OP_REQUIRES(ctx, output.CopyFrom(rows, shape),
                    absl::InternalError(TableContext(spec_.table_name) +
                                        "cannot reshape the activations"));
      } else {
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, shape, &output));
        std::memcpy(output.data(), rows.data(), rows.TotalBytes());
      }
      ctx->set_output(static_cast<int>(f), output);
    }
  }

 private:
  FeatureOutputsSpec spec_;
};

REGISTER_KERNEL_BUILDER(Name("TfeFeatureOutputs").Device(::tensorflow::DEVICE_CPU),
                        FeatureOutputsOp);

}  // namespace
}  // namespace tf_embedding
