// The cache-line arithmetic of the loops that prefetch table rows (combine_row.h, row_updates.h):
// how many lines a row spans, and how many rows ahead keep a number of lines in flight.
#ifndef TF_EMBEDDING_CC_CORE_CACHE_LINES_H_
#define TF_EMBEDDING_CC_CORE_CACHE_LINES_H_

#include <algorithm>
#include <cstdint>

namespace tf_embedding {

// 64-byte lines of float32.
constexpr int64_t kFloatsPerCacheLine = 16;

// The lines a row of `dim` floats spans (a row starts on a line when dim is a multiple of 16).
inline int64_t CacheLinesPerRow(int64_t dim) {
  return (dim + kFloatsPerCacheLine - 1) / kFloatsPerCacheLine;
}

// The prefetch distance, in rows of `lines_per_row` lines, that keeps `lines_ahead` lines in
// flight; at least `min_rows`.
inline int64_t RowsAhead(int64_t lines_ahead, int64_t lines_per_row, int64_t min_rows) {
  return std::max<int64_t>(min_rows, lines_ahead / std::max<int64_t>(lines_per_row, 1));
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_CACHE_LINES_H_
