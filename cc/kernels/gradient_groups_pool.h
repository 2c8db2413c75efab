// GradientGroups objects that a kernel reuses from step to step. Grouping a batch into a fresh
// object allocates a few MiB that the OS zero-fills page by page, which took about as long as the
// grouping itself (cc/core/gradient_aggregation.h); a reused object keeps its capacity. A kernel
// may run concurrently (the grouping happens before it locks its variables), so it holds a pool:
// as many objects as it ever ran at once, each sized by the largest batch it grouped.
#ifndef TF_EMBEDDING_CC_KERNELS_GRADIENT_GROUPS_POOL_H_
#define TF_EMBEDDING_CC_KERNELS_GRADIENT_GROUPS_POOL_H_

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cc/core/gradient_aggregation.h"

namespace tf_embedding {

class GradientGroupsPool {
 public:
  // An object of the pool, returned to it when the Lease goes out of scope.
  class Lease {
   public:
    Lease(GradientGroupsPool* pool, std::unique_ptr<GradientGroups> groups)
        : pool_(pool), groups_(std::move(groups)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->Return(std::move(groups_)); }

    GradientGroups* get() const { return groups_.get(); }

   private:
    GradientGroupsPool* pool_;
    std::unique_ptr<GradientGroups> groups_;
  };

  Lease Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return Lease(this, std::make_unique<GradientGroups>());
    std::unique_ptr<GradientGroups> groups = std::move(free_.back());
    free_.pop_back();
    return Lease(this, std::move(groups));
  }

 private:
  void Return(std::unique_ptr<GradientGroups> groups) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(groups));
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<GradientGroups>> free_;
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_GRADIENT_GROUPS_POOL_H_
