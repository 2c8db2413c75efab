// TfeEmbeddingGradient: the table gradient of N lookups as (unique ids, summed rows).
#include <algorithm>
#include <string>
#include <vector>

#include "cc/core/errors.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/parallel_steps.h"
#include "cc/kernels/csr_inputs.h"
#include "cc/kernels/gradient_groups_pool.h"
#include "cc/kernels/row_sharding.h"
#include "cc/kernels/tf_status.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class EmbeddingGradientOp : public OpKernel {
 public:
  explicit EmbeddingGradientOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &vocabulary_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    int64_t dim = -1;
    std::vector<GradientBatch> batches;
    OP_REQUIRES_OK(ctx, ReadGradientBatches(ctx, table_name_, &dim, &batches));
    const GradientGroupsPool::Lease lease = groups_pool_.Take();
    GradientGroups& groups = *lease.get();
    Status status = GroupLookupsById(batches, dim, &groups);
    if (status.ok() && vocabulary_size_ >= 0) status = CheckIdsBelow(groups, vocabulary_size_);
    OP_REQUIRES_OK(ctx, ToAbslStatus(status.WithContext(TableContext(table_name_))));

    const int64_t num_unique = groups.num_unique();
    Tensor* unique_ids = nullptr;
    Tensor* values = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({num_unique}), &unique_ids));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({num_unique, dim}), &values));
    std::copy(groups.unique_ids.begin(), groups.unique_ids.end(),
              unique_ids->flat<int64_t>().data());
    SumGroups(groups, dim, values->flat<float>().data(), IntraOpSharder(ctx));
  }

 private:
  int64_t vocabulary_size_;
  std::string table_name_;
  GradientGroupsPool groups_pool_;
};

REGISTER_KERNEL_BUILDER(Name("TfeEmbeddingGradient").Device(tensorflow::DEVICE_CPU),
                        EmbeddingGradientOp);

}  // namespace
}  // namespace tf_embedding
