// The gradient inputs of the XLA gradient and sparse-apply kernels, read into one list of
// terms: a gradient row for one id, in the TF kernels' order (batch or list order, then
// position), which is the order in which GroupById sums an id's terms.
#ifndef TF_EMBEDDING_CC_XLA_GRADIENT_TERMS_H_
#define TF_EMBEDDING_CC_XLA_GRADIENT_TERMS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tf_embedding {

struct GradientTerms {
  xla::XlaOp ids;   // int64 [size]; -1 for a lookup in no row of its batch, which is skipped
  xla::XlaOp rows;  // float [size, dim]
  int64_t size = 0;
};

// The N CSR batches of inputs row_splits, ids, gains and activation_gradients: one term per
// lookup, gain * its row's activation gradient. `dim` is the table's; a negative value is
// replaced by that of activation_gradients[0]. Checks the shapes as the TF kernels do.
absl::Status ReadCsrGradientTerms(tensorflow::XlaOpKernelContext* ctx,
                                  const std::string& table_name, int64_t* dim,
                                  GradientTerms* terms);

// The N lists of inputs unique_ids and rows: one term per row. Unlike the TF kernels, which
// reject them, ids need not ascend within a list: repeated ids are summed like the others.
absl::Status ReadRowGradientTerms(tensorflow::XlaOpKernelContext* ctx,
                                  const std::string& table_name, int64_t* dim,
                                  GradientTerms* terms);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_GRADIENT_TERMS_H_
