#include "cc/core/dynamic_index.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

#include "cc/core/errors.h"
#include "cc/core/key_set.h"
#include "cc/core/radix_sort.h"
#include "cc/core/range_checks.h"

namespace tf_embedding {
namespace {

constexpr int64_t kMaxBlockEntries = std::numeric_limits<int32_t>::max();
// A block's step is one sharding unit, large enough that each block gets a thread of its own.
constexpr int64_t kBlockStepCost = int64_t{1} << 24;
// A find in the index: a cache miss or two.
constexpr int64_t kFindCost = 200;
// How many keys ahead a loop over a step's keys prefetches what it reads of the index (the
// touched keys' neighbours this far ahead, their own entries twice as far).
constexpr size_t kPrefetchAhead = 16;

int64_t CandidatesPerBlock(const DynamicIndexOptions& options) {
  const int64_t blocks = static_cast<int64_t>(options.block_rows.size());
  return (options.candidate_capacity + blocks - 1) / blocks;
}

}  // namespace

struct KeyCounts {
  std::vector<int64_t> keys;
  std::vector<int64_t> counts;
  std::vector<int64_t> unique;  // each key's index among the batch's distinct keys
};

// One block: its admitted keys (an entry is a slot) and its candidates.
class DynamicIndex::Block {
 public:
  Block(int64_t slots, int64_t candidates) : admitted(slots), candidates(candidates) {}

