// DynamicIndex: the key map stays consistent with the exported rows through heavy churn
// (admissions, LRU and age evictions, keys that share their low bits), and a non-training
// lookup changes nothing. Its rules are checked against a replay in
// tests/ops/test_dynamic_index_ops.py.
#include "cc/core/dynamic_index.h"

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

// Runs every block on the calling thread.
void Serial(int64_t units, int64_t, const ShardFunction& function) { function(0, units); }

DynamicIndexOptions ChurnOptions() {
  DynamicIndexOptions options;
  options.block_rows = {37, 37, 36};
  options.admit_after = 2;
  options.evict_after_steps = 5;
  options.evict_every_steps = 3;
  options.candidate_capacity = 60;
  options.pool_rows = 11;
  return options;
}

// key -> table row of every admitted key, from the export; checks no row holds two keys.
std::map<int64_t, int64_t> ExportedRows(const DynamicIndex& index) {
  std::vector<KeyRecord> rows, candidates;
  DynamicIndexStats stats;
  index.Export(&rows, &candidates, &stats);
  std::map<int64_t, int64_t> key_rows;
  for (size_t row = 0; row < rows.size(); ++row) {
    if (rows[row].key < 0) continue;
    TFE_EXPECT(key_rows.emplace(rows[row].key, static_cast<int64_t>(row)).second);
  }
  TFE_EXPECT_EQ(static_cast<int64_t>(key_rows.size()), stats.occupied);
  return key_rows;
}

TFE_TEST(KeyMapAgreesWithExportThroughChurn) {
  TFE_ASSERT_OK(CheckDynamicIndexOptions("t", ChurnOptions()));
  DynamicIndex index(ChurnOptions());
  std::mt19937_64 random(7);
  std::set<int64_t> seen;
  for (int step = 0; step < 300; ++step) {
    std::vector<int64_t> keys(64);
    for (int64_t& key : keys) {
      // Keys that differ in their high bits only, drifting over time.
      key = static_cast<int64_t>((random() % 90 + step / 4) << 40);
      seen.insert(key);
    }
    std::vector<int64_t> rows(keys.size()), admitted, pool;
    index.Lookup(keys.data(), static_cast<int64_t>(keys.size()), true, Serial, rows.data(),
                 &admitted, &pool);
    const std::map<int64_t, int64_t> key_rows = ExportedRows(index);
    std::vector<int64_t> all(seen.begin(), seen.end()), all_rows(all.size());
    const DynamicIndexStats before = index.Stats();
    index.Lookup(all.data(), static_cast<int64_t>(all.size()), false, Serial, all_rows.data(),
                 &admitted, &pool);
    for (size_t i = 0; i < all.size(); ++i) {
      const auto found = key_rows.find(all[i]);
      TFE_EXPECT_EQ(all_rows[i], found == key_rows.end() ? -1 : found->second);
    }
    const DynamicIndexStats after = index.Stats();
    TFE_EXPECT_EQ(after.step, before.step);
    TFE_EXPECT_EQ(after.admitted, before.admitted);
  }
  TFE_EXPECT(index.Stats().evicted > 100);
}

TFE_TEST(ImportRebuildsTheSameIndex) {
  DynamicIndex first(ChurnOptions()), second(ChurnOptions());
  std::mt19937_64 random(3);
  std::vector<int64_t> keys(50), rows_first(50), rows_second(50), admitted, pool;
  for (int step = 0; step < 40; ++step) {
    for (int64_t& key : keys) key = static_cast<int64_t>(random() % 200);
    first.Lookup(keys.data(), 50, true, Serial, rows_first.data(), &admitted, &pool);
  }
  std::vector<KeyRecord> rows, candidates;
  DynamicIndexStats stats;
  first.Export(&rows, &candidates, &stats);
  TFE_ASSERT_OK(second.Import("t", rows, candidates, stats));
  for (int step = 0; step < 40; ++step) {
    for (int64_t& key : keys) key = static_cast<int64_t>(random() % 200);
    first.Lookup(keys.data(), 50, true, Serial, rows_first.data(), &admitted, &pool);
    second.Lookup(keys.data(), 50, true, Serial, rows_second.data(), &admitted, &pool);
    TFE_EXPECT_EQ(rows_first, rows_second);
  }
}

// Runs each block on a thread of its own.
void Threaded(int64_t units, int64_t, const ShardFunction& function) {
  std::vector<std::thread> threads;
  for (int64_t unit = 0; unit < units; ++unit) threads.emplace_back(function, unit, unit + 1);
  for (std::thread& thread : threads) thread.join();
}

TFE_TEST(BlocksOnThreadsGiveTheSerialResult) {
  DynamicIndex serial(ChurnOptions()), threaded(ChurnOptions());
  std::mt19937_64 random(5);
  std::vector<int64_t> keys(80), rows_serial(80), rows_threaded(80);
  for (int step = 0; step < 60; ++step) {
    for (int64_t& key : keys) key = static_cast<int64_t>(random() % 300);
    std::vector<int64_t> admitted_serial, pool_serial, admitted_threaded, pool_threaded;
    serial.Lookup(keys.data(), 80, true, Serial, rows_serial.data(), &admitted_serial,
                  &pool_serial);
    threaded.Lookup(keys.data(), 80, true, Threaded, rows_threaded.data(), &admitted_threaded,
                    &pool_threaded);
    TFE_EXPECT_EQ(rows_threaded, rows_serial);
    TFE_EXPECT_EQ(admitted_threaded, admitted_serial);
    TFE_EXPECT_EQ(pool_threaded, pool_serial);
  }
  TFE_EXPECT_EQ(threaded.Stats().evicted, serial.Stats().evicted);
}

TFE_TEST(RejectsBadOptions) {
  DynamicIndexOptions options = ChurnOptions();
  options.admit_after = 0;
  TFE_EXPECT_ERROR(CheckDynamicIndexOptions("t", options), "Table 't': admit_after must be >= 1, got 0");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
