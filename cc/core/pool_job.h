// A call's work run by tasks scheduled up front on a thread pool, while the caller returns at
// once: XLA's asynchronous custom calls (cc/xla/ffi_sparse_apply.cc), so that XLA starts the next
// independent call (the next table's) while this one runs, as TensorFlow's executor runs the
// uncompiled step's per-table ops side by side.
//
// The job's body runs once, on the first task to start. Its parallel loops go through the
// Sharder it is given, which runs shards on the body's thread and on the job's other tasks, each
// claiming shards one at a time as ClaimingSharder's do. A task that starts while the body runs
// serial work (grouping a gradient by id) leaves as soon as another job's body is waiting for a
// thread, which is worth more, and otherwise waits for the body's next loop. No
// task waits for a task that has not started, so jobs sharing a pool cannot deadlock.
#ifndef TF_EMBEDDING_CC_CORE_POOL_JOB_H_
#define TF_EMBEDDING_CC_CORE_POOL_JOB_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "cc/core/claiming_sharder.h"
#include "cc/core/parallel_steps.h"
#include "cc/core/status.h"

namespace tf_embedding {

class PoolJob {
 public:
  // The job's work; its loops go through `shard`.
  using Body = std::function<Status(const Sharder& shard)>;
  // Called once, with the body's status, after every shard has finished.
  using Done = std::function<void(const Status&)>;

  // Runs `body` on `tasks` (>= 1) tasks given to `schedule` and calls `done` when it is over.
  static void Start(int64_t tasks, const ScheduleTask& schedule, Body body, Done done) {
    auto job = std::shared_ptr<PoolJob>(new PoolJob(std::max<int64_t>(tasks, 1),
                                                    std::move(body), std::move(done)));
    BodiesWaiting().fetch_add(1);
    for (int64_t t = 0; t < job->threads_; ++t) schedule([job] { job->Run(); });
  }

 private:
  PoolJob(int64_t threads, Body body, Done done)
      : threads_(threads), body_(std::move(body)), done_(std::move(done)) {}

  // Jobs of the process whose body no task has started yet.
  static std::atomic<int64_t>& BodiesWaiting() {
    static std::atomic<int64_t> count{0};
    return count;
  }

  void Run() {
    bool expected = false;
    if (body_claimed_.compare_exchange_strong(expected, true)) {
      BodiesWaiting().fetch_sub(1);
      RunBody();
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    while (!body_finished_) {
      if (loop_ != nullptr && loop_->next.load() < loop_->count) {
        const std::shared_ptr<internal::ClaimedShards> loop = loop_;
        lock.unlock();
        loop->Run();
        lock.lock();
        continue;
      }
      if (BodiesWaiting().load() > 0) return;
      // Woken by the body's next loop or its end; the timeout notices another job's body
      // scheduled meanwhile (XLA starts the next table's call just after this one's).
      changed_.wait_for(lock, std::chrono::microseconds(50));
    }
  }

  void RunBody() {
    const Sharder shard = [this](int64_t units, int64_t cost_per_unit,
                                 const ShardFunction& function) {
      // The job's other tasks find the shards published.
      RunClaimedShards(units, cost_per_unit, threads_, function,
                       [this](const std::shared_ptr<internal::ClaimedShards>& shards) {
                         Publish(shards);
                       });
      Publish(nullptr);
    };
    const Status status = body_(shard);
    {
      std::lock_guard<std::mutex> lock(mu_);
      body_finished_ = true;
    }
    changed_.notify_all();
    done_(status);
  }

  void Publish(std::shared_ptr<internal::ClaimedShards> loop) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      loop_ = std::move(loop);
    }
    changed_.notify_all();
  }

  const int64_t threads_;
  const Body body_;
  const Done done_;
  std::atomic<bool> body_claimed_{false};
  std::mutex mu_;
  std::condition_variable changed_;
  bool body_finished_ = false;                      // guarded by mu_
  std::shared_ptr<internal::ClaimedShards> loop_;   // guarded by mu_: the body's current loop
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_POOL_JOB_H_
