// TfeCsrDedup: partition a CSR batch's ids by shard and deduplicate them (core: dedup.h).
#include <vector>

#include "cc/core/dedup.h"
#include "cc/core/errors.h"
#include "cc/kernels/tf_status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class CsrDedupOp : public OpKernel {
 public:
  explicit CsrDedupOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_shards", &num_shards_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
    OP_REQUIRES_OK(ctx, ToAbslStatus(CheckNumShards(table_name_, num_shards_)));
  }

  // Single-threaded: the radix sort of a step's ids (~100k) takes well under a millisecond.
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    OP_REQUIRES(ctx, ids.dims() == 1,
                ToAbslStatus(TableError(table_name_, "ids must be a vector, got shape ",
                                        ids.shape().DebugString())));
    Tensor* inverse = nullptr;
    Tensor* shard_splits = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ids.shape(), &inverse));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({num_shards_ + 1}), &shard_splits));

    std::vector<int64_t> unique;
    const auto flat_ids = ids.flat<int64_t>();
    OP_REQUIRES_OK(ctx, ToAbslStatus(DedupByShard(
                            table_name_, {flat_ids.data(), flat_ids.size()}, num_shards_,
                            &unique, inverse->flat<int32_t>().data(),
                            shard_splits->flat<int64_t>().data())));

    Tensor* unique_ids = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(unique.size())}),
                                             &unique_ids));
    std::copy(unique.begin(), unique.end(), unique_ids->flat<int64_t>().data());
  }

 private:
  int64_t num_shards_ = 1;
  std::string table_name_;
};

REGISTER_KERNEL_BUILDER(Name("TfeCsrDedup").Device(::tensorflow::DEVICE_CPU), CsrDedupOp);

}  // namespace
}  // namespace tf_embedding
