// The free entries of a KeySet (cc/core/key_set.h), handed out lowest first: a bit per entry,
// a summary bit per word of them, and one per word of summaries, so finding the lowest free
// entry reads three words (and a short scan of the top level) instead of walking a heap.
#ifndef TF_EMBEDDING_CC_CORE_FREE_ENTRIES_H_
#define TF_EMBEDDING_CC_CORE_FREE_ENTRIES_H_

#include <cstdint>
#include <vector>

namespace tf_embedding {

class FreeEntries {
 public:
  // All of entries [0, capacity) free.
  explicit FreeEntries(int64_t capacity)
      : bits_(Words(capacity)), middle_(Words(bits_.size())), top_(Words(middle_.size())) {
    for (int64_t e = 0; e < capacity; ++e) Push(e);
  }

  int64_t size() const { return count_; }
  bool empty() const { return count_ == 0; }

  // Takes the lowest free entry. REQUIRES: !empty().
  int64_t PopLowest() {
    size_t t = 0;
    while (top_[t] == 0) ++t;
    const size_t m = t * 64 + Lowest(top_[t]);
    const size_t w = m * 64 + Lowest(middle_[m]);
    const int64_t e = static_cast<int64_t>(w * 64 + Lowest(bits_[w]));
    bits_[w] &= bits_[w] - 1;  // clears the lowest bit, entry e's
    if (bits_[w] == 0) {
      middle_[m] &= ~Bit(w);
      if (middle_[m] == 0) top_[t] &= ~Bit(m);
    }
    --count_;
    return e;
  }

  // Frees entry `e`. REQUIRES: e is in use.
  void Push(int64_t e) {
    const size_t w = static_cast<size_t>(e) / 64, m = w / 64;
    if (bits_[w] == 0) {
      if (middle_[m] == 0) top_[m / 64] |= Bit(m);
      middle_[m] |= Bit(w);
    }
    bits_[w] |= Bit(static_cast<size_t>(e));
    ++count_;
  }

 private:
  static size_t Words(size_t bits) { return bits / 64 + 1; }
  static uint64_t Bit(size_t i) { return uint64_t{1} << (i % 64); }
  static size_t Lowest(uint64_t word) { return static_cast<size_t>(__builtin_ctzll(word)); }

  std::vector<uint64_t> bits_, middle_, top_;
  int64_t count_ = 0;
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_FREE_ENTRIES_H_
