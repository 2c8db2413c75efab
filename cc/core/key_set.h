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

namespace tf_embedding {

// Counts saturate here (they are stored in 32 bits).
inline constexpr int64_t kMaxKeyCount = std::numeric_limits<uint32_t>::max();

// A fixed number of entries holding keys with their count and last step: an open-addressing
// map from key to entry (linear probing, backward-shift deletion, so no tombstones), a recency
// list of the entries (front: most recent), and the free entries, lowest first. 36-44 bytes an
// entry.
class KeySet {
 public:
  explicit KeySet(int64_t capacity)
      : keys_(capacity, -1), counts_(capacity, 0), last_seen_(capacity, 0),
        prev_(capacity, -1), next_(capacity, -1), free_(capacity) {
    int64_t buckets = 2;
    while (buckets < 2 * capacity) buckets *= 2;
    buckets_.assign(buckets, -1);
    mask_ = static_cast<uint64_t>(buckets - 1);
  }

  int64_t capacity() const { return static_cast<int64_t>(keys_.size()); }
  int64_t size() const { return capacity() - static_cast<int64_t>(free_.size()); }
  bool full() const { return free_.empty(); }
  int64_t key(int64_t e) const { return keys_[e]; }
  int64_t count(int64_t e) const { return counts_[e]; }
  int64_t last_seen(int64_t e) const { return last_seen_[e]; }
  int64_t tail() const { return tail_; }  // the least recent linked entry, -1 if none

  // The entry of `key`, -1 if absent.
  int64_t Find(int64_t key) const {
    for (uint64_t b = Home(key);; b = (b + 1) & mask_) {
      const int32_t e = buckets_[b];
      if (e < 0) return -1;
      if (keys_[e] == key) return e;
    }
  }

  // entries[i] = Find(keys[i]) for i in [0, n), the same answers with the index's memory
  // latency overlapped: a group's home buckets are prefetched, then the keys of their first
  // entries, then each key is found (its run of buckets usually already in cache).
  void FindAll(const int64_t* keys, int64_t n, int64_t* entries) const {
    constexpr int64_t kGroup = 16;
    uint64_t homes[kGroup];
    for (int64_t begin = 0; begin < n; begin += kGroup) {
      const int64_t size = std::min(kGroup, n - begin);
      for (int64_t i = 0; i < size; ++i) {
        homes[i] = Home(keys[begin + i]);
        __builtin_prefetch(&buckets_[homes[i]]);
      }
      for (int64_t i = 0; i < size; ++i) {
        const int32_t e = buckets_[homes[i]];
        if (e >= 0) __builtin_prefetch(&keys_[e]);
      }
      for (int64_t i = 0; i < size; ++i) entries[begin + i] = Find(keys[begin + i]);
    }
  }

  // Brings `key`'s home bucket toward the cache, for a find or insert of it soon.
  void PrefetchHome(int64_t key) const { __builtin_prefetch(&buckets_[Home(key)], 1); }

  // Brings entry `e`'s count, step and links toward the cache, for an update of it soon.
  void PrefetchEntry(int64_t e) const {
    __builtin_prefetch(&counts_[e], 1);
    __builtin_prefetch(&last_seen_[e], 1);
    __builtin_prefetch(&prev_[e], 1);
    __builtin_prefetch(&next_[e], 1);
  }

  // Puts absent `key` in the lowest free entry, linked at the front. REQUIRES: !full().
  int64_t Insert(int64_t key, int64_t count, int64_t step) {
    const int32_t e = static_cast<int32_t>(free_.PopLowest());
    keys_[e] = key;
    Set(e, count, step);
    uint64_t b = Home(key);
    while (buckets_[b] >= 0) b = (b + 1) & mask_;
    buckets_[b] = e;
    PushFront(e);
    return e;
  }

  // Frees entry `e` (linked or not).
  void Remove(int64_t e) {
    if (prev_[e] >= 0 || next_[e] >= 0 || head_ == e) Unlink(e);
    uint64_t b = Home(keys_[e]);
    while (buckets_[b] != e) b = (b + 1) & mask_;
    EraseBucket(b);
    keys_[e] = -1;
    counts_[e] = 0;
    last_seen_[e] = 0;
    free_.Push(e);
  }

  void Set(int64_t e, int64_t count, int64_t step) {
    counts_[e] = static_cast<uint32_t>(std::min(count, kMaxKeyCount));
    last_seen_[e] = step;
  }

  void Unlink(int64_t e) {
    const int32_t p = prev_[e], n = next_[e];
    (p >= 0 ? next_[p] : head_) = n;
    (n >= 0 ? prev_[n] : tail_) = p;
    prev_[e] = next_[e] = -1;
  }

  // Links an unlinked entry at the front.
  void PushFront(int64_t e) {
    next_[e] = head_;
    prev_[e] = -1;
    (head_ >= 0 ? prev_[head_] : tail_) = static_cast<int32_t>(e);
    head_ = static_cast<int32_t>(e);
  }

 private:

  uint64_t Home(int64_t key) const { return MixKey(static_cast<uint64_t>(key)) & mask_; }

  // Empties bucket `hole`, moving later entries of its probe run back so every entry stays
  // reachable from its home bucket.
  void EraseBucket(uint64_t hole) {
    for (uint64_t b = (hole + 1) & mask_; buckets_[b] >= 0; b = (b + 1) & mask_) {
      const uint64_t home = Home(keys_[buckets_[b]]);
      // The entry may move to `hole` unless its home lies cyclically in (hole, b].
      const bool stays = hole <= b ? (hole < home && home <= b) : (hole < home || home <= b);
      if (!stays) {
        buckets_[hole] = buckets_[b];
        hole = b;
      }
    }
    buckets_[hole] = -1;
  }

  std::vector<int64_t> keys_;
  std::vector<uint32_t> counts_;
  std::vector<int64_t> last_seen_;
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  std::vector<int32_t> buckets_;
  uint64_t mask_ = 0;
  FreeEntries free_;
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_KEY_SET_H_
