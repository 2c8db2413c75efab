// How the TF kernels split work over the intra-op thread pool (the Sharder of
// cc/core/parallel_steps.h).
#ifndef TF_EMBEDDING_CC_KERNELS_ROW_SHARDING_H_
#define TF_EMBEDDING_CC_KERNELS_ROW_SHARDING_H_

#include <cstdint>

#include "cc/core/parallel_steps.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tf_embedding {

// tensorflow::Shard on the kernel's intra-op pool.
inline Sharder IntraOpSharder(tensorflow::OpKernelContext* ctx) {
  const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  return [workers](int64_t units, int64_t cost_per_unit, const ShardFunction& function) {
    tensorflow::Shard(workers->num_threads, workers->workers, units, cost_per_unit, function);
  };
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_ROW_SHARDING_H_
