#include "cc/core/range_checks.h"

#include "cc/core/simd_dispatch.h"

namespace tf_embedding {
namespace {

// The loops accumulate "some element failed" with bitwise ORs of comparisons, so they have no
// early exit, which would keep the compiler from vectorising them. Unsigned comparison folds a
// lower bound of 0 and an upper bound into one test.

__attribute__((always_inline)) inline bool AllInRangeImpl(const int64_t* __restrict values,
                                                          int64_t size, uint64_t bound) {
  uint64_t outside = 0;
  for (int64_t i = 0; i < size; ++i) outside |= static_cast<uint64_t>(values[i]) >= bound;
  return outside == 0;
}

template <typename Id>
__attribute__((always_inline)) inline bool SparseLookupsImpl(
    const int64_t* __restrict indices, const Id* __restrict ids, int64_t nnz, uint64_t rows,
    uint64_t columns, uint64_t vocabulary_size) {
  if (nnz == 0) return true;
  // Element 0 has no predecessor to be in order with; the loop compares each row with the
  // previous one.
  uint64_t bad = static_cast<uint64_t>(indices[0]) >= rows;
  for (int64_t i = 1; i < nnz; ++i) bad |= indices[2 * i] < indices[2 * i - 2];
  for (int64_t i = 0; i < nnz; ++i) {
    bad |= (static_cast<uint64_t>(indices[2 * i + 1]) >= columns) |
           (static_cast<uint64_t>(static_cast<int64_t>(ids[i])) >= vocabulary_size);
  }
  // Rows are non-decreasing and the first is >= 0, so the last bounds them all.
  bad |= static_cast<uint64_t>(indices[2 * nnz - 2]) >= rows;
  return bad == 0;
}

#if defined(TF_EMBEDDING_X86_DISPATCH)
TF_EMBEDDING_TARGET_AVX2 bool AllInRangeAvx2(const int64_t* values, int64_t size,
                                             uint64_t bound) {
  return AllInRangeImpl(values, size, bound);
}
TF_EMBEDDING_TARGET_AVX512 bool AllInRangeAvx512(const int64_t* values, int64_t size,
                                                 uint64_t bound) {
  return AllInRangeImpl(values, size, bound);
}
template <typename Id>
TF_EMBEDDING_TARGET_AVX2 bool SparseLookupsAvx2(const int64_t* indices, const Id* ids,
                                                int64_t nnz, uint64_t rows, uint64_t columns,
                                                uint64_t vocabulary_size) {
  return SparseLookupsImpl(indices, ids, nnz, rows, columns, vocabulary_size);
}
template <typename Id>
TF_EMBEDDING_TARGET_AVX512 bool SparseLookupsAvx512(const int64_t* indices, const Id* ids,
                                                    int64_t nnz, uint64_t rows,
                                                    uint64_t columns, uint64_t vocabulary_size) {
  return SparseLookupsImpl(indices, ids, nnz, rows, columns, vocabulary_size);
}
#endif

}  // namespace

bool AllInRange(const int64_t* values, int64_t size, uint64_t bound) {
#if defined(TF_EMBEDDING_X86_DISPATCH)
  switch (SelectedSimdIsa()) {
    case SimdIsa::kAvx512:
      return AllInRangeAvx512(values, size, bound);
    case SimdIsa::kAvx2:
      return AllInRangeAvx2(values, size, bound);
    case SimdIsa::kBaseline:
      break;
  }
#endif
  return AllInRangeImpl(values, size, bound);
}

template <typename Id>
bool SparseLookupsValidInRowOrder(const int64_t* indices, const Id* ids, int64_t nnz,
                                  uint64_t rows, uint64_t columns, uint64_t vocabulary_size) {
#if defined(TF_EMBEDDING_X86_DISPATCH)
  switch (SelectedSimdIsa()) {
    case SimdIsa::kAvx512:
      return SparseLookupsAvx512(indices, ids, nnz, rows, columns, vocabulary_size);
    case SimdIsa::kAvx2:
      return SparseLookupsAvx2(indices, ids, nnz, rows, columns, vocabulary_size);
    case SimdIsa::kBaseline:
      break;
  }
#endif
  return SparseLookupsImpl(indices, ids, nnz, rows, columns, vocabulary_size);
}

template bool SparseLookupsValidInRowOrder<int32_t>(const int64_t*, const int32_t*, int64_t,
                                                    uint64_t, uint64_t, uint64_t);
template bool SparseLookupsValidInRowOrder<int64_t>(const int64_t*, const int64_t*, int64_t,
                                                    uint64_t, uint64_t, uint64_t);

}  // namespace tf_embedding
