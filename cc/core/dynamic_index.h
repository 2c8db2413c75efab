// The key index of a dynamic table (docs/dynamic_vocabulary.md): which int64 key holds which
// row of the table's fixed-capacity blocks, and the counting, admission and eviction rules that
// decide it. Plain C++: the kernels (cc/kernels/dynamic_index_kernels.cc) own one per table.
//
// The rules, exact enough to replay in numpy (tests/helpers/dynamic_index_model.py):
// * Key k belongs to block (MixKey(k) >> 32) % num_blocks; block b has block_rows[b] slots.
// * A training batch is one step (steps count from 1). Before its keys are counted, if
//   evict_after_steps > 0 and the step is a multiple of evict_every_steps, every admitted key and
//   candidate with step - last_seen >= evict_after_steps is dropped (admitted ones count as
//   evicted).
// * Each lookup adds 1 to its key's count (saturating at 2^32 - 1). A block handles its batch's
//   admitted keys first (count, last_seen = step), then its other keys in ascending order: a key
//   whose count reaches admit_after takes the lowest free slot; if there is none, the slot of the
//   least recently used key looked up in neither this step nor the previous one (smallest
//   (last_seen, key): the previous step's gradients may still be pending), which is evicted
//   and forgotten, unless refuse_when_full; if no slot is found the key is refused
//   (counted) and stays a candidate. Keys not admitted are candidates (count, last_seen) while
//   the block has room for its share of candidate_capacity; a block with no room drops the
//   candidate with the smallest (last_seen, key) first.
// * A lookup (training or not) of an admitted key reads its slot's table row; of any other key,
//   nothing (the caller reads a zero row). Non-training lookups change nothing.
// Every decision depends on the block's state and the multiset of the step's keys only, so the
// result does not depend on the order of a batch's lookups or on threads.
#ifndef TF_EMBEDDING_CC_CORE_DYNAMIC_INDEX_H_
#define TF_EMBEDDING_CC_CORE_DYNAMIC_INDEX_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cc/core/parallel_steps.h"
#include "cc/core/status.h"

namespace tf_embedding {

// The fixed 64-bit mixer of keys (splitmix64's finalizer), also in numpy and in exports.
inline uint64_t MixKey(uint64_t key) {
  key ^= key >> 30;
  key *= 0xbf58476d1ce4e5b9ULL;
  key ^= key >> 27;
  key *= 0x94d049bb133111ebULL;
  key ^= key >> 31;
  return key;
}

struct DynamicIndexOptions {
  std::vector<int64_t> block_rows;  // slots of each block, in block order
  bool strided = false;  // table row of block b's slot j: j * blocks + b, else offset[b] + j
  int64_t admit_after = 1;
  int64_t evict_after_steps = 0;  // 0: no eviction by age
  int64_t evict_every_steps = 1;
  bool refuse_when_full = false;
  int64_t candidate_capacity = 0;  // over all blocks; each block keeps ceil(capacity / blocks)
  int64_t pool_rows = 1;  // an admitted key's row starts as pool row MixKey(key) % pool_rows
};

// Validates the options; the message names `table`.
Status CheckDynamicIndexOptions(const std::string& table, const DynamicIndexOptions& options);

// Fails unless a batch of `count` keys can be looked up: at most 2^31 - 1 of them, none negative
// (the ids' wording of every op); the message names `table`.
Status CheckDynamicKeys(const std::string& table, const int64_t* keys, int64_t count);

// Cumulative counts, and the current occupancy.
struct DynamicIndexStats {
  int64_t step = 0;
  int64_t occupied = 0;
  int64_t candidates = 0;
  int64_t admitted = 0;
  int64_t evicted = 0;
  int64_t refused = 0;
};

// A batch's distinct keys of one block, ascending, with their lookup counts (internal).
struct KeyCounts;

// A key's state: admitted (its table row) or a candidate.
struct KeyRecord {
  int64_t key;
  int64_t count;
  int64_t last_seen;
};

class DynamicIndex {
 public:
  explicit DynamicIndex(DynamicIndexOptions options);  // REQUIRES: options checked
  ~DynamicIndex();
  DynamicIndex(const DynamicIndex&) = delete;
  DynamicIndex& operator=(const DynamicIndex&) = delete;

  int64_t capacity() const;  // table rows
  const DynamicIndexOptions& options() const { return options_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // The block key `key` belongs to.
  int BlockOf(int64_t key) const {
    return static_cast<int>((MixKey(static_cast<uint64_t>(key)) >> 32) % blocks_.size());
  }
  // The table row of a block's slot, and the block holding a table row.
  int64_t TableRow(int block, int64_t slot) const {
    if (options_.strided) return slot * static_cast<int64_t>(blocks_.size()) + block;
    return offsets_[block] + slot;
  }
  int BlockOfRow(int64_t table_row) const {
    if (options_.strided) return static_cast<int>(table_row % blocks_.size());
    return static_cast<int>(std::upper_bound(offsets_.begin() + 1, offsets_.end(), table_row) -
                            (offsets_.begin() + 1));
  }

  // One batch's keys (each >= 0; the caller rejects others) -> each key's table row, -1 if it
  // has none. With `training`, first runs the step's rules and appends the table rows of the
  // keys admitted in it to `admitted_rows` (ascending key order per block, blocks in order),
  // their pool rows to `admitted_pool_rows`. Blocks run in parallel on `sharder`.
  void Lookup(const int64_t* keys, int64_t count, bool training, const Sharder& sharder,
              int64_t* rows, std::vector<int64_t>* admitted_rows,
              std::vector<int64_t>* admitted_pool_rows);

  DynamicIndexStats Stats() const;

  // The state, whole: each table row's record (key -1: free), the candidates (ascending
  // (last_seen, key)), and the stats.
  void Export(std::vector<KeyRecord>* rows, std::vector<KeyRecord>* candidates,
              DynamicIndexStats* stats) const;

  // Replaces the state with an exported one of an index with the same options (checked:
  // the message names `table`); on error the state is unchanged.
  Status Import(const std::string& table, const std::vector<KeyRecord>& rows,
                const std::vector<KeyRecord>& candidates, const DynamicIndexStats& stats);

 private:
  class Block;
  // Each of `keys`' table row (or -1), changing nothing (an evaluation's lookup).
  void LookUpEach(const int64_t* keys, int64_t count, const Sharder& sharder,
                  int64_t* rows) const;
  // One training step's rules on block `b` for its keys of the batch; each key's table row (or
  // -1) into unique_rows[its batch-unique index], the admitted keys' rows into the block's.
  void StepBlock(int b, const KeyCounts& batch, int64_t* unique_rows);
  // Block `b`'s exported rows into a new `block`.
  Status ImportRows(const std::string& table, int b, const std::vector<KeyRecord>& rows,
                    int64_t step, Block* block) const;

  DynamicIndexOptions options_;
  std::vector<int64_t> offsets_;  // each block's first table row ('div')
  std::vector<std::unique_ptr<Block>> blocks_;
  int64_t step_ = 0;
  // The restored stats' totals; the blocks count since.
  int64_t admitted_ = 0;
  int64_t evicted_ = 0;
  int64_t refused_ = 0;
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_DYNAMIC_INDEX_H_
