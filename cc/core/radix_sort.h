// The stable LSD radix sort that groups ids in linear time, whatever the vocabulary size: the
// gradient's grouping by id (gradient_aggregation.cc) and the shard partition and dedup of a
// batch's ids (dedup.cc).
#ifndef TF_EMBEDDING_CC_CORE_RADIX_SORT_H_
#define TF_EMBEDDING_CC_CORE_RADIX_SORT_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace tf_embedding {

// Counting passes use at most 2^11 buckets: small enough to stay in L1, and a 1M-row vocabulary
// (20 bits) still sorts in two passes.
constexpr int kMaxRadixDigitBits = 11;

// The number of significant bits of x: 0 for 0, 64 - (leading zeros) otherwise.
inline int BitWidth(uint64_t x) { return x == 0 ? 0 : 64 - __builtin_clzll(x); }

// Sorts `items` stably by bits [low_bit, low_bit + key_bits) of key(item), a uint64_t; the other
// bits of the key are ignored. `scratch` is resized to items' size and left holding garbage; a
// caller sorting repeatedly passes the same one to reuse its memory. REQUIRES: low_bit +
// key_bits <= 64.
//
// The bits are split into the fewest digits of at most kMaxRadixDigitBits, of equal width (the
// last may be narrower), and each digit is a stable counting sort: count, then scatter. A digit
// that every item shares would move nothing, so its scatter is skipped: clustered keys (small
// ids, one shard) cost fewer passes.
template <typename T, typename KeyFn>
void StableRadixSort(int low_bit, int key_bits, KeyFn key, std::vector<T>* items,
                     std::vector<T>* scratch) {
  const int64_t n = static_cast<int64_t>(items->size());
  if (key_bits <= 0 || n < 2) return;
  const int passes = (key_bits + kMaxRadixDigitBits - 1) / kMaxRadixDigitBits;
  const int digit_bits = (key_bits + passes - 1) / passes;
  std::vector<int64_t> offsets(int64_t{1} << digit_bits);
  std::vector<T>& sorted = *scratch;
  sorted.resize(n);
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = low_bit + pass * digit_bits;
    const uint64_t mask = (uint64_t{1} << std::min(digit_bits, key_bits - pass * digit_bits)) - 1;
    std::fill(offsets.begin(), offsets.end(), 0);
    for (const T& item : *items) ++offsets[(key(item) >> shift) & mask];
    if (offsets[(key(items->front()) >> shift) & mask] == n) continue;
    int64_t start = 0;
    for (int64_t& offset : offsets) start += std::exchange(offset, start);
    for (const T& item : *items) sorted[offsets[(key(item) >> shift) & mask]++] = item;
    items->swap(sorted);
  }
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_RADIX_SORT_H_
