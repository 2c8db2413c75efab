// TfeEmbeddingLookup (table in a resource variable) and TfeEmbeddingLookupDense (table tensor):
// validate, then CombineRows over the output rows on the intra-op pool.
#include <string>

#include "cc/core/csr_batch.h"
#include "cc/core/errors.h"
#include "cc/core/parallel_steps.h"
#include "cc/kernels/csr_inputs.h"
#include "cc/kernels/row_sharding.h"
#include "cc/kernels/tf_status.h"
#include "cc/kernels/variable_access.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Writes output 0 = the activations of the batch in inputs 1-3 looked up in `table`, a float
// matrix the caller keeps alive (and, for a variable, locked) for the duration of the call.
void ComputeActivations(OpKernelContext* ctx, const std::string& table_name,
                        const Tensor& table) {
  CsrBatch batch;
  OP_REQUIRES_OK(ctx, CsrBatchFromTensors(table_name, "", ctx->input(1), ctx->input(2),
                                          ctx->input(3), &batch));
  const int64_t vocabulary_size = table.dim_size(0);
  const int64_t dim = table.dim_size(1);
  OP_REQUIRES_OK(ctx, ToAbslStatus(ValidateCsrBatch(batch, vocabulary_size)
                                        .WithContext(TableContext(table_name))));

  Tensor* activations = nullptr;
  OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch.num_rows(), dim}),
                                           &activations));
  const float* table_data = table.flat<float>().data();
  float* out = activations->flat<float>().data();
  LookUpRows(batch, table_data, dim, out, IntraOpSharder(ctx));
}

class EmbeddingLookupOp : public OpKernel {
 public:
  explicit EmbeddingLookupOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, LookupVariable(ctx, 0, &var));
    // Read in place under the shared lock: ReadVariableOp would copy the whole table whenever
    // the variable is in copy-on-read mode (after any sparse update by a TF op).
    tensorflow::tf_shared_lock lock(*var->mu());
    OP_REQUIRES_OK(ctx, CheckFloatMatrixVariable(var.get(), TableContext(table_name_) + "table"));
    AdviseHugePages(var.get());
    ComputeActivations(ctx, table_name_, *var->tensor());
  }

 private:
  std::string table_name_;
};

class EmbeddingLookupDenseOp : public OpKernel {
 public:
  explicit EmbeddingLookupDenseOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& table = ctx->input(0);
    OP_REQUIRES(ctx, table.dims() == 2,
                ToAbslStatus(TableError(table_name_, "table must be a matrix, got shape ",
                                        table.shape().DebugString())));
    ComputeActivations(ctx, table_name_, table);
  }

 private:
  std::string table_name_;
};

REGISTER_KERNEL_BUILDER(Name("TfeEmbeddingLookup").Device(tensorflow::DEVICE_CPU),
                        EmbeddingLookupOp);
REGISTER_KERNEL_BUILDER(Name("TfeEmbeddingLookupDense").Device(tensorflow::DEVICE_CPU),
                        EmbeddingLookupDenseOp);

}  // namespace
}  // namespace tf_embedding
