// XLA kernels of TfeEmbeddingLookup (table in a resource variable) and TfeEmbeddingLookupDense
// (table tensor): CombineLookups over the rows of the batch, checked for shape when compiled.
#include <string>

#include "cc/core/csr_batch.h"
#include "cc/core/errors.h"
#include "cc/kernels/shape_checks.h"
#include "cc/kernels/status.h"
#include "cc/xla/batch_ops.h"
#include "cc/xla/registration.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"

namespace tf_embedding {
namespace {

using ::tensorflow::TensorShape;
using ::tensorflow::XlaOpKernelContext;

// kVariable: the table is resource input 0 (TfeEmbeddingLookup), else a tensor.
template <bool kVariable>
class EmbeddingLookupXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit EmbeddingLookupXlaOp(tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    TensorShape table_shape;
    xla::XlaOp table;
    if (kVariable) {
      OP_REQUIRES_OK(ctx, ctx->ReadVariableInput(0, tensorflow::DT_FLOAT, &table_shape, &table));
      OP_REQUIRES_OK(ctx, CheckMatrixVariableShape(TableContext(table_name_) + "table",
                                                   table_shape));
    } else {
      table = ctx->Input(0);
      table_shape = ctx->InputShape(0);
      OP_REQUIRES(ctx, table_shape.dims() == 2,
                  ToAbslStatus(TableError(table_name_, "table must be a matrix, got shape ",
                                          table_shape.DebugString())));
    }
    const TensorShape row_splits = ctx->InputShape(1);
    const TensorShape ids = ctx->InputShape(2);
    const TensorShape gains = ctx->InputShape(3);
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "row_splits", row_splits, 1));
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "ids", ids, 1));
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "gains", gains, 1));
    const int64_t num_ids = ids.dim_size(0);
    OP_REQUIRES_OK(ctx, ToAbslStatus(ValidateCsrBatchSizes(row_splits.dim_size(0), num_ids,
                                                           gains.dim_size(0))
                                         .WithContext(TableContext(table_name_))));
    const int64_t num_rows = row_splits.dim_size(0) - 1;
    ctx->SetOutput(0, CombineLookups(table, table_shape.dim_size(0), table_shape.dim_size(1),
                                     ctx->Input(2), ctx->Input(3), num_ids,
                                     RowOfLookups(ctx->Input(1), num_rows, num_ids), num_rows));
  }

 private:
  std::string table_name_;
};

[[maybe_unused]] const bool kRegistered = [] {
  RegisterXlaKernel({"TfeEmbeddingLookup"}, CreateXlaKernel<EmbeddingLookupXlaOp<true>>);
  RegisterXlaKernel({"TfeEmbeddingLookupDense"}, CreateXlaKernel<EmbeddingLookupXlaOp<false>>);
  return true;
}();

}  // namespace
}  // namespace tf_embedding
