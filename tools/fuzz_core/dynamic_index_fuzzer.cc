// Fuzz target: a dynamic table's key index (DynamicIndex, TfeDynamicLookup) over a few steps
// of fuzzed options and keys. Properties beyond memory safety: each lookup's row is the row the
// export gives its key (-1 for a key it does not hold); no row holds two keys, and each key
// sits in its own block's rows; a key admitted in training was looked up admit_after times;
// an evaluation batch changes nothing; and the export imports into a fresh index unchanged.
#include <cstdint>
#include <map>
#include <vector>

#include "cc/core/dynamic_index.h"
#include "tools/fuzz_core/fuzz_input.h"

namespace {

using namespace tf_embedding;  // NOLINT(build/namespaces)

void Serial(int64_t units, int64_t, const ShardFunction& function) { function(0, units); }

struct Exported {
  std::vector<KeyRecord> rows, candidates;
  DynamicIndexStats stats;
};

Exported Export(const DynamicIndex& index) {
  Exported out;
  index.Export(&out.rows, &out.candidates, &out.stats);
  return out;
}

bool Same(const Exported& a, const Exported& b) {
  auto same = [](const std::vector<KeyRecord>& x, const std::vector<KeyRecord>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].key != y[i].key || x[i].count != y[i].count ||
          x[i].last_seen != y[i].last_seen) {
        return false;
      }
    }
    return true;
  };
  return same(a.rows, b.rows) && same(a.candidates, b.candidates) &&
         a.stats.step == b.stats.step && a.stats.admitted == b.stats.admitted &&
         a.stats.evicted == b.stats.evicted && a.stats.refused == b.stats.refused;
}

// The table row of each occupied row's key; checks rows hold distinct keys of their block.
std::map<int64_t, int64_t> KeyRows(const DynamicIndexOptions& options, const Exported& state) {
  std::map<int64_t, int64_t> key_rows;
  const int64_t blocks = static_cast<int64_t>(options.block_rows.size());
  int64_t first = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t slot = 0; slot < options.block_rows[b]; ++slot) {
      const int64_t row = options.strided ? slot * blocks + b : first + slot;
      const int64_t key = state.rows[row].key;
      if (key < 0) continue;
      FUZZ_CHECK(static_cast<int64_t>((MixKey(key) >> 32) % blocks) == b);
      FUZZ_CHECK(key_rows.emplace(key, row).second);
    }
    first += options.block_rows[b];
  }
  return key_rows;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tf_embedding::fuzz;  // NOLINT(build/namespaces)
  FuzzedDataProvider in(data, size);
  DynamicIndexOptions options;
  options.strided = in.ConsumeBool();
  const int blocks = in.ConsumeIntegralInRange<int>(1, 4);
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(1, 6);
  for (int b = 0; b < blocks; ++b) {
    options.block_rows.push_back(options.strided ? rows
                                                 : in.ConsumeIntegralInRange<int64_t>(1, 6));
  }
  options.admit_after = in.ConsumeIntegralInRange<int64_t>(1, 3);
  options.evict_after_steps = in.ConsumeIntegralInRange<int64_t>(0, 3);
  options.evict_every_steps = in.ConsumeIntegralInRange<int64_t>(1, 2);
  options.refuse_when_full = in.ConsumeBool();
  options.candidate_capacity = in.ConsumeIntegralInRange<int64_t>(0, 8);
  options.pool_rows = in.ConsumeIntegralInRange<int64_t>(1, 5);
  if (!CheckDynamicIndexOptions("t", options).ok()) return 0;
  DynamicIndex index(options);
  const int steps = in.ConsumeIntegralInRange<int>(1, 8);
  for (int step = 0; step < steps; ++step) {
    const bool training = in.ConsumeBool();
    std::vector<int64_t> keys = Int64s(in, 12);
    for (int64_t& key : keys) key = key < 0 ? ~key : key;  // the kernel rejects negative keys
    const Exported before = Export(index);
    std::vector<int64_t> looked_up(keys.size()), admitted, pool;
    index.Lookup(keys.data(), static_cast<int64_t>(keys.size()), training, Serial,
                 looked_up.data(), &admitted, &pool);
    const Exported after = Export(index);
    if (!training) FUZZ_CHECK(Same(before, after) && admitted.empty());
    FUZZ_CHECK(admitted.size() == pool.size());
    for (int64_t p : pool) FUZZ_CHECK(p >= 0 && p < options.pool_rows);
    const std::map<int64_t, int64_t> key_rows = KeyRows(options, after);
    FUZZ_CHECK(static_cast<int64_t>(key_rows.size()) == after.stats.occupied);
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto found = key_rows.find(keys[i]);
      FUZZ_CHECK(looked_up[i] == (found == key_rows.end() ? -1 : found->second));
      if (training && looked_up[i] >= 0) {
        FUZZ_CHECK(after.rows[looked_up[i]].count >= options.admit_after);
        FUZZ_CHECK(after.rows[looked_up[i]].last_seen == after.stats.step);
      }
    }
    DynamicIndex restored(options);
    FUZZ_CHECK(restored.Import("t", after.rows, after.candidates, after.stats).ok());
    FUZZ_CHECK(Same(Export(restored), after));
  }
  return 0;
}
