// Dropping the lookups of a dynamic table's keys without a row from its CSR batch
// (TfeDropMissingLookups): they read a zero row and get no gradient, while the combiners' gains,
// fixed at conversion, still count them.
#ifndef TF_EMBEDDING_CC_CORE_MISSING_LOOKUPS_H_
#define TF_EMBEDDING_CC_CORE_MISSING_LOOKUPS_H_

#include <cstdint>

namespace tf_embedding {

// A CSR batch whose lookups' ids are table rows, -1 for a key without one, with those lookups
// dropped: kept_splits[r] = the kept lookups before row_splits[r], then the kept lookups' rows
// and gains in order (kept_rows and kept_gains hold one per row >= 0). REQUIRES: row_splits
// [num_splits] valid for `lookups` values (ValidateRowSplits).
void DropMissingLookups(const int64_t* row_splits, int64_t num_splits, const int64_t* rows,
                        const float* gains, int64_t lookups, int64_t* kept_splits,
                        int64_t* kept_rows, float* kept_gains);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_MISSING_LOOKUPS_H_