  KeySet admitted;
  KeySet candidates;
  // Since the index was made or restored; one step's admitted rows, in ascending key order.
  int64_t admitted_count = 0, evicted_count = 0, refused_count = 0;
  std::vector<int64_t> admitted_rows, admitted_pool_rows;
};

Status CheckDynamicIndexOptions(const std::string& table, const DynamicIndexOptions& options) {
  if (options.block_rows.empty()) return TableError(table, "a dynamic table needs a block");
  for (int64_t rows : options.block_rows) {
    if (rows < 1 || rows > kMaxBlockEntries) {
      return TableError(table, "each block of a dynamic table holds 1 to ", kMaxBlockEntries,
                        " keys, got ", rows);
    }
  }
  if (options.admit_after < 1) {
    return TableError(table, "admit_after must be >= 1, got ", options.admit_after);
  }
  if (options.evict_after_steps < 0) {
    return TableError(table, "evict_after_steps must be >= 1 (or 0: never), got ",
                      options.evict_after_steps);
  }
  if (options.evict_every_steps < 1) {
    return TableError(table, "evict_every_steps must be >= 1, got ", options.evict_every_steps);
  }
  if (options.candidate_capacity < 0 ||
      CandidatesPerBlock(options) > kMaxBlockEntries) {
    return TableError(table, "candidate_capacity must be in [0, ", kMaxBlockEntries,
                      "] a block, got ", options.candidate_capacity);
  }
  if (options.pool_rows < 1) {
    return TableError(table, "pool_rows must be >= 1, got ", options.pool_rows);
  }
  return Status();
}

Status CheckDynamicKeys(const std::string& table, const int64_t* keys, int64_t count) {
  if (count > std::numeric_limits<int32_t>::max()) {
    return TableError(table, count, " keys are too many for one lookup of a dynamic table");
  }
  if (AllInRange(keys, count, uint64_t{1} << 63)) return Status();
  for (int64_t i = 0;; ++i) {
    if (keys[i] < 0) {
      return TableError(table, IdOutOfRange(keys[i], LookupName(i), /*vocabulary_size=*/-1));
    }
  }
}

DynamicIndex::DynamicIndex(DynamicIndexOptions options) : options_(std::move(options)) {
  offsets_.push_back(0);
  for (int64_t rows : options_.block_rows) {
    offsets_.push_back(offsets_.back() + rows);
    blocks_.push_back(std::make_unique<Block>(rows, CandidatesPerBlock(options_)));
  }
}

DynamicIndex::~DynamicIndex() = default;

int64_t DynamicIndex::capacity() const {
  int64_t rows = 0;
  for (int64_t block_rows : options_.block_rows) rows += block_rows;
  return rows;
}

namespace {

// The batch's distinct keys of each block (in order of first lookup), with their lookup counts;
// `inverse[i]`: the index of lookup i's key among the distinct keys (numbered so too).
// Deduplicated through a hash map of the batch's size, which stays in cache, so only distinct
// keys are looked up in the index.
std::vector<KeyCounts> CountKeys(const int64_t* keys, int64_t count,
                                 const std::function<int(int64_t)>& block_of, size_t blocks,
                                 std::vector<int64_t>* inverse) {
  uint64_t buckets = 2;
  while (buckets < 2 * static_cast<uint64_t>(count)) buckets *= 2;
  const uint64_t mask = buckets - 1;
  std::vector<int32_t> map(buckets, -1);
  std::vector<int64_t> distinct, lookups;
  distinct.reserve(count);
  lookups.reserve(count);
  inverse->resize(count);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t b = MixKey(static_cast<uint64_t>(keys[i])) & mask;
    while (map[b] >= 0 && distinct[map[b]] != keys[i]) b = (b + 1) & mask;
    if (map[b] < 0) {
      map[b] = static_cast<int32_t>(distinct.size());
      distinct.push_back(keys[i]);
      lookups.push_back(0);
    }
    ++lookups[map[b]];
    (*inverse)[i] = map[b];
  }
  std::vector<KeyCounts> counts(blocks);
  for (size_t u = 0; u < distinct.size(); ++u) {
    KeyCounts& block = counts[blocks == 1 ? 0 : block_of(distinct[u])];
    block.keys.push_back(distinct[u]);
    block.counts.push_back(lookups[u]);
    block.unique.push_back(static_cast<int64_t>(u));
  }
  return counts;
}

// A key of a step that was not admitted before it, with what its admission reads.
struct NewKey {
  uint64_t key;
  int64_t count;
  int64_t unique;
};

// The keys of `batch` at `positions` in ascending key order, in linear time (a comparison sort
// of random keys mispredicts half its branches), each with its count and batch-unique index, so
// that their admissions read them in order.
std::vector<NewKey> SortedNewKeys(const KeyCounts& batch, const std::vector<size_t>& positions) {
  std::vector<NewKey> keys, scratch;
  keys.reserve(positions.size());
  uint64_t largest = 0;
  for (size_t i : positions) {
    keys.push_back({static_cast<uint64_t>(batch.keys[i]), batch.counts[i], batch.unique[i]});
    largest = std::max(largest, keys.back().key);
  }
  StableRadixSort(0, BitWidth(largest), [](const NewKey& key) { return key.key; }, &keys,
                  &scratch);
  return keys;
}

// Records a key not admitted as a candidate (entry `c` if it is one), making room by dropping
// the least recent candidate when the candidates are full.
void KeepCandidate(KeySet& candidates, int64_t c, int64_t key, int64_t count, int64_t step) {
  if (c >= 0) {
    candidates.Set(c, count, step);
    candidates.Unlink(c);
    candidates.PushFront(c);
  } else if (candidates.capacity() > 0) {
    if (candidates.full()) candidates.Remove(candidates.tail());
    candidates.Insert(key, count, step);
  }
}

// Drops the entries of `set` last seen `age` or more steps before `step`; returns how many.
int64_t DropOlder(KeySet& set, int64_t step, int64_t age) {
  int64_t dropped = 0;
  while (set.tail() >= 0 && step - set.last_seen(set.tail()) >= age) {
    set.Remove(set.tail());
    ++dropped;
  }
  return dropped;
}

}  // namespace

void DynamicIndex::Lookup(const int64_t* keys, int64_t count, bool training,
                          const Sharder& sharder, int64_t* rows,
                          std::vector<int64_t>* admitted_rows,
                          std::vector<int64_t>* admitted_pool_rows) {
  if (!training) {
    LookUpEach(keys, count, sharder, rows);
    return;
  }
  ++step_;
  std::vector<int64_t> inverse;
  const std::vector<KeyCounts> counts = CountKeys(
      keys, count, [this](int64_t key) { return BlockOf(key); }, blocks_.size(), &inverse);
  std::vector<int64_t> unique_rows(count);
  // Blocks are independent: each writes only its own state and its keys' unique_rows.
  const int64_t blocks = static_cast<int64_t>(blocks_.size());
  sharder(blocks, kBlockStepCost, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      StepBlock(static_cast<int>(b), counts[b], unique_rows.data());
    }
  });
  for (int64_t i = 0; i < count; ++i) rows[i] = unique_rows[inverse[i]];
  for (const auto& block : blocks_) {
    admitted_rows->insert(admitted_rows->end(), block->admitted_rows.begin(),
                          block->admitted_rows.end());
    admitted_pool_rows->insert(admitted_pool_rows->end(), block->admitted_pool_rows.begin(),
                               block->admitted_pool_rows.end());
  }
}

