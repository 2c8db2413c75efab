// TfeAssignRows / TfeResetRows: validate the window (the rows and their sources) against the
// table, then copy into the rows in place.
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "cc/core/errors.h"
#include "cc/kernels/shape_checks.h"
#include "cc/kernels/variable_access.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

class AssignRowsOp : public OpKernel {
 public:
  explicit AssignRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string context = TableContext(table_name_);
    const Tensor& first_row_tensor = ctx->input(1);
    const Tensor& rows = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "first_row", first_row_tensor.shape(), 0));
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "rows", rows.shape(), 2));
    const int64_t first_row = first_row_tensor.scalar<int64_t>()();

    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, LookupVariable(ctx, 0, &var));
    tensorflow::mutex_lock lock(*var->mu());
    OP_REQUIRES_OK(ctx, CheckFloatMatrixVariable(var.get(), context + "table"));
    const int64_t vocabulary_size = var->tensor()->dim_size(0);
    const int64_t dim = var->tensor()->dim_size(1);
    OP_REQUIRES(ctx, rows.dim_size(1) == dim,
                absl::InvalidArgumentError(absl::StrCat(
                    context, "rows have ", rows.dim_size(1), " columns, the table ", dim)));
    OP_REQUIRES(ctx, first_row >= 0 && first_row <= vocabulary_size - rows.dim_size(0),
                absl::InvalidArgumentError(absl::StrCat(
                    context, "rows [", first_row, ", ", first_row + rows.dim_size(0),
                    ") are not all within the table's ", vocabulary_size, " rows")));
    OP_REQUIRES_OK(ctx, EnsureUnsharedBuffer(ctx, var.get()));
    std::memcpy(var->tensor()->flat<float>().data() + first_row * dim,
                rows.flat<float>().data(), rows.NumElements() * sizeof(float));
  }

 private:
  std::string table_name_;
};

REGISTER_KERNEL_BUILDER(Name("TfeAssignRows").Device(tensorflow::DEVICE_CPU), AssignRowsOp);

// Fails unless every one of `ids` (named `what`) is a row of a matrix of `limit` rows.
absl::Status CheckRowIds(const std::string& context, const char* what, const Tensor& ids,
                         int64_t limit) {
  const auto flat = ids.flat<int64_t>();
  for (int64_t i = 0; i < flat.size(); ++i) {
    if (flat(i) < 0 || flat(i) >= limit) {
      return absl::InvalidArgumentError(absl::StrCat(context, what, "[", i, "] is ", flat(i),
                                                     ", not a row of the ", limit, " rows"));
    }
  }
  return absl::OkStatus();
}

class ResetRowsOp : public OpKernel {
 public:
  explicit ResetRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string context = TableContext(table_name_);
    const Tensor& rows = ctx->input(1);
    const Tensor& source = ctx->input(2);
    const Tensor& source_rows = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "rows", rows.shape(), 1));
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "source", source.shape(), 2));
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "source_rows", source_rows.shape(), 1));
    OP_REQUIRES(ctx, source_rows.dim_size(0) == rows.dim_size(0),
                absl::InvalidArgumentError(absl::StrCat(
                    context, source_rows.dim_size(0), " source_rows for ", rows.dim_size(0),
                    " rows")));
    OP_REQUIRES_OK(ctx, CheckRowIds(context, "source_rows", source_rows, source.dim_size(0)));
    // Most steps admit no key: no lock, and no private copy of a buffer a read still shares.
    if (rows.NumElements() == 0) return;

    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, LookupVariable(ctx, 0, &var));
    tensorflow::mutex_lock lock(*var->mu());
    OP_REQUIRES_OK(ctx, CheckFloatMatrixVariable(var.get(), context + "table"));
    const int64_t dim = var->tensor()->dim_size(1);
    OP_REQUIRES(ctx, source.dim_size(1) == dim,
                absl::InvalidArgumentError(absl::StrCat(
                    context, "source has ", source.dim_size(1), " columns, the table ", dim)));
    OP_REQUIRES_OK(ctx, CheckRowIds(context, "rows", rows, var->tensor()->dim_size(0)));
    OP_REQUIRES_OK(ctx, EnsureUnsharedBuffer(ctx, var.get()));
    float* table = var->tensor()->flat<float>().data();
    const float* values = source.flat<float>().data();
    const auto targets = rows.flat<int64_t>();
    const auto origins = source_rows.flat<int64_t>();
    for (int64_t i = 0; i < targets.size(); ++i) {
      std::memcpy(table + targets(i) * dim, values + origins(i) * dim, dim * sizeof(float));
    }
  }

 private:
  std::string table_name_;
};

REGISTER_KERNEL_BUILDER(Name("TfeResetRows").Device(tensorflow::DEVICE_CPU), ResetRowsOp);

}  // namespace
}  // namespace tf_embedding
