// The parallel loops of the lookup, gradient and sparse-apply kernels, written once for both
// runtimes that run them: the TF kernels (cc/kernels) hand them TensorFlow's intra-op pool
// through tensorflow::Shard, the XLA CPU custom calls (cc/xla/ffi_buffers.h) the pool XLA
// runs the compiled step on, which TensorFlow sets to the same intra-op pool. Each unit (an
// output row, a unique id, a table row) is computed by one thread, so the results do not depend
// on how a sharder splits the range: both runtimes give the same bits.
#ifndef TF_EMBEDDING_CC_CORE_PARALLEL_STEPS_H_
#define TF_EMBEDDING_CC_CORE_PARALLEL_STEPS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/lookup.h"
#include "cc/core/optimizers.h"
#include "cc/core/row_updates.h"

namespace tf_embedding {

// Calls the function on disjoint ranges [begin, end) covering [0, units), possibly
// concurrently; cost_per_unit (in multiply-adds) tells it how finely to split.
using ShardFunction = std::function<void(int64_t begin, int64_t end)>;
using Sharder =
    std::function<void(int64_t units, int64_t cost_per_unit, const ShardFunction& function)>;

// Sharding cost of one looked-up table row beyond its multiply-adds: usually a cache miss.
inline constexpr int64_t kRowFetchCost = 100;
// Sharding cost of a rule's per-element work, in units of one multiply-add.
inline constexpr int64_t kRuleCost = 20;

// The sharding cost of one output row of a lookup of `lookups` ids into `rows` rows.
inline int64_t LookupRowCost(int64_t rows, int64_t lookups, int64_t dim) {
  return (lookups / std::max<int64_t>(rows, 1) + 1) * (dim + kRowFetchCost);
}

// CombineRows over every output row of `batch` (validated against the table's row count).
inline void LookUpRows(const CsrBatch& batch, const float* table, int64_t dim,
                       float* activations, const Sharder& shard) {
  shard(batch.num_rows(), LookupRowCost(batch.num_rows(), batch.num_ids, dim),
        [&](int64_t begin, int64_t end) {
          CombineRows(batch, table, dim, begin, end, activations);
        });
}

// Each group's gradient summed (SumGroup) into out[u * dim, (u + 1) * dim).
inline void SumGroups(const GradientGroups& groups, int64_t dim, float* out,
                      const Sharder& shard) {
  const int64_t num_unique = groups.num_unique();
  const int64_t lookups_per_id = groups.gains.size() / std::max<int64_t>(num_unique, 1) + 1;
  shard(num_unique, lookups_per_id * dim, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) SumGroup(groups, u, dim, out + u * dim);
  });
}

// One step of `rule` on the table and slots ([rows, dim] each) with the grouped gradient: the
// touched rows, or every row for a rule that updates untouched rows. The ids of `groups` must
// be below `rows` (CheckIdsBelow).
template <typename Rule>
void ApplyGroups(const Rule& rule, const CommonUpdateParams& common, float lr,
                 const GradientGroups& groups, int64_t dim, int64_t rows, float* table,
                 const std::array<float*, Rule::kNumSlots>& slots, const Sharder& shard) {
  const bool all_rows = rule.UpdatesUntouchedRows();
  const int64_t units = all_rows ? rows : groups.num_unique();
  const int64_t terms_per_id =
      groups.gains.size() / std::max<int64_t>(groups.num_unique(), 1) + 1;
  const int64_t cost = (all_rows ? kRuleCost : terms_per_id + kRuleCost) * dim;
  shard(units, cost, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(dim);
    if (all_rows) {
      UpdateAllRows(rule, common, lr, groups, dim, begin, end, table, slots, scratch.data());
    } else {
      UpdateTouchedRows(rule, common, lr, groups, dim, begin, end, table, slots,
                        scratch.data());
    }
  });
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_PARALLEL_STEPS_H_