// An evaluation changes nothing: each lookup's key is found on its own, the lookups split over
// the threads (no counting, no sorting).
void DynamicIndex::LookUpEach(const int64_t* keys, int64_t count, const Sharder& sharder,
                              int64_t* rows) const {
  sharder(count, kFindCost, [&](int64_t begin, int64_t end) {
    if (blocks_.size() == 1) {
      blocks_[0]->admitted.FindAll(keys + begin, end - begin, rows + begin);
      for (int64_t i = begin; i < end; ++i) rows[i] = rows[i] < 0 ? -1 : TableRow(0, rows[i]);
      return;
    }
    for (int64_t i = begin; i < end; ++i) {
      const int b = BlockOf(keys[i]);
      const int64_t e = blocks_[b]->admitted.Find(keys[i]);
      rows[i] = e < 0 ? -1 : TableRow(b, e);
    }
  });
}

namespace {

// The step's part for the batch's keys already admitted: count and last_seen updated, unlinked
// until the end of the step (so the recency list holds only keys not looked up in it, and its
// tail is the eviction victim). Returns their entries; found[i] is key i's entry (-1: not
// admitted), `others` the positions of the keys not admitted.
std::vector<int64_t> TouchAdmitted(KeySet& admitted, const KeyCounts& batch, int64_t step,
                                   std::vector<int64_t>* found, std::vector<size_t>* others) {
  // Found all at once (the loop below changes no key's bucket, only counts and links).
  found->resize(batch.keys.size());
  admitted.FindAll(batch.keys.data(), static_cast<int64_t>(found->size()), found->data());
  std::vector<int64_t> seen;
  for (size_t i = 0; i < batch.keys.size(); ++i) {
    // Each entry's record first, then (once it has arrived) its list neighbours', which
    // unlinking it writes.
    if (i + 2 * kPrefetchAhead < found->size() && (*found)[i + 2 * kPrefetchAhead] >= 0) {
      admitted.PrefetchEntry((*found)[i + 2 * kPrefetchAhead]);
    }
    if (i + kPrefetchAhead < found->size() && (*found)[i + kPrefetchAhead] >= 0) {
      admitted.PrefetchNeighbours((*found)[i + kPrefetchAhead]);
    }
    const int64_t e = (*found)[i];
    if (e < 0) {
      others->push_back(i);
      continue;
    }
    admitted.Set(e, admitted.count(e) + batch.counts[i], step);
    admitted.Unlink(e);
    seen.push_back(e);
  }
  return seen;
}

}  // namespace

