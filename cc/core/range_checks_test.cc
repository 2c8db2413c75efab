// The vectorised whole-array checks: every position of an array may hold the one bad element
// (the vector loops' tails included), for each kind of badness.
#include "cc/core/range_checks.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

TFE_TEST(AllInRangeFindsABadValueAtAnyPosition) {
  for (int64_t size = 0; size < 70; ++size) {
    std::vector<int64_t> values(size);
    for (int64_t i = 0; i < size; ++i) values[i] = (i * 7) % 10;
    TFE_EXPECT(AllInRange(values.data(), size, 10));
    for (int64_t bad : {int64_t{10}, int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
      for (int64_t i = 0; i < size; ++i) {
        std::vector<int64_t> copy = values;
        copy[i] = bad;
        TFE_EXPECT(!AllInRange(copy.data(), size, 10));
      }
    }
  }
  const int64_t largest = std::numeric_limits<int64_t>::max();
  TFE_EXPECT(AllInRange(&largest, 1, uint64_t{1} << 63));
}

// Rank-2 indices of `nnz` lookups spread over `rows` rows in order, some rows left empty.
std::vector<int64_t> InOrderIndices(int64_t nnz, int64_t rows) {
  std::vector<int64_t> indices(2 * nnz);
  for (int64_t i = 0; i < nnz; ++i) {
    indices[2 * i] = i * rows / (nnz + 1);
    indices[2 * i + 1] = i % 3;
  }
  return indices;
}

template <typename Id>
void CheckSparseLookups() {
  const int64_t rows = 9, columns = 3, vocabulary = 100;
  for (int64_t nnz = 0; nnz < 40; ++nnz) {
    const std::vector<int64_t> indices = InOrderIndices(nnz, rows);
    std::vector<Id> ids(nnz);
    for (int64_t i = 0; i < nnz; ++i) ids[i] = static_cast<Id>((i * 37) % vocabulary);
    const auto valid = [&](const std::vector<int64_t>& x, const std::vector<Id>& y) {
      return SparseLookupsValidInRowOrder(x.data(), y.data(), nnz, rows, columns, vocabulary);
    };
    TFE_EXPECT(valid(indices, ids));
    for (int64_t i = 0; i < nnz; ++i) {
      for (Id bad_id : {static_cast<Id>(vocabulary), static_cast<Id>(-1)}) {
        std::vector<Id> bad = ids;
        bad[i] = bad_id;
        TFE_EXPECT(!valid(indices, bad));
      }
      for (int64_t bad_row : {rows, int64_t{-1}}) {
        std::vector<int64_t> bad = indices;
        bad[2 * i] = bad_row;
        TFE_EXPECT(!valid(bad, ids));
      }
      for (int64_t bad_column : {columns, int64_t{-1}}) {
        std::vector<int64_t> bad = indices;
        bad[2 * i + 1] = bad_column;
        TFE_EXPECT(!valid(bad, ids));
      }
      if (i > 0 && indices[2 * i] != indices[2 * i - 2]) {
        std::vector<int64_t> swapped = indices;
        std::swap(swapped[2 * i], swapped[2 * i - 2]);
        TFE_EXPECT(!valid(swapped, ids));
      }
    }
  }
}

TFE_TEST(SparseLookupsFindEveryKindOfBadLookupAtAnyPosition) {
  CheckSparseLookups<int64_t>();
  CheckSparseLookups<int32_t>();
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
