// What the sparse-apply kernels of both runtimes (cc/kernels for TensorFlow's, cc/xla for XLA)
// read and check the same way: the hyperparameter attrs and the shapes of the table and slot
// variables, with one wording of every message.
#ifndef TF_EMBEDDING_CC_KERNELS_SPARSE_APPLY_CHECKS_H_
#define TF_EMBEDDING_CC_KERNELS_SPARSE_APPLY_CHECKS_H_

#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cc/core/errors.h"
#include "cc/kernels/shape_checks.h"
#include "cc/kernels/tf_status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_embedding {

// Reads every hyperparameter attr of Params (hyperparameters.h) into its member.
template <typename Params>
absl::Status ReadHyperparameters(tensorflow::OpKernelConstruction* ctx, Params* params) {
  for (const auto& hyperparameter : Params::Hyperparameters()) {
    TF_RETURN_IF_ERROR(std::visit(
        [&](auto member) { return ctx->GetAttr(hyperparameter.name, &(params->*member)); },
        hyperparameter.member));
  }
  return absl::OkStatus();
}

// Input i of Rule's ops among the variables: "table", then "slot '<name>'".
template <typename Rule>
std::string VariableName(int i) {
  return i == 0 ? "table" : absl::StrCat("slot '", Rule::kSlotNames[i - 1], "'");
}

// Every variable (table, then Rule's slots) is a matrix of the table's shape, whose dim is that
// of the gradients (input `gradients`). `shapes` are the variables' shapes.
template <typename Rule>
absl::Status CheckVariableShapes(const std::string& table_name, const char* gradients,
                                 const std::vector<tensorflow::TensorShape>& shapes,
                                 int64_t dim) {
  for (size_t i = 0; i < shapes.size(); ++i) {
    TF_RETURN_IF_ERROR(
        CheckMatrixVariableShape(TableContext(table_name) + VariableName<Rule>(i), shapes[i]));
  }
  const tensorflow::TensorShape& shape = shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i] != shape) {
      return ToAbslStatus(TableError(table_name, VariableName<Rule>(i), " has shape ",
                                     shapes[i].DebugString(), " but the table has shape ",
                                     shape.DebugString()));
    }
  }
  if (shape.dim_size(1) != dim) {
    return ToAbslStatus(TableError(table_name, gradients, " have dimension ", dim,
                                   " but the table has shape ", shape.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_SPARSE_APPLY_CHECKS_H_
