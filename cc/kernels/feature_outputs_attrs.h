// The attrs of TfeFeatureOutputs as cc/core's FeatureOutputsSpec, read the same way by its TF
// kernel and its XLA kernel (cc/xla).
#ifndef TF_EMBEDDING_CC_KERNELS_FEATURE_OUTPUTS_ATTRS_H_
#define TF_EMBEDDING_CC_KERNELS_FEATURE_OUTPUTS_ATTRS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/errors.h"
#include "cc/core/feature_outputs.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_embedding {

inline absl::Status ReadFeatureOutputsAttrs(tensorflow::OpKernelConstruction* ctx,
                                            FeatureOutputsSpec* spec) {
  std::vector<tensorflow::PartialTensorShape> shapes;
  TF_RETURN_IF_ERROR(ctx->GetAttr("table_name", &spec->table_name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("output_shapes", &shapes));
  TF_RETURN_IF_ERROR(ctx->GetAttr("partial", &spec->partial));
  TF_RETURN_IF_ERROR(ctx->GetAttr("message", &spec->message));
  if (static_cast<int>(shapes.size()) != ctx->num_outputs()) {
    return absl::InvalidArgumentError(
        TableContext(spec->table_name) + "output_shapes has " + std::to_string(shapes.size()) +
        " shapes for " + std::to_string(ctx->num_outputs()) + " outputs");
  }
  spec->output_shapes.clear();
  for (const tensorflow::PartialTensorShape& shape : shapes) {
    // Only a partial batch's first dimension may be unknown (-1; FeatureOutputsSpec).
    bool defined = shape.dims() > 0;
    for (int d = 0; defined && d < shape.dims(); ++d) {
      defined = shape.dim_size(d) >= 0 || (d == 0 && spec->partial);
    }
    if (!defined) {
      return absl::InvalidArgumentError(TableContext(spec->table_name) + "output shape " +
                                        shape.DebugString() + " is not fully defined" +
                                        (spec->partial ? " beyond its batch dimension" : ""));
    }
    const auto dims = shape.dim_sizes();
    spec->output_shapes.emplace_back(dims.begin(), dims.end());
  }
  return absl::OkStatus();
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_FEATURE_OUTPUTS_ATTRS_H_
