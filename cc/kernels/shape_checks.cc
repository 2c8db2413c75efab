#include "cc/kernels/shape_checks.h"

#include "absl/strings/str_cat.h"
#include "cc/core/errors.h"
#include "cc/kernels/tf_status.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/errors.h"

namespace tf_embedding {

using ::tensorflow::TensorShape;

absl::Status CheckRank(const std::string& table_name, const std::string& context,
                       const char* what, const TensorShape& shape, int rank) {
  if (shape.dims() == rank) return absl::OkStatus();
  const char* names[] = {"scalar", "vector", "matrix"};
  return ToAbslStatus(TableError(table_name, context, what, " must be a ", names[rank],
                                 ", got shape ", shape.DebugString()));
}

absl::Status CheckGradientShape(const std::string& table_name, const std::string& context,
                                const char* what, const TensorShape& gradients, int64_t rows,
                                const char* rows_are, int64_t* dim) {
  TF_RETURN_IF_ERROR(CheckRank(table_name, context, what, gradients, 2));
  if (*dim < 0) *dim = gradients.dim_size(1);
  if (gradients.dim_size(0) == rows && gradients.dim_size(1) == *dim) return absl::OkStatus();
  return ToAbslStatus(TableError(table_name, context, what, " has shape ",
                                 gradients.DebugString(), " but must be [", rows, ",",
                                 *dim, "] (one row per ", rows_are,
                                 ", of the embedding dimension)"));
}

absl::Status CheckMatrixVariableShape(const std::string& what, const TensorShape& shape) {
  if (shape.dims() == 2) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " variable must be a matrix, got shape ", shape.DebugString()));
}

absl::Status CheckFloatVariableType(const std::string& what, tensorflow::DataType dtype) {
  if (dtype == tensorflow::DT_FLOAT) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " variable must hold float32, got ",
                                                 tensorflow::DataTypeString(dtype)));
}

absl::Status CheckLearningRateShape(const std::string& table_name, const TensorShape& shape) {
  if (shape.dims() == 0) return absl::OkStatus();
  return ToAbslStatus(TableError(table_name, "learning_rate must be a scalar, got shape ",
                                 shape.DebugString()));
}

}  // namespace tf_embedding
