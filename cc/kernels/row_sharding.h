// How the lookup kernels split their output rows over the intra-op thread pool.
#ifndef TF_EMBEDDING_CC_KERNELS_ROW_SHARDING_H_
#define TF_EMBEDDING_CC_KERNELS_ROW_SHARDING_H_

#include <algorithm>
#include <cstdint>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tf_embedding {

// Sharding cost of one looked-up table row beyond its multiply-adds: usually a cache miss.
inline constexpr int64_t kRowFetchCost = 100;

// Calls combine(begin, end) on disjoint ranges covering output rows [0, rows), on the intra-op
// pool, for `lookups` lookups of `dim`-wide table rows.
template <typename Combine>
void ShardOutputRows(tensorflow::OpKernelContext* ctx, int64_t rows, int64_t lookups,
                     int64_t dim, Combine&& combine) {
  const int64_t lookups_per_row = lookups / std::max<int64_t>(rows, 1) + 1;
  const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(workers->num_threads, workers->workers, rows,
                    lookups_per_row * (dim + kRowFetchCost), combine);
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_ROW_SHARDING_H_
