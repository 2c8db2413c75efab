// Whole-array checks of the inputs every kernel validates before it indexes with them (ids
// below the vocabulary size, sparse indices in bounds and in row order), as loops without
// branches or stores that the compiler vectorises for each ISA: they run at memory speed on
// the common valid input, and callers walk the array again only to name a bad element.
#ifndef TF_EMBEDDING_CC_CORE_RANGE_CHECKS_H_
#define TF_EMBEDDING_CC_CORE_RANGE_CHECKS_H_

#include <cstdint>

namespace tf_embedding {

// Whether every value is in [0, bound) (bound <= 2^63).
bool AllInRange(const int64_t* values, int64_t size, uint64_t bound);

// Whether the lookups of a rank-2 SparseTensor of `nnz` values are all valid and in row order:
// indices (row-major [nnz, 2]) in [0, rows) x [0, columns), rows non-decreasing, and ids in
// [0, vocabulary_size). Id is int32_t or int64_t (range_checks.cc instantiates both).
template <typename Id>
bool SparseLookupsValidInRowOrder(const int64_t* indices, const Id* ids, int64_t nnz,
                                  uint64_t rows, uint64_t columns, uint64_t vocabulary_size);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_RANGE_CHECKS_H_