void DynamicIndex::StepBlock(int b, const KeyCounts& batch, int64_t* unique_rows) {
  Block& block = *blocks_[b];
  KeySet& admitted = block.admitted;
  KeySet& candidates = block.candidates;
  block.admitted_rows.clear();
  block.admitted_pool_rows.clear();
  if (options_.evict_after_steps > 0 && step_ % options_.evict_every_steps == 0) {
    block.evicted_count += DropOlder(admitted, step_, options_.evict_after_steps);
    DropOlder(candidates, step_, options_.evict_after_steps);
  }
  std::vector<int64_t> found;
  std::vector<size_t> others;  // positions in `batch` of the keys not admitted
  const std::vector<int64_t> seen = TouchAdmitted(admitted, batch, step_, &found, &others);
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i] >= 0) unique_rows[batch.unique[i]] = TableRow(b, found[i]);
  }
  // The keys not admitted take free slots in ascending key order.
  const std::vector<NewKey> new_keys = SortedNewKeys(batch, others);
  std::vector<int64_t> added;  // entries admitted in this step, in ascending key order
  for (size_t j = 0; j < new_keys.size(); ++j) {
    if (j + kPrefetchAhead < new_keys.size()) {
      admitted.PrefetchHome(static_cast<int64_t>(new_keys[j + kPrefetchAhead].key));
      candidates.PrefetchHome(static_cast<int64_t>(new_keys[j + kPrefetchAhead].key));
    }
    const NewKey& new_key = new_keys[j];
    const int64_t key = static_cast<int64_t>(new_key.key);
    const int64_t c = candidates.Find(key);
    const int64_t total =
        std::min(kMaxKeyCount, (c >= 0 ? candidates.count(c) : 0) + new_key.count);
    if (total >= options_.admit_after) {
      // The victim must not have been looked up in the previous step either: that step's
      // gradients may still be applied after this lookup (a pipelined enqueue).
      if (admitted.full() && !options_.refuse_when_full) {
        admitted.OrderTailRun();
        if (admitted.tail() >= 0 && admitted.last_seen(admitted.tail()) < step_ - 1) {
          admitted.Remove(admitted.tail());
          ++block.evicted_count;
        }
      }
      if (!admitted.full()) {
        if (c >= 0) candidates.Remove(c);
        const int64_t e = admitted.Insert(key, total, step_);
        admitted.Unlink(e);
        added.push_back(e);
        ++block.admitted_count;
        unique_rows[new_key.unique] = TableRow(b, e);
        block.admitted_rows.push_back(TableRow(b, e));
        block.admitted_pool_rows.push_back(static_cast<int64_t>(
            MixKey(static_cast<uint64_t>(key)) % static_cast<uint64_t>(options_.pool_rows)));
        continue;
      }
      ++block.refused_count;
    }
    unique_rows[new_key.unique] = -1;
    KeepCandidate(candidates, c, key, total, step_);
  }
  // Relink the step's keys at the front, as a run in any order (KeySet::OrderTailRun).
  for (int64_t e : seen) admitted.PushFront(e);
  for (int64_t e : added) admitted.PushFront(e);
}

DynamicIndexStats DynamicIndex::Stats() const {
  DynamicIndexStats stats;
  stats.step = step_;
  for (const auto& block : blocks_) {
    stats.occupied += block->admitted.size();
    stats.candidates += block->candidates.size();
  }
  stats.admitted = admitted_;
  stats.evicted = evicted_;
  stats.refused = refused_;
  for (const auto& block : blocks_) {
    stats.admitted += block->admitted_count;
    stats.evicted += block->evicted_count;
    stats.refused += block->refused_count;
  }
  return stats;
}

void DynamicIndex::Export(std::vector<KeyRecord>* rows, std::vector<KeyRecord>* candidates,
                          DynamicIndexStats* stats) const {
  rows->assign(capacity(), KeyRecord{-1, 0, 0});
  candidates->clear();
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const KeySet& admitted = blocks_[b]->admitted;
    for (int64_t e = 0; e < admitted.capacity(); ++e) {
      if (admitted.key(e) >= 0) {
        (*rows)[TableRow(static_cast<int>(b), e)] =
            KeyRecord{admitted.key(e), admitted.count(e), admitted.last_seen(e)};
      }
    }
    const KeySet& block_candidates = blocks_[b]->candidates;
    std::vector<KeyRecord> records;
    for (int64_t e = 0; e < block_candidates.capacity(); ++e) {
      if (block_candidates.key(e) >= 0) {
        records.push_back(KeyRecord{block_candidates.key(e), block_candidates.count(e),
                                    block_candidates.last_seen(e)});
      }
    }
    std::sort(records.begin(), records.end(), [](const KeyRecord& x, const KeyRecord& y) {
      return std::make_pair(x.last_seen, x.key) < std::make_pair(y.last_seen, y.key);
    });
    candidates->insert(candidates->end(), records.begin(), records.end());
  }
  *stats = Stats();
}

namespace {

// Links a block's entries at the front in ascending (last_seen, key): every run ordered.
void LinkByRecency(KeySet& set, std::vector<int64_t> entries, int64_t step) {
  std::sort(entries.begin(), entries.end(), [&set](int64_t a, int64_t b) {
    return std::make_pair(set.last_seen(a), set.key(a)) <
           std::make_pair(set.last_seen(b), set.key(b));
  });
  for (int64_t e : entries) {
    set.Unlink(e);
    set.PushFront(e);
  }
  set.RunsOrderedThrough(step);
}

Status CheckRecord(const std::string& table, const char* what, const KeyRecord& record,
                   int64_t step) {
  if (record.key < 0 || record.count < 1 || record.count > kMaxKeyCount || record.last_seen < 1 ||
      record.last_seen > step) {
    return TableError(table, "the index's ", what, " record (key ", record.key, ", count ",
                      record.count, ", last step ", record.last_seen,
                      ") is not valid at step ", step);
  }
  return Status();
}

}  // namespace

