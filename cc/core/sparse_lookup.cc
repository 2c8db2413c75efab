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

// The first of the sparse lookups [low, high) whose row is `row` or later, by binary search.
int64_t FirstSparseLookupOfRow(const int64_t* indices, int64_t low, int64_t high, int64_t row) {
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (indices[2 * middle] < row) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// Combines one chunk of rows, [chunk, chunk + chunk_rows), whose lookups (checked) are ids[0,
// row_splits[chunk_rows]) with chunk-local row_splits.
void CombineChunk(Combiner combiner, const int64_t* row_splits, int64_t chunk_rows,
                  const int64_t* ids, const float* table, int64_t dim, std::vector<float>* gains,
                  float* activations) {
  const int64_t chunk_lookups = row_splits[chunk_rows];
  // The sum combiner's gains are all 1: CombineRows then adds the rows without gains.
  if (combiner != Combiner::kSum) {
    gains->assign(chunk_lookups, 1.0f);
    for (int64_t r = 0; r < chunk_rows; ++r) {
      ApplyCombinerToRow(combiner, gains->data() + row_splits[r],
                         gains->data() + row_splits[r + 1]);
    }
  }
  CsrBatch batch;
  batch.row_splits = row_splits;
  batch.num_row_splits = chunk_rows + 1;
  batch.ids = ids;
  batch.num_ids = chunk_lookups;
  batch.gains = combiner == Combiner::kSum ? nullptr : gains->data();
  batch.num_gains = combiner == Combiner::kSum ? 0 : chunk_lookups;
  CombineRows(batch, table, dim, 0, chunk_rows, activations);
}

// CombineSparseRows of a ragged feature: its row_splits give each chunk's lookups.
bool CombineRaggedRows(const SparseLookups& lookups, uint64_t vocabulary, Combiner combiner,
                       const float* table, int64_t dim, int64_t row_begin, int64_t row_end,
                       float* activations) {
  const int64_t* splits = lookups.row_splits;
  if ((row_begin == 0 && splits[0] != 0) ||
      (row_end == lookups.rows && splits[lookups.rows] != lookups.nnz)) {
    return false;
  }
  int64_t row_splits[kChunkRows + 1];
  std::vector<float> gains;
  for (int64_t chunk = row_begin; chunk < row_end; chunk += kChunkRows) {
    const int64_t chunk_rows = std::min(kChunkRows, row_end - chunk);
    const int64_t first = splits[chunk];
    // Non-decreasing splits within [0, nnz] (the unsigned compare rejects a negative first
    // one too); the local splits are unsigned differences, which cannot overflow whatever the
    // splits (bad ones fail the checks all the same).
    uint64_t bad = static_cast<uint64_t>(first) > static_cast<uint64_t>(lookups.nnz);
    for (int64_t r = 0; r < chunk_rows; ++r) {
      bad |= splits[chunk + r + 1] < splits[chunk + r];
      row_splits[r] = static_cast<int64_t>(static_cast<uint64_t>(splits[chunk + r]) -
                                           static_cast<uint64_t>(first));
    }
    row_splits[chunk_rows] = static_cast<int64_t>(
        static_cast<uint64_t>(splits[chunk + chunk_rows]) - static_cast<uint64_t>(first));
    bad |= splits[chunk + chunk_rows] > lookups.nnz;
    if (bad != 0) return false;
    const int64_t* ids = lookups.ids + first;
    for (int64_t k = 0; k < row_splits[chunk_rows]; ++k) {
      bad |= static_cast<uint64_t>(ids[k]) >= vocabulary;
    }
    if (bad != 0) return false;
    CombineChunk(combiner, row_splits, chunk_rows, ids, table, dim, &gains,
                 activations + chunk * dim);
  }
  return true;
}

}  // namespace

