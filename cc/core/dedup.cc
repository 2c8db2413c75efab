#include "cc/core/dedup.h"

#include <algorithm>
#include <limits>

#include "cc/core/errors.h"
#include "cc/core/radix_sort.h"

namespace tf_embedding {
namespace {

// An id's sort key and its position in the input batch.
struct KeyedLookup {
  uint64_t key;
  uint32_t position;
};

}  // namespace

Status CheckNumShards(const std::string& table_name, int64_t num_shards) {
  if (num_shards < 1 || num_shards > kMaxShards) {
    return TableError(table_name, "num_shards must be in [1, ", kMaxShards, "], got ",
                      num_shards);
  }
  return Status();
}

Status DedupByShard(const std::string& table_name, Span<int64_t> ids, int64_t num_shards,
                    std::vector<int64_t>* unique_ids, int32_t* inverse,
                    int64_t* shard_splits) {
  TFE_RETURN_IF_ERROR(CheckNumShards(table_name, num_shards));
  if (ids.size > std::numeric_limits<int32_t>::max()) {
    return TableError(table_name, ids.size, " ids are too many for int32 inverse indices");
  }
  int64_t max_id = 0;
  for (int64_t i = 0; i < ids.size; ++i) {
    if (ids[i] < 0) {
      // Negative ids are the only bad ones here: dedup runs before any table bound is known.
      return TableError(table_name, IdOutOfRange(ids[i], LookupName(i),
                                                 /*vocabulary_size=*/-1));
    }
    max_id = std::max(max_id, ids[i]);
  }

  // Sorting by (shard, id / num_shards) groups ids by shard and orders them within a shard.
  const uint64_t shards = num_shards;
  const uint64_t per_shard = static_cast<uint64_t>(max_id) / shards + 1;
  std::vector<KeyedLookup> lookups(ids.size);
  uint64_t max_key = 0;
  for (int64_t i = 0; i < ids.size; ++i) {
    const uint64_t id = ids[i];
    lookups[i] = {(id % shards) * per_shard + id / shards, static_cast<uint32_t>(i)};
    max_key = std::max(max_key, lookups[i].key);
  }
  std::vector<KeyedLookup> scratch;
  StableRadixSort(/*low_bit=*/0, BitWidth(max_key),
                  [](const KeyedLookup& lookup) { return lookup.key; }, &lookups, &scratch);

  unique_ids->clear();
  std::fill(shard_splits, shard_splits + num_shards + 1, 0);
  for (size_t j = 0; j < lookups.size(); ++j) {
    if (j == 0 || lookups[j].key != lookups[j - 1].key) {
      const int64_t id = ids[lookups[j].position];
      unique_ids->push_back(id);
      ++shard_splits[id % num_shards + 1];
    }
    inverse[lookups[j].position] = static_cast<int32_t>(unique_ids->size() - 1);
  }
  for (int64_t s = 0; s < num_shards; ++s) shard_splits[s + 1] += shard_splits[s];
  return Status();
}

}  // namespace tf_embedding
