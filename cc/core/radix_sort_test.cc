// StableRadixSort against std::stable_sort: random keys of every width, keys sorted on a bit
// field above other bits, and the pass skipped when every key shares a digit.
#include "cc/core/radix_sort.h"

#include <algorithm>
#include <random>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

// A key and where the item started, so stability is visible.
struct Item {
  uint64_t key;
  int position;
  bool operator==(const Item& other) const {
    return key == other.key && position == other.position;
  }
};

std::ostream& operator<<(std::ostream& out, const Item& item) {
  return out << "(" << item.key << ", " << item.position << ")";
}

std::vector<Item> RandomItems(int count, int key_bits, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<Item> items(count);
  for (int i = 0; i < count; ++i) {
    const uint64_t key = random();
    items[i] = {key_bits == 64 ? key : key & ((uint64_t{1} << key_bits) - 1), i};
  }
  return items;
}

// What StableRadixSort(low_bit, key_bits, ...) must produce.
std::vector<Item> Expected(std::vector<Item> items, int low_bit, int key_bits) {
  const auto field = [&](const Item& item) {
    const uint64_t shifted = item.key >> low_bit;
    return key_bits == 64 ? shifted : shifted & ((uint64_t{1} << key_bits) - 1);
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Item& a, const Item& b) { return field(a) < field(b); });
  return items;
}

std::vector<Item> RadixSorted(std::vector<Item> items, int low_bit, int key_bits) {
  std::vector<Item> scratch;
  StableRadixSort(low_bit, key_bits, [](const Item& item) { return item.key; }, &items, &scratch);
  return items;
}

TFE_TEST(BitWidthCountsSignificantBits) {
  TFE_EXPECT_EQ(BitWidth(0), 0);
  TFE_EXPECT_EQ(BitWidth(1), 1);
  TFE_EXPECT_EQ(BitWidth(1023), 10);
  TFE_EXPECT_EQ(BitWidth(1024), 11);
  TFE_EXPECT_EQ(BitWidth(~uint64_t{0}), 64);
}

TFE_TEST(SortsKeysOfEveryWidthStably) {
  for (int key_bits : {1, 3, 8, 11, 12, 20, 22, 23, 33, 63, 64}) {
    // Few items for narrow keys, so equal keys are common and stability matters.
    const std::vector<Item> items = RandomItems(5000, key_bits, key_bits);
    TFE_EXPECT_EQ(RadixSorted(items, 0, key_bits), Expected(items, 0, key_bits));
  }
}

TFE_TEST(SortsByABitFieldAndIgnoresTheOtherBits) {
  const std::vector<Item> items = RandomItems(3000, 64, 7);
  TFE_EXPECT_EQ(RadixSorted(items, 13, 17), Expected(items, 13, 17));
  TFE_EXPECT_EQ(RadixSorted(items, 40, 24), Expected(items, 40, 24));
}

TFE_TEST(KeysSharingADigitSkipThatPass) {
  // The high digit is the same for all keys: only the low pass reorders.
  std::vector<Item> items = RandomItems(1000, 11, 3);
  for (Item& item : items) item.key |= uint64_t{5} << 11;
  TFE_EXPECT_EQ(RadixSorted(items, 0, 22), Expected(items, 0, 22));
}

TFE_TEST(EmptyAndSingleItemsAndZeroWidthAreUnchanged) {
  TFE_EXPECT_EQ(RadixSorted({}, 0, 20), std::vector<Item>{});
  const std::vector<Item> one = {{42, 0}};
  TFE_EXPECT_EQ(RadixSorted(one, 0, 20), one);
  const std::vector<Item> unsorted = {{3, 0}, {1, 1}};
  TFE_EXPECT_EQ(RadixSorted(unsorted, 0, 0), unsorted);
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
