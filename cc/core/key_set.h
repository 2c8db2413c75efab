// A fixed number of entries holding int64 keys with a count and a last step each: the store of
// a dynamic table's admitted keys and of its candidates (cc/core/dynamic_index.cc).
#ifndef TF_EMBEDDING_CC_CORE_KEY_SET_H_
#define TF_EMBEDDING_CC_CORE_KEY_SET_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "cc/core/dynamic_index.h"
#include "cc/core/free_entries.h"
#include "cc/core/huge_pages.h"
#include "cc/core/radix_sort.h"

namespace tf_embedding {

// Counts saturate here (they are stored in 32 bits).
inline constexpr int64_t kMaxKeyCount = std::numeric_limits<uint32_t>::max();

// A fixed number of entries holding keys with their count and last step: an open-addressing
// map from key to entry (linear probing, backward-shift deletion, so no tombstones), a recency
// list of the entries (front: most recent), and the free entries, lowest first. 40-48 bytes an
// entry: a 32-byte record (one cache line holds all that a step reads and writes of an entry)
// and 2 to 4 buckets of 4 bytes.
class KeySet {
 public:
  explicit KeySet(int64_t capacity) : entries_(capacity), free_(capacity) {
    int64_t buckets = 2;
    while (buckets < 2 * capacity) buckets *= 2;
    buckets_.assign(buckets, -1);
    mask_ = static_cast<uint64_t>(buckets - 1);
    // A step reads entries and buckets at random: on 4 KiB pages each read would also walk
    // the page table.
    AdviseHugePages(entries_.data(), entries_.size() * sizeof(Entry));
    AdviseHugePages(buckets_.data(), buckets_.size() * sizeof(int32_t));
  }

  int64_t capacity() const { return static_cast<int64_t>(entries_.size()); }
  int64_t size() const { return capacity() - static_cast<int64_t>(free_.size()); }
  bool full() const { return free_.empty(); }
  int64_t key(int64_t e) const { return entries_[e].key; }
  int64_t count(int64_t e) const { return entries_[e].count; }
  int64_t last_seen(int64_t e) const { return entries_[e].last_seen; }
  int64_t tail() const { return tail_; }  // the least recent linked entry, -1 if none

  // The entry of `key`, -1 if absent.
  int64_t Find(int64_t key) const { return FindFrom(Home(key), key); }

  // The entry of `key`, whose home bucket is `home`, -1 if absent.
  int64_t FindFrom(uint64_t home, int64_t key) const {
    for (uint64_t b = home;; b = (b + 1) & mask_) {
      const int32_t e = buckets_[b];
      if (e < 0) return -1;
      if (entries_[e].key == key) return e;
    }
  }

  // entries[i] = Find(keys[i]) for i in [0, n), the same answers with the index's memory
  // latency overlapped: a rolling pipeline prefetches the home bucket of the key kBucketsAhead
  // places ahead, and the entry of the key kEntriesAhead places ahead (its bucket by then
  // usually in cache), so that many misses are in flight while each key is found (groups of 16
  // keys, each waiting for its slowest miss, kept far fewer in flight).
  void FindAll(const int64_t* keys, int64_t n, int64_t* entries) const {
    constexpr int64_t kBucketsAhead = 128, kEntriesAhead = 64;
    uint64_t homes[kBucketsAhead];
    for (int64_t i = 0; i < std::min(n, kBucketsAhead); ++i) {
      homes[i] = Home(keys[i]);
      __builtin_prefetch(&buckets_[homes[i]]);
    }
    for (int64_t i = 0; i < n; ++i) {
      if (i + kEntriesAhead < n) {
        const int32_t e = buckets_[homes[(i + kEntriesAhead) % kBucketsAhead]];
        if (e >= 0) __builtin_prefetch(&entries_[e]);
      }
      const uint64_t home = homes[i % kBucketsAhead];
      if (i + kBucketsAhead < n) {
        homes[i % kBucketsAhead] = Home(keys[i + kBucketsAhead]);
        __builtin_prefetch(&buckets_[homes[i % kBucketsAhead]]);
      }
      entries[i] = FindFrom(home, keys[i]);
    }
  }

  // Brings `key`'s home bucket toward the cache, for a find or insert of it soon.
  void PrefetchHome(int64_t key) const { __builtin_prefetch(&buckets_[Home(key)], 1); }

  // Brings entry `e` toward the cache, for an update of it soon.
  void PrefetchEntry(int64_t e) const { __builtin_prefetch(&entries_[e], 1); }

  // Brings the entries linked before and after entry `e` toward the cache, for an unlinking
  // of `e` soon (REQUIRES: e's record in cache, or soon: see PrefetchEntry).
  void PrefetchNeighbours(int64_t e) const {
    const Entry& entry = entries_[e];
    if (entry.prev >= 0) __builtin_prefetch(&entries_[entry.prev], 1);
    if (entry.next >= 0) __builtin_prefetch(&entries_[entry.next], 1);
  }

