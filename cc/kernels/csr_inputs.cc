#include "cc/kernels/csr_inputs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/platform/errors.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpInputList;
using ::tensorflow::Tensor;

absl::Status CheckVector(const std::string& table_name, const std::string& context,
                         const char* what, const Tensor& t) {
  if (t.dims() == 1) return absl::OkStatus();
  return TableError(table_name, absl::StrCat(context, what, " must be a vector, got shape ",
                                             t.shape().DebugString()));
}

}  // namespace

absl::Status TableError(const std::string& table_name, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("Table '", table_name, "': ", message));
}

absl::Status CsrBatchFromTensors(const std::string& table_name, const std::string& context,
                                 const Tensor& row_splits, const Tensor& ids, const Tensor& gains,
                                 CsrBatch* batch) {
  TF_RETURN_IF_ERROR(CheckVector(table_name, context, "row_splits", row_splits));
  TF_RETURN_IF_ERROR(CheckVector(table_name, context, "ids", ids));
  TF_RETURN_IF_ERROR(CheckVector(table_name, context, "gains", gains));
  batch->row_splits = row_splits.flat<int64_t>().data();
  batch->num_row_splits = row_splits.NumElements();
  batch->ids = ids.flat<int64_t>().data();
  batch->num_ids = ids.NumElements();
  batch->gains = gains.flat<float>().data();
  batch->num_gains = gains.NumElements();
  return absl::OkStatus();
}

absl::Status ReadGradientBatches(tensorflow::OpKernelContext* ctx, const std::string& table_name,
                                 int64_t* dim, std::vector<GradientBatch>* batches) {
  OpInputList row_splits, ids, gains, activation_gradients;
  TF_RETURN_IF_ERROR(ctx->input_list("row_splits", &row_splits));
  TF_RETURN_IF_ERROR(ctx->input_list("ids", &ids));
  TF_RETURN_IF_ERROR(ctx->input_list("gains", &gains));
  TF_RETURN_IF_ERROR(ctx->input_list("activation_gradients", &activation_gradients));
  batches->assign(row_splits.size(), GradientBatch());
  for (int b = 0; b < row_splits.size(); ++b) {
    const std::string context = absl::StrCat("batch ", b, ": ");
    GradientBatch& batch = (*batches)[b];
    TF_RETURN_IF_ERROR(
        CsrBatchFromTensors(table_name, context, row_splits[b], ids[b], gains[b], &batch.csr));
    const Tensor& grads = activation_gradients[b];
    if (grads.dims() != 2) {
      return TableError(table_name,
                        absl::StrCat(context, "activation_gradients must be a matrix, got shape ",
                                     grads.shape().DebugString()));
    }
    if (*dim < 0) *dim = grads.dim_size(1);
    // A row_splits without elements is reported by the CSR validation; count it as no rows.
    const int64_t rows = std::max<int64_t>(batch.csr.num_rows(), 0);
    if (grads.dim_size(0) != rows || grads.dim_size(1) != *dim) {
      return TableError(table_name,
                        absl::StrCat(context, "activation_gradients has shape ",
                                     grads.shape().DebugString(), " but must be [", rows, ",",
                                     *dim, "] (one row per row_splits segment, of the ",
                                     "embedding dimension)"));
    }
    batch.activation_gradients = grads.flat<float>().data();
  }
  return absl::OkStatus();
}

}  // namespace tf_embedding
