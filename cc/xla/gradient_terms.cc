#include "cc/xla/gradient_terms.h"

#include <limits>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/errors.h"
#include "cc/kernels/shape_checks.h"
#include "cc/kernels/status.h"
#include "cc/xla/batch_ops.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_embedding {
namespace {

using ::tensorflow::TensorShape;

// Concatenates the non-empty parts into `terms` (no parts: zero terms of `dim`).
absl::Status Concatenate(xla::XlaBuilder* builder, const std::string& table_name,
                         const std::vector<xla::XlaOp>& ids, const std::vector<xla::XlaOp>& rows,
                         int64_t size, int64_t dim, GradientTerms* terms) {
  // GroupById numbers terms with int32.
  if (size > std::numeric_limits<int32_t>::max()) {
    return ToAbslStatus(TableError(table_name, "XLA kernels take at most 2^31 - 1 gradient "
                                   "terms, got ", size));
  }
  terms->size = size;
  if (ids.empty()) {
    terms->ids = xla::Broadcast(xla::ConstantR0<int64_t>(builder, 0), {0});
    terms->rows = xla::Broadcast(xla::ConstantR0<float>(builder, 0), {0, dim});
  } else {
    terms->ids = xla::ConcatInDim(builder, ids, 0);
    terms->rows = xla::ConcatInDim(builder, rows, 0);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadCsrGradientTerms(tensorflow::XlaOpKernelContext* ctx,
                                  const std::string& table_name, int64_t* dim,
                                  GradientTerms* terms) {
  std::vector<xla::XlaOp> row_splits, ids, gains, gradients;
  std::vector<TensorShape> row_splits_shapes, ids_shapes, gains_shapes, gradients_shapes;
  TF_RETURN_IF_ERROR(ctx->InputList("row_splits", &row_splits, &row_splits_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("ids", &ids, &ids_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("gains", &gains, &gains_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("activation_gradients", &gradients, &gradients_shapes));
  xla::XlaBuilder* builder = ctx->builder();
  std::vector<xla::XlaOp> term_ids, term_rows;
  int64_t size = 0;
  for (size_t b = 0; b < row_splits.size(); ++b) {
    const std::string context = BatchContext(b);
    TF_RETURN_IF_ERROR(CheckRank(table_name, context, "row_splits", row_splits_shapes[b], 1));
    TF_RETURN_IF_ERROR(CheckRank(table_name, context, "ids", ids_shapes[b], 1));
    TF_RETURN_IF_ERROR(CheckRank(table_name, context, "gains", gains_shapes[b], 1));
    const int64_t num_rows = row_splits_shapes[b].dim_size(0) - 1;
    const int64_t num_ids = ids_shapes[b].dim_size(0);
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "activation_gradients",
                                          gradients_shapes[b], std::max<int64_t>(num_rows, 0),
                                          "row_splits segment", dim));
    TF_RETURN_IF_ERROR(ToAbslStatus(
        ValidateCsrBatchSizes(num_rows + 1, num_ids, gains_shapes[b].dim_size(0))
            .WithContext(TableContext(table_name) + context)));
    // Without rows no lookup is in a row: the batch adds no terms.
    if (num_rows == 0 || num_ids == 0) continue;
    const xla::XlaOp rows = RowOfLookups(row_splits[b], num_rows, num_ids);
    const xla::XlaOp in_row = xla::Lt(rows, xla::ConstantR0<int64_t>(builder, num_rows));
    term_ids.push_back(
        xla::Select(in_row, ids[b], xla::Broadcast(xla::ConstantR0<int64_t>(builder, -1),
                                                   {num_ids})));
    term_rows.push_back(xla::Mul(GatherRows(gradients[b], rows, *dim), gains[b], {0}));
    size += num_ids;
  }
  return Concatenate(builder, table_name, term_ids, term_rows, size, *dim, terms);
}

absl::Status ReadRowGradientTerms(tensorflow::XlaOpKernelContext* ctx,
                                  const std::string& table_name, int64_t* dim,
                                  GradientTerms* terms) {
  std::vector<xla::XlaOp> unique_ids, rows;
  std::vector<TensorShape> unique_ids_shapes, rows_shapes;
  TF_RETURN_IF_ERROR(ctx->InputList("unique_ids", &unique_ids, &unique_ids_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("rows", &rows, &rows_shapes));
  std::vector<xla::XlaOp> term_ids, term_rows;
  int64_t size = 0;
  for (size_t b = 0; b < unique_ids.size(); ++b) {
    const std::string context = BatchContext(b);
    TF_RETURN_IF_ERROR(CheckRank(table_name, context, "unique_ids", unique_ids_shapes[b], 1));
    const int64_t num_ids = unique_ids_shapes[b].dim_size(0);
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "rows", rows_shapes[b], num_ids,
                                          "unique id", dim));
    if (num_ids == 0) continue;
    term_ids.push_back(unique_ids[b]);
    term_rows.push_back(rows[b]);
    size += num_ids;
  }
  return Concatenate(ctx->builder(), table_name, term_ids, term_rows, size, *dim, terms);
}

}  // namespace tf_embedding