Status DynamicIndex::ImportRows(const std::string& table, int b,
                                const std::vector<KeyRecord>& rows, int64_t step,
                                Block* block) const {
  KeySet& admitted = block->admitted;
  std::vector<int64_t> entries;
  for (int64_t slot = 0; slot < options_.block_rows[b]; ++slot) {
    const int64_t table_row = TableRow(b, slot);
    const KeyRecord& record = rows[table_row];
    if (record.key == -1) continue;
    Status status = CheckRecord(table, "row", record, step);
    if (!status.ok()) return status;
    if (BlockOf(record.key) != b) {
      return TableError(table, "key ", record.key, " of the index being restored is in table "
                        "row ", table_row, ", of block ", b, " of ", blocks_.size(),
                        ", but belongs to block ", BlockOf(record.key), ": the checkpoint "
                        "has another block layout (block count or partition strategy); rows "
                        "move with their keys onto another layout only in a restore before "
                        "the table is built (tf.train.Checkpoint.read before the first enqueue "
                        "or build)");
    }
    if (admitted.Find(record.key) >= 0) {
      return TableError(table, "key ", record.key, " is in two rows of the index being "
                        "restored");
    }
    // Entries are taken lowest first, so slot `slot` is taken once the slots below it are:
    // fill the gaps with placeholders (keys < -1), freed below.
    while (admitted.size() < slot) admitted.Insert(-2 - admitted.size(), 1, 1);
    admitted.Insert(record.key, record.count, record.last_seen);
    entries.push_back(slot);
  }
  for (int64_t e = 0; e < admitted.capacity(); ++e) {
    if (admitted.key(e) < -1) admitted.Remove(e);
  }
  LinkByRecency(admitted, entries, step);
  return Status();
}

Status DynamicIndex::Import(const std::string& table, const std::vector<KeyRecord>& rows,
                            const std::vector<KeyRecord>& candidates,
                            const DynamicIndexStats& stats) {
  if (static_cast<int64_t>(rows.size()) != capacity()) {
    return TableError(table, "the index being restored holds ", rows.size(),
                      " rows, the table ", capacity(), ": restore a dynamic table into one of "
                      "the same vocabulary_size");
  }
  if (stats.step < 0 || stats.admitted < 0 || stats.evicted < 0 || stats.refused < 0) {
    return TableError(table, "the index being restored has negative counters");
  }
  std::vector<std::unique_ptr<Block>> blocks;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    blocks.push_back(
        std::make_unique<Block>(options_.block_rows[b], CandidatesPerBlock(options_)));
    Status status = ImportRows(table, static_cast<int>(b), rows, stats.step, blocks[b].get());
    if (!status.ok()) return status;
  }
  std::vector<std::vector<int64_t>> candidate_entries(blocks.size());
  for (const KeyRecord& record : candidates) {
    Status status = CheckRecord(table, "candidate", record, stats.step);
    if (!status.ok()) return status;
    const int b = BlockOf(record.key);
    Block& block = *blocks[b];
    if (block.admitted.Find(record.key) >= 0 || block.candidates.Find(record.key) >= 0) {
      return TableError(table, "key ", record.key, " is twice in the index being restored");
    }
    if (block.candidates.full()) {
      return TableError(table, "the index being restored holds more candidates for block ", b,
                        " than its ", block.candidates.capacity(), " (candidate_capacity ",
                        options_.candidate_capacity, " over ", blocks.size(), " blocks)");
    }
    candidate_entries[b].push_back(
        block.candidates.Insert(record.key, record.count, record.last_seen));
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    LinkByRecency(blocks[b]->candidates, candidate_entries[b], stats.step);
  }
  blocks_ = std::move(blocks);
  step_ = stats.step;
  admitted_ = stats.admitted;
  evicted_ = stats.evicted;
  refused_ = stats.refused;
  return Status();
}

}  // namespace tf_embedding
