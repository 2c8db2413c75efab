// PoolJob on a pool of real threads: every unit of every loop runs once, `done` comes once with
// the body's status after all shards finished, and many jobs sharing a small pool (the
// compiled step's per-table calls) all finish.
#include "cc/core/pool_job.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

// A FIFO pool of `threads` threads, as XLA's intra-op pool runs scheduled tasks.
class TestPool {
 public:
  explicit TestPool(int threads) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this] {
        for (;;) {
          std::function<void()> task;
          {
            std::unique_lock<std::mutex> lock(mu_);
            ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
            if (tasks_.empty()) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
          }
          task();
        }
      });
    }
  }
  ~TestPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }
  ScheduleTask Scheduler() {
    return [this](std::function<void()> task) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        tasks_.push_back(std::move(task));
      }
      ready_.notify_one();
    };
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Counts the jobs whose `done` came, and waits for a number of them.
class Completions {
 public:
  PoolJob::Done Done(Status* status) {
    return [this, status](const Status& s) {
      std::lock_guard<std::mutex> lock(mu_);
      *status = s;
      ++count_;
      changed_.notify_all();
    };
  }
  void WaitFor(int count) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return count_ >= count; });
  }
  int count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int count_ = 0;
};

// A body with serial work and two loops of `units`, each unit counted in `hits`.
PoolJob::Body CountingBody(std::vector<std::atomic<int>>* hits, int64_t units) {
  return [hits, units](const Sharder& shard) {
    volatile int64_t serial = 0;
    for (int64_t i = 0; i < 200000; ++i) serial = serial + i;
    for (int loop = 0; loop < 2; ++loop) {
      shard(units, kMinCostPerShard, [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) (*hits)[loop * units + u].fetch_add(1);
      });
    }
    return Status();
  };
}

TFE_TEST(EveryUnitOnceAndDoneAfterTheLoops) {
  for (const int threads : {1, 2, 4}) {
    TestPool pool(threads);
    constexpr int64_t kUnits = 1000;
    std::vector<std::atomic<int>> hits(2 * kUnits);
    Completions completions;
    Status status = Status::Error("not done");
    PoolJob::Start(threads, pool.Scheduler(), CountingBody(&hits, kUnits),
                   completions.Done(&status));
    completions.WaitFor(1);
    TFE_EXPECT_OK(status);
    for (const std::atomic<int>& hit : hits) TFE_EXPECT_EQ(hit.load(), 1);
  }
}

TFE_TEST(ManyJobsShareASmallPool) {
  for (const int threads : {1, 2, 3}) {
    TestPool pool(threads);
    constexpr int kJobs = 16;
    constexpr int64_t kUnits = 777;
    std::vector<std::vector<std::atomic<int>>> hits;
    for (int j = 0; j < kJobs; ++j) hits.emplace_back(2 * kUnits);
    std::vector<Status> statuses(kJobs, Status::Error("not done"));
    Completions completions;
    for (int j = 0; j < kJobs; ++j) {
      PoolJob::Start(threads, pool.Scheduler(), CountingBody(&hits[j], kUnits),
                     completions.Done(&statuses[j]));
    }
    completions.WaitFor(kJobs);
    TFE_EXPECT_EQ(completions.count(), kJobs);
    for (int j = 0; j < kJobs; ++j) {
      TFE_EXPECT_OK(statuses[j]);
      for (const std::atomic<int>& hit : hits[j]) TFE_EXPECT_EQ(hit.load(), 1);
    }
  }
}

TFE_TEST(TheBodysErrorReachesDone) {
  TestPool pool(2);
  Completions completions;
  Status status;
  PoolJob::Start(2, pool.Scheduler(),
                 [](const Sharder&) { return Status::Error("ids out of range"); },
                 completions.Done(&status));
  completions.WaitFor(1);
  TFE_EXPECT_ERROR(status, "ids out of range");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
