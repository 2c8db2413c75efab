// The stable LSD radix sort that groups ids in linear time, whatever the vocabulary size: the
// gradient's grouping by id (gradient_aggregation.cc) and the shard partition and dedup of a
// batch's ids (dedup.cc).
#ifndef TF_EMBEDDING_CC_CORE_RADIX_SORT_H_
#define TF_EMBEDDING_CC_CORE_RADIX_SORT_H_

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
// bits of the key are ignored. REQUIRES: low_bit + key_bits <= 64.
//
// The bits are split into the fewest digits of at most kMaxRadixDigitBits, of equal width; one
// read of the items counts every digit's histogram, then each pass is a stable counting-sort
// scatter. A pass whose digit every item shares moves nothing and is skipped, so clustered keys
// (small ids, one shard) cost fewer passes.
template <typename T, typename KeyFn>
void StableRadixSort(int low_bit, int key_bits, KeyFn key, std::vector<T>* items) {
  const int64_t n = static_cast<int64_t>(items->size());
  if (key_bits <= 0 || n < 2) return;
  const int passes = (key_bits + kMaxRadixDigitBits - 1) / kMaxRadixDigitBits;
  const int digit_bits = (key_bits + passes - 1) / passes;
  const int64_t buckets = int64_t{1} << digit_bits;
  const uint64_t digit_mask = static_cast<uint64_t>(buckets) - 1;
  const uint64_t field_mask = key_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << key_bits) - 1;
  // The sort field of an item, in its low bits.
  const auto field = [&](const T& item) { return (key(item) >> low_bit) & field_mask; };

  std::vector<int64_t> offsets(passes * buckets, 0);
  for (const T& item : *items) {
    const uint64_t digits = field(item);
    for (int pass = 0; pass < passes; ++pass) {
      ++offsets[pass * buckets + ((digits >> (pass * digit_bits)) & digit_mask)];
    }
  }
  std::vector<T> sorted(n);
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * digit_bits;
    int64_t* offset = offsets.data() + pass * buckets;
    if (offset[(field(items->front()) >> shift) & digit_mask] == n) continue;
    int64_t start = 0;
    for (int64_t b = 0; b < buckets; ++b) start += std::exchange(offset[b], start);
    for (const T& item : *items) sorted[offset[(field(item) >> shift) & digit_mask]++] = item;
    items->swap(sorted);
  }
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_RADIX_SORT_H_
