// TfeCheckQueueSizes (cc/ops/queue_ops.cc): the engine's queues' sizes checked in one cheap op.
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/queue_interface.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/lib/core/refcount.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::QueueInterface;

class CheckQueueSizesOp : public OpKernel {
 public:
  explicit CheckQueueSizesOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("min_size", &min_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_size", &max_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("message", &message_));
  }

  // A few counters read: the executor runs it inline instead of handing it to another thread.
  bool IsExpensive() override { return false; }

  void Compute(OpKernelContext* ctx) override {
    int64_t total = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      QueueInterface* queue = nullptr;
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i),
                                                     &queue));
      const tensorflow::core::ScopedUnref unref(queue);
      total += queue->size();
    }
    OP_REQUIRES(ctx, min_size_ <= total && total <= max_size_,
                absl::InvalidArgumentError(message_));
  }

 private:
  int64_t min_size_ = 0;
  int64_t max_size_ = 0;
  std::string message_;
};

REGISTER_KERNEL_BUILDER(Name("TfeCheckQueueSizes").Device(::tensorflow::DEVICE_CPU),
                        CheckQueueSizesOp);

}  // namespace
}  // namespace tf_embedding