bool AsSparseLookups(const std::string& table_name, const FeatureSpec& spec,
                     const FeatureTensors& t, FeatureLayout* layout, SparseLookups* lookups) {
  const bool sparse = spec.kind == InputKind::kSparse;
  if ((!sparse && spec.kind != InputKind::kRagged) || spec.has_weights || !t.ids.is_int64() ||
      spec.max_sequence_length != 0 || (sparse && t.dense_shape.size != 2) ||
      !FeatureLayoutOf(table_name, spec, t, layout).ok() || layout->sequence) {
    return false;
  }
  *lookups = SparseLookups();
  lookups->ids = t.ids.int64_data();
  lookups->nnz = t.ids.size();
  lookups->rows = layout->num_rows;
  if (sparse) {
    lookups->indices = t.row_info.data;
    lookups->columns = t.dense_shape[1];
  } else {
    lookups->row_splits = t.row_info.data;
  }
  return true;
}

int64_t FirstLookupOfRow(const SparseLookups& lookups, int64_t row) {
  if (lookups.row_splits != nullptr) return lookups.row_splits[row];
  return FirstSparseLookupOfRow(lookups.indices, 0, lookups.nnz, row);
}

bool CombineSparseRows(const SparseLookups& lookups, int64_t vocabulary_size, Combiner combiner,
                       const float* table, int64_t dim, int64_t row_begin, int64_t row_end,
                       int64_t lookup_begin, int64_t lookup_end, float* activations) {
  if (lookups.row_splits != nullptr) {
    return CombineRaggedRows(lookups, vocabulary_size, combiner, table, dim, row_begin, row_end,
                             activations);
  }
  const int64_t* indices = lookups.indices;
  const uint64_t columns = lookups.columns, vocabulary = vocabulary_size;
  int64_t next = lookup_begin;
  // One more than the chunk's row_splits: a lookup whose row is out of the chunk writes to the
  // spare last entry (and fails the checks) instead of out of bounds.
  int64_t row_splits[kChunkRows + 2];
  std::vector<float> gains;
  for (int64_t chunk = row_begin; chunk < row_end; chunk += kChunkRows) {
    const int64_t chunk_rows = std::min(kChunkRows, row_end - chunk);
    const uint64_t span = chunk_rows;
    // The chunk's lookups: from `next` to the first lookup of the next chunk's first row (by
    // binary search, as if the rows were in order: the checks below fail if they are not), or
    // to the range's end for its last chunk.
    const int64_t first = next;
    const int64_t last =
        chunk + chunk_rows == row_end
            ? lookup_end
            : FirstSparseLookupOfRow(indices, first, lookup_end, chunk + chunk_rows);
    // Branch-free checks of every lookup (rows within the chunk and non-decreasing, columns and
    // ids in bounds; unsigned compares reject negative values too), each writing its position
    // + 1 as its row's end: the last lookup of a row leaves the row's end there.
    std::fill(row_splits, row_splits + chunk_rows + 2, 0);
    uint64_t bad = 0;
    int64_t previous = chunk;
    for (int64_t k = first; k < last; ++k) {
      const int64_t row = indices[2 * k];
      // Unsigned: no overflow for any row (a huge one is out of the chunk all the same).
      const uint64_t local = static_cast<uint64_t>(row) - static_cast<uint64_t>(chunk);
      bad |= (local >= span) | (row < previous) |
             (static_cast<uint64_t>(indices[2 * k + 1]) >= columns) |
             (static_cast<uint64_t>(lookups.ids[k]) >= vocabulary);
      previous = row;
      row_splits[std::min(local, span) + 1] = k - first + 1;
    }
    if (bad != 0) return false;
    // Rows without lookups end where the row before them does.
    for (int64_t r = 1; r <= chunk_rows; ++r) {
      row_splits[r] = std::max(row_splits[r], row_splits[r - 1]);
    }
    next = last;
    CombineChunk(combiner, row_splits, chunk_rows, lookups.ids + first, table, dim, &gains,
                 activations + chunk * dim);
  }
  // The last chunk took the range's remaining lookups; a range without rows must have none.
  return next == lookup_end;
}

}  // namespace tf_embedding
