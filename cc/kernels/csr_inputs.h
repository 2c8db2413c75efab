// Turns the batch inputs of the lookup, gradient and apply ops into core/ views, checking ranks
// and shapes on the way. Every message names the table (and the batch, for N-lists).
#ifndef TF_EMBEDDING_CC_KERNELS_CSR_INPUTS_H_
#define TF_EMBEDDING_CC_KERNELS_CSR_INPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/kernels/shape_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_embedding {

// Views one batch after checking that its three tensors are vectors. The view still has to pass
// ValidateCsrBatch before anything indexes with it. `context` ("" or "batch <b>: ") follows the
// table in messages.
absl::Status CsrBatchFromTensors(const std::string& table_name, const std::string& context,
                                 const tensorflow::Tensor& row_splits,
                                 const tensorflow::Tensor& ids, const tensorflow::Tensor& gains,
                                 CsrBatch* batch);

// Views the N batches of the list inputs `row_splits`, `ids`, `gains` and
// `activation_gradients`, checking that every activation_gradients is [R_b, dim] for the R_b
// rows its row_splits describe. `dim` is the table's; a negative value means "take it from
// activation_gradients[0]" and is replaced by it.
absl::Status ReadGradientBatches(tensorflow::OpKernelContext* ctx, const std::string& table_name,
                                 int64_t* dim, std::vector<GradientBatch>* batches);

// Views the N lists of the list inputs `unique_ids` and `rows`, checking that every rows is
// [U_b, dim] for the U_b ids of its list. `dim` as in ReadGradientBatches. The ids still have to
// pass GroupSortedRows' checks.
absl::Status ReadSortedRows(tensorflow::OpKernelContext* ctx, const std::string& table_name,
                            int64_t* dim, std::vector<SortedRows>* lists);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_CSR_INPUTS_H_