  // Puts absent `key` in the lowest free entry, linked at the front. REQUIRES: !full().
  int64_t Insert(int64_t key, int64_t count, int64_t step) {
    const int32_t e = static_cast<int32_t>(free_.PopLowest());
    entries_[e].key = key;
    Set(e, count, step);
    uint64_t b = Home(key);
    while (buckets_[b] >= 0) b = (b + 1) & mask_;
    buckets_[b] = e;
    PushFront(e);
    return e;
  }

  // Frees entry `e` (linked or not).
  void Remove(int64_t e) {
    if (entries_[e].prev >= 0 || entries_[e].next >= 0 || head_ == e) Unlink(e);
    uint64_t b = Home(entries_[e].key);
    while (buckets_[b] != e) b = (b + 1) & mask_;
    EraseBucket(b);
    entries_[e] = Entry();
    free_.Push(e);
  }

  void Set(int64_t e, int64_t count, int64_t step) {
    entries_[e].count = static_cast<uint32_t>(std::min(count, kMaxKeyCount));
    entries_[e].last_seen = step;
  }

  void Unlink(int64_t e) {
    Entry& entry = entries_[e];
    const int32_t p = entry.prev, n = entry.next;
    (p >= 0 ? entries_[p].next : head_) = n;
    (n >= 0 ? entries_[n].prev : tail_) = p;
    entry.prev = entry.next = -1;
  }

  // Links an unlinked entry at the back.
  void PushBack(int64_t e) {
    entries_[e].prev = tail_;
    entries_[e].next = -1;
    (tail_ >= 0 ? entries_[tail_].next : head_) = static_cast<int32_t>(e);
    tail_ = static_cast<int32_t>(e);
  }

  // Orders the tail's run (the entries last seen in the tail's step, which the list holds
  // together) by ascending key from the tail, unless it already is: the tail is then the
  // smallest (last_seen, key). A step links its keys at the front in any order, since only
  // this eviction order needs them ordered: a run is ordered once, when it reaches the tail
  // and a key must give way, so a table not full never orders one.
  void OrderTailRun() {
    if (tail_ < 0 || entries_[tail_].last_seen <= ordered_through_) return;
    const int64_t step = entries_[tail_].last_seen;
    // (key, entry) pairs, so that each pass of the sort reads its keys in order.
    std::vector<std::pair<uint64_t, int32_t>> run, scratch;
    uint64_t largest = 0;
    for (int32_t e = tail_; e >= 0 && entries_[e].last_seen == step; e = entries_[e].prev) {
      run.emplace_back(static_cast<uint64_t>(entries_[e].key), e);
      largest = std::max(largest, run.back().first);
    }
    StableRadixSort(0, BitWidth(largest), [](const auto& pair) { return pair.first; }, &run,
                    &scratch);
    for (const auto& pair : run) Unlink(pair.second);
    for (auto pair = run.rbegin(); pair != run.rend(); ++pair) PushBack(pair->second);
    ordered_through_ = step;
  }

  // Declares the runs of steps up to `step` ordered (OrderTailRun), as a restore links them.
  void RunsOrderedThrough(int64_t step) { ordered_through_ = step; }

  // Links an unlinked entry at the front.
  void PushFront(int64_t e) {
    entries_[e].next = head_;
    entries_[e].prev = -1;
    (head_ >= 0 ? entries_[head_].prev : tail_) = static_cast<int32_t>(e);
    head_ = static_cast<int32_t>(e);
  }

 private:

  uint64_t Home(int64_t key) const { return MixKey(static_cast<uint64_t>(key)) & mask_; }

  // Empties bucket `hole`, moving later entries of its probe run back so every entry stays
  // reachable from its home bucket.
  void EraseBucket(uint64_t hole) {
    for (uint64_t b = (hole + 1) & mask_; buckets_[b] >= 0; b = (b + 1) & mask_) {
      const uint64_t home = Home(entries_[buckets_[b]].key);
      // The entry may move to `hole` unless its home lies cyclically in (hole, b].
      const bool stays = hole <= b ? (hole < home && home <= b) : (hole < home || home <= b);
      if (!stays) {
        buckets_[hole] = buckets_[b];
        hole = b;
      }
    }
    buckets_[hole] = -1;
  }

  // An entry's record; a free one holds key -1. 32-byte aligned, so never split over two
  // cache lines.
  struct alignas(32) Entry {
    int64_t key = -1;
    int64_t last_seen = 0;
    uint32_t count = 0;
    int32_t prev = -1, next = -1;
  };
  static_assert(sizeof(Entry) == 32);

  std::vector<Entry> entries_;
  int32_t head_ = -1, tail_ = -1;
  int64_t ordered_through_ = 0;  // the runs of steps up to it are ordered (OrderTailRun)
  std::vector<int32_t> buckets_;
  uint64_t mask_ = 0;
  FreeEntries free_;
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_KEY_SET_H_
