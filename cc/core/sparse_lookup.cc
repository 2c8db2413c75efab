#include "cc/core/sparse_lookup.h"

#include <algorithm>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/lookup.h"

namespace tf_embedding {
namespace {

// Rows are combined a chunk at a time from a CSR batch of the chunk alone: its row_splits and
// gains are small enough to stay in the L1 cache, where the conversion would write and the lookup
// read back those of the whole batch.
constexpr int64_t kChunkRows = 64;

}  // namespace

int64_t FirstLookupOfRow(const SparseLookups& lookups, int64_t row) {
  int64_t low = 0, high = lookups.nnz;
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (lookups.indices[2 * middle] < row) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

bool CombineSparseRows(const SparseLookups& lookups, int64_t vocabulary_size, Combiner combiner,
                       const float* table, int64_t dim, int64_t row_begin, int64_t row_end,
                       int64_t lookup_begin, int64_t lookup_end, float* activations) {
  const int64_t* indices = lookups.indices;
  const uint64_t columns = lookups.columns, vocabulary = vocabulary_size;
  int64_t next = lookup_begin;
  int64_t row_splits[kChunkRows + 1];
  std::vector<float> gains;
  for (int64_t chunk = row_begin; chunk < row_end; chunk += kChunkRows) {
    const int64_t chunk_rows = std::min(kChunkRows, row_end - chunk);
    // The chunk's lookups are the run from `next` whose rows are the chunk's, in order; their
    // columns and ids are checked on the way, before any of their table rows is read. (Unsigned
    // compares reject negative values too.)
    const int64_t first = next;
    uint64_t bad = 0;
    row_splits[0] = 0;
    for (int64_t r = 0; r < chunk_rows; ++r) {
      while (next < lookup_end && indices[2 * next] == chunk + r) {
        bad |= (static_cast<uint64_t>(indices[2 * next + 1]) >= columns) |
               (static_cast<uint64_t>(lookups.ids[next]) >= vocabulary);
        ++next;
      }
      row_splits[r + 1] = next - first;
    }
    if (bad != 0) return false;
    const int64_t chunk_lookups = next - first;
    // The sum combiner's gains are all 1: CombineRows then adds the rows without gains.
    if (combiner != Combiner::kSum) {
      gains.assign(chunk_lookups, 1.0f);
      for (int64_t r = 0; r < chunk_rows; ++r) {
        ApplyCombinerToRow(combiner, gains.data() + row_splits[r],
                           gains.data() + row_splits[r + 1]);
      }
    }
    CsrBatch batch;
    batch.row_splits = row_splits;
    batch.num_row_splits = chunk_rows + 1;
    batch.ids = lookups.ids + first;
    batch.num_ids = chunk_lookups;
    batch.gains = combiner == Combiner::kSum ? nullptr : gains.data();
    batch.num_gains = combiner == Combiner::kSum ? 0 : chunk_lookups;
    CombineRows(batch, table, dim, 0, chunk_rows, activations + chunk * dim);
  }
  // A lookup left over has a row outside the range or out of order.
  return next == lookup_end;
}

}  // namespace tf_embedding
