#include "cc/kernels/csr_inputs.h"

#include <algorithm>

#include "cc/core/errors.h"
#include "cc/kernels/tf_status.h"
#include "tensorflow/core/platform/errors.h"

namespace tf_embedding {
using ::tensorflow::OpInputList;
using ::tensorflow::Tensor;

absl::Status CsrBatchFromTensors(const std::string& table_name, const std::string& context,
                                 const Tensor& row_splits, const Tensor& ids, const Tensor& gains,
                                 CsrBatch* batch) {
  TF_RETURN_IF_ERROR(CheckRank(table_name, context, "row_splits", row_splits.shape(), 1));
  TF_RETURN_IF_ERROR(CheckRank(table_name, context, "ids", ids.shape(), 1));
  TF_RETURN_IF_ERROR(CheckRank(table_name, context, "gains", gains.shape(), 1));
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
    const std::string context = BatchContext(b);
    GradientBatch& batch = (*batches)[b];
    TF_RETURN_IF_ERROR(
        CsrBatchFromTensors(table_name, context, row_splits[b], ids[b], gains[b], &batch.csr));
    // A row_splits without elements is reported by the CSR validation; count it as no rows.
    const int64_t rows = std::max<int64_t>(batch.csr.num_rows(), 0);
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "activation_gradients",
                                          activation_gradients[b].shape(), rows,
                                          "row_splits segment", dim));
    batch.activation_gradients = activation_gradients[b].flat<float>().data();
  }
  return absl::OkStatus();
}

absl::Status ReadSortedRows(tensorflow::OpKernelContext* ctx, const std::string& table_name,
                            int64_t* dim, std::vector<SortedRows>* lists) {
  OpInputList unique_ids, rows;
  TF_RETURN_IF_ERROR(ctx->input_list("unique_ids", &unique_ids));
  TF_RETURN_IF_ERROR(ctx->input_list("rows", &rows));
  lists->assign(unique_ids.size(), SortedRows());
  for (int b = 0; b < unique_ids.size(); ++b) {
    const std::string context = BatchContext(b);
    TF_RETURN_IF_ERROR(
        CheckRank(table_name, context, "unique_ids", unique_ids[b].shape(), 1));
    const int64_t num_ids = unique_ids[b].NumElements();
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "rows", rows[b].shape(),
                                          num_ids, "unique id", dim));
    (*lists)[b] = {unique_ids[b].flat<int64_t>().data(), num_ids, rows[b].flat<float>().data()};
  }
  return absl::OkStatus();
}

}  // namespace tf_embedding
