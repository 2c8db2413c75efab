// PlaceRows: an export of one block layout placed for another keeps every key's record, each in
// a row of its block under the new layout; the same layout moves nothing; a block too small for
// its keys fails naming the table and the counts.
#include "cc/core/dynamic_relayout.h"

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

void Serial(int64_t units, int64_t, const ShardFunction& function) { function(0, units); }

DynamicIndexOptions Layout(std::vector<int64_t> block_rows, bool strided) {
  DynamicIndexOptions options;
  options.block_rows = std::move(block_rows);
  options.strided = strided;
  options.candidate_capacity = 40;
  return options;
}

// The export of an index of `options` after keys 0..keys-1 were each looked up once.
std::vector<KeyRecord> TrainedRows(const DynamicIndexOptions& options, int64_t keys) {
  DynamicIndex index(options);
  std::vector<int64_t> batch(keys), rows(keys), admitted, pool;
  for (int64_t key = 0; key < keys; ++key) batch[key] = key * 7919 + 3;
  index.Lookup(batch.data(), keys, true, Serial, rows.data(), &admitted, &pool);
  std::vector<KeyRecord> exported, candidates;
  DynamicIndexStats stats;
  index.Export(&exported, &candidates, &stats);
  return exported;
}

TFE_TEST(PlacedRowsKeepEveryRecordInItsNewBlock) {
  const std::vector<KeyRecord> rows = TrainedRows(Layout({40}, false), 20);
  DynamicIndex target(Layout({14, 13, 13}, true));
  std::vector<KeyRecord> placed;
  std::vector<int64_t> saved_rows, new_rows;
  TFE_ASSERT_OK(PlaceRows("t", target, rows, &placed, &saved_rows, &new_rows));
  TFE_EXPECT_EQ(saved_rows.size(), size_t{20});
  std::map<int64_t, int64_t> moved;
  for (size_t i = 0; i < saved_rows.size(); ++i) {
    const KeyRecord& record = placed[new_rows[i]];
    TFE_EXPECT_EQ(record.key, rows[saved_rows[i]].key);
    TFE_EXPECT_EQ(target.BlockOfRow(new_rows[i]), target.BlockOf(record.key));
    moved[new_rows[i]] = record.key;
  }
  TFE_EXPECT_EQ(moved.size(), size_t{20});  // no row given twice
  std::vector<KeyRecord> candidates;
  TFE_ASSERT_OK(target.Import("t", placed, candidates, DynamicIndexStats{1, 0, 0, 20, 0, 0}));
}

TFE_TEST(TheSameLayoutMovesNothing) {
  const DynamicIndexOptions options = Layout({14, 13, 13}, false);
  const std::vector<KeyRecord> rows = TrainedRows(options, 20);
  DynamicIndex target(options);
  std::vector<KeyRecord> placed;
  std::vector<int64_t> saved_rows, new_rows;
  TFE_ASSERT_OK(PlaceRows("t", target, rows, &placed, &saved_rows, &new_rows));
  TFE_EXPECT_EQ(saved_rows.size(), size_t{0});
  TFE_EXPECT_EQ(placed.size(), rows.size());
  for (size_t row = 0; row < rows.size(); ++row) TFE_EXPECT_EQ(placed[row].key, rows[row].key);
}

TFE_TEST(ABlockTooSmallForItsKeysFailsNamingTheCounts) {
  const std::vector<KeyRecord> rows = TrainedRows(Layout({8}, false), 8);
  DynamicIndex target(Layout({1, 1, 1, 1, 1, 1, 1, 1}, false));
  std::vector<KeyRecord> placed;
  std::vector<int64_t> saved_rows, new_rows;
  TFE_EXPECT_ERROR(PlaceRows("t", target, rows, &placed, &saved_rows, &new_rows),
                   "Table 't': the checkpoint's dynamic index holds 2 keys that belong to block "
                   "2 of this table's 8 (partition_strategy 'div'), which has 1 rows: restore it "
                   "onto a layout whose blocks hold its keys (fewer blocks, or the checkpoint's "
                   "own)");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
