// Fuzz target: the deduplication by shard of a batch's ids (DedupByShard, TfeCsrDedup).
// Properties beyond memory safety: the unique ids are the distinct ids, grouped by shard
// (id % num_shards) and ascending within a shard, and inverse maps every id back to itself.
#include <cstdint>
#include <set>
#include <vector>

#include "cc/core/dedup.h"
#include "tools/fuzz_core/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tf_embedding;        // NOLINT(build/namespaces)
  using namespace tf_embedding::fuzz;  // NOLINT(build/namespaces)
  FuzzedDataProvider in(data, size);
  const int64_t num_shards = SmallOrAny(in, 5);
  const std::vector<int64_t> ids = Int64s(in, 40);
  if (!CheckNumShards("t", num_shards).ok() || num_shards > 64) return 0;
  std::vector<int64_t> unique_ids;
  std::vector<int32_t> inverse(ids.size());
  std::vector<int64_t> shard_splits(num_shards + 1);
  if (!DedupByShard("t", {ids.data(), static_cast<int64_t>(ids.size())}, num_shards,
                    &unique_ids, inverse.data(), shard_splits.data()).ok()) {
    return 0;
  }
  FUZZ_CHECK(unique_ids.size() == std::set<int64_t>(ids.begin(), ids.end()).size());
  FUZZ_CHECK(shard_splits[0] == 0 && shard_splits[num_shards] ==
                                         static_cast<int64_t>(unique_ids.size()));
  for (int64_t s = 0; s < num_shards; ++s) {
    for (int64_t u = shard_splits[s]; u < shard_splits[s + 1]; ++u) {
      FUZZ_CHECK(unique_ids[u] % num_shards == s);
      FUZZ_CHECK(u == shard_splits[s] || unique_ids[u - 1] < unique_ids[u]);
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    FUZZ_CHECK(inverse[i] >= 0 && static_cast<size_t>(inverse[i]) < unique_ids.size());
    FUZZ_CHECK(unique_ids[inverse[i]] == ids[i]);
  }
  return 0;
}
