#include "cc/core/missing_lookups.h"

namespace tf_embedding {

void DropMissingLookups(const int64_t* row_splits, int64_t num_splits, const int64_t* rows,
                        const float* gains, int64_t lookups, int64_t* kept_splits,
                        int64_t* kept_rows, float* kept_gains) {
  int64_t kept = 0, split = 0;
  for (int64_t i = 0; i < lookups; ++i) {
    while (split < num_splits && row_splits[split] == i) kept_splits[split++] = kept;
    if (rows[i] >= 0) {
      kept_rows[kept] = rows[i];
      kept_gains[kept] = gains[i];
      ++kept;
    }
  }
  while (split < num_splits) kept_splits[split++] = kept;
}

}  // namespace tf_embedding
