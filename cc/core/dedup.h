// Partitions a batch's ids by shard and deduplicates them (`TfeCsrDedup`, docs/kernels.md).
//
// Plain C++17 without TensorFlow. Linear time: a radix sort of (shard, id) keys.
#ifndef TF_EMBEDDING_CC_CORE_DEDUP_H_
#define TF_EMBEDDING_CC_CORE_DEDUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "cc/core/status.h"

namespace tf_embedding {

// Shard counts are capped like row counts: shard_splits has num_shards + 1 entries.
constexpr int64_t kMaxShards = kMaxRows;

// Checks num_shards against [1, kMaxShards]; errors name the table.
Status CheckNumShards(const std::string& table_name, int64_t num_shards);

// Fills `unique_ids` with the distinct ids grouped by shard (id % num_shards), ascending within
// a shard; writes inverse[ids.size] (the index of each id in unique_ids) and
// shard_splits[num_shards + 1] (shard s owns unique_ids[shard_splits[s]:shard_splits[s+1]]).
// Fails, naming the table, on negative ids and on batches whose inverse would not fit int32.
Status DedupByShard(const std::string& table_name, Span<int64_t> ids, int64_t num_shards,
                    std::vector<int64_t>* unique_ids, int32_t* inverse,
                    int64_t* shard_splits);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_DEDUP_H_
