// DedupByShard: ids grouped by shard (id % num_shards), ascending within a shard, with the
// inverse index and the shard splits; and its errors.
#include "cc/core/dedup.h"

#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

struct Dedup {
  std::vector<int64_t> unique_ids;
  std::vector<int32_t> inverse;
  std::vector<int64_t> shard_splits;
};

Status Run(const std::vector<int64_t>& ids, int64_t num_shards, Dedup* out) {
  out->inverse.assign(ids.size(), -1);
  out->shard_splits.assign(num_shards + 1, -1);
  return DedupByShard("tbl", {ids.data(), static_cast<int64_t>(ids.size())}, num_shards,
                      &out->unique_ids, out->inverse.data(), out->shard_splits.data());
}

TFE_TEST(GroupsByShardAscendingWithinAShard) {
  Dedup out;
  TFE_ASSERT_OK(Run({9, 2, 9, 4, 2, 7}, 3, &out));
  // Shard 0: 9; shard 1: 4, 7; shard 2: 2.
  TFE_EXPECT_EQ(out.unique_ids, (std::vector<int64_t>{9, 4, 7, 2}));
  TFE_EXPECT_EQ(out.shard_splits, (std::vector<int64_t>{0, 1, 3, 4}));
  TFE_EXPECT_EQ(out.inverse, (std::vector<int32_t>{0, 3, 0, 1, 3, 2}));
}

TFE_TEST(OneShardSortsAndDeduplicates) {
  Dedup out;
  TFE_ASSERT_OK(Run({5, 1, 5, 0, 1}, 1, &out));
  TFE_EXPECT_EQ(out.unique_ids, (std::vector<int64_t>{0, 1, 5}));
  TFE_EXPECT_EQ(out.shard_splits, (std::vector<int64_t>{0, 3}));
  TFE_EXPECT_EQ(out.inverse, (std::vector<int32_t>{2, 1, 2, 0, 1}));
}

TFE_TEST(HandlesLargeIdsAndEmptyShards) {
  const int64_t big = int64_t{1} << 62;
  Dedup out;
  TFE_ASSERT_OK(Run({big + 1, 3, big + 1, big}, 4, &out));
  // big % 4 == 0, (big + 1) % 4 == 1, 3 % 4 == 3; shard 2 is empty.
  TFE_EXPECT_EQ(out.unique_ids, (std::vector<int64_t>{big, big + 1, 3}));
  TFE_EXPECT_EQ(out.shard_splits, (std::vector<int64_t>{0, 1, 2, 2, 3}));
  TFE_EXPECT_EQ(out.inverse, (std::vector<int32_t>{1, 2, 1, 0}));
}

TFE_TEST(NoIds) {
  Dedup out;
  TFE_ASSERT_OK(Run({}, 2, &out));
  TFE_EXPECT_EQ(out.unique_ids, std::vector<int64_t>{});
  TFE_EXPECT_EQ(out.shard_splits, (std::vector<int64_t>{0, 0, 0}));
}

TFE_TEST(Errors) {
  Dedup out;
  TFE_EXPECT_ERROR(Run({5, -3}, 3, &out), "Table 'tbl': id -3 at lookup 1 is negative");
  TFE_EXPECT_ERROR(CheckNumShards("tbl", 0),
                   "Table 'tbl': num_shards must be in [1, 2147483647], got 0");
  TFE_EXPECT_ERROR(CheckNumShards("tbl", int64_t{1} << 40),
                   "Table 'tbl': num_shards must be in [1, 2147483647], got 1099511627776");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
