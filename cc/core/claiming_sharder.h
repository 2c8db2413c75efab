// A Sharder (parallel_steps.h) whose threads claim shards one at a time: the caller runs shards
// too, beside tasks it schedules on a thread pool, so a step's work is spread over exactly the
// pool's threads however unevenly its shards cost (hot and cold rows, long and short ones), and
// the caller waits only for shards other threads have started. Used on XLA's pool (custom calls,
// where independent calls share the pool and a caller blocked on queued tasks could wait for
// threads all blocked the same way) and on TensorFlow's intra-op pool by kernels whose shards
// vary in cost.
#ifndef TF_EMBEDDING_CC_CORE_CLAIMING_SHARDER_H_
#define TF_EMBEDDING_CC_CORE_CLAIMING_SHARDER_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "cc/core/parallel_steps.h"

namespace tf_embedding {

// Shards of about this cost (in multiply-adds) are worth a task; tensorflow::Shard, which the
// TF kernels use, has the same threshold.
inline constexpr int64_t kMinCostPerShard = 10000;
// Shards per thread: a few, so that uneven shards even out, as Eigen's block sizing does.
inline constexpr int64_t kShardsPerThread = 4;

namespace internal {

// The shards of one ClaimingSharder call. Every thread that runs shards (the caller, and the
// tasks it scheduled) claims them one at a time until none is left.
struct ClaimedShards {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  int64_t count = 0;
  int64_t units = 0;
  int64_t block = 0;
  const ShardFunction* function = nullptr;
  std::mutex mu;
  std::condition_variable all_finished;

  void Run() {
    for (int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      (*function)(i * block, std::min(units, (i + 1) * block));
      if (finished.fetch_add(1) + 1 == count) {
        std::lock_guard<std::mutex> lock(mu);
        all_finished.notify_all();
      }
    }
  }
};

}  // namespace internal

// How many shards `units` of `cost_per_unit` make on `threads` threads: a few per thread, none
// much cheaper than kMinCostPerShard, at most one per unit.
inline int64_t ShardCount(int64_t units, int64_t cost_per_unit, int64_t threads) {
  const int64_t by_cost = units * std::max<int64_t>(cost_per_unit, 1) / kMinCostPerShard;
  return std::max<int64_t>(1, std::min({units, threads * kShardsPerThread, by_cost}));
}

// Schedules a task on a thread pool.
using ScheduleTask = std::function<void(std::function<void()>)>;

// Runs `function` over [0, units) in shards claimed one at a time by the caller and by the
// threads that `share` hands the shards to (at most threads - 1 run them usefully), and returns
// once every shard has finished: the caller waits only for shards other threads have started.
inline void RunClaimedShards(
    int64_t units, int64_t cost_per_unit, int64_t threads, const ShardFunction& function,
    const std::function<void(const std::shared_ptr<internal::ClaimedShards>&)>& share) {
  const int64_t count = ShardCount(units, cost_per_unit, threads);
  if (count <= 1 || threads <= 1) {
    if (units > 0) function(0, units);
    return;
  }
  auto shards = std::make_shared<internal::ClaimedShards>();
  shards->block = (units + count - 1) / count;
  shards->count = (units + shards->block - 1) / shards->block;
  shards->units = units;
  shards->function = &function;
  share(shards);
  shards->Run();
  std::unique_lock<std::mutex> lock(shards->mu);
  shards->all_finished.wait(lock, [&] { return shards->finished.load() == shards->count; });
}

// A Sharder running shards on the caller and on up to `tasks` tasks given to `schedule`. A task
// that starts after every shard was claimed does nothing (it holds the shared state, not the
// caller's stack).
inline Sharder ClaimingSharder(int64_t tasks, ScheduleTask schedule) {
  const int64_t threads = std::max<int64_t>(tasks, 0) + 1;
  return [threads, schedule = std::move(schedule)](int64_t units, int64_t cost_per_unit,
                                                   const ShardFunction& function) {
    RunClaimedShards(units, cost_per_unit, threads, function,
                     [&](const std::shared_ptr<internal::ClaimedShards>& shards) {
                       for (int64_t t = 0; t < std::min(threads - 1, shards->count - 1); ++t) {
                         schedule([shards] { shards->Run(); });
                       }
                     });
  };
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_CLAIMING_SHARDER_H_
