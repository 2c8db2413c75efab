// Shape (and dtype) checks that the TF kernels (cc/kernels) and the XLA kernels (cc/xla) share,
// so that a malformed input gets the same message from both: XLA kernels see shapes only, and
// make these checks when they compile. Messages start with the table (and batch) they concern.
#ifndef TF_EMBEDDING_CC_KERNELS_SHAPE_CHECKS_H_
#define TF_EMBEDDING_CC_KERNELS_SHAPE_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.pb.h"

namespace tf_embedding {

// Checks that `shape`, of input `what` (of batch `context`: "" or "batch <b>: "), has `rank`
// (0, 1 or 2).
absl::Status CheckRank(const std::string& table_name, const std::string& context,
                       const char* what, const tensorflow::TensorShape& shape, int rank);

// Checks that `gradients` (input `what` of batch `context`) is [rows, dim], one row per
// `rows_are`; a negative dim is taken from it first.
absl::Status CheckGradientShape(const std::string& table_name, const std::string& context,
                                const char* what, const tensorflow::TensorShape& gradients,
                                int64_t rows, const char* rows_are, int64_t* dim);

// Checks that a variable (`what`: "Table 't': table", say) holds a matrix.
absl::Status CheckMatrixVariableShape(const std::string& what,
                                      const tensorflow::TensorShape& shape);

// Checks that a variable (`what` as above) holds float32.
absl::Status CheckFloatVariableType(const std::string& what, tensorflow::DataType dtype);

// Checks that the learning rate is a scalar.
absl::Status CheckLearningRateShape(const std::string& table_name,
                                    const tensorflow::TensorShape& shape);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_SHAPE_CHECKS_H_
