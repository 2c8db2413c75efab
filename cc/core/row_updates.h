// The row loops of the sparse-apply kernels: an optimizer rule (cc/core/optimizers.h) over the
// rows a batch touches, each with its gradient summed from its group (gradient_aggregation.h),
// or over every row (non-lazy Adam).
//
// Once the rows are prefetched these loops are bound by arithmetic (a square root and a division
// per element for most rules), so, like the lookup's combine, they are compiled once per vector
// ISA and picked at run time (simd_dispatch.h). Every variant does the same IEEE operations in
// the same order (the build disables FMA contraction, and Sqrt is correctly rounded at every
// width), so the updated rows are bit-identical whichever ISA runs.
#ifndef TF_EMBEDDING_CC_CORE_ROW_UPDATES_H_
#define TF_EMBEDDING_CC_CORE_ROW_UPDATES_H_

#include <algorithm>
#include <array>
#include <cstdint>

#include "cc/core/cache_lines.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/optimizers.h"
#include "cc/core/simd_dispatch.h"

namespace tf_embedding {

// Applies one optimizer step to a row. `grad` is the summed gradient of the row; `slots` point
// at the row in each slot variable. kDim > 0 fixes the dimension at compile time; kApplyCommon
// false skips the knobs of `common`, which must then AreIdentity() (UpdateElement).
template <typename Rule, int64_t kDim = 0, bool kApplyCommon = true>
__attribute__((always_inline)) inline void UpdateRow(
    const Rule& rule, const CommonUpdateParams& common, float lr, const float* grad, int64_t dim,
    float* w, const std::array<float*, Rule::kNumSlots>& slots) {
  const int64_t d = kDim > 0 ? kDim : dim;
  const float decay = common.WeightDecay(lr);
  // Local copies: the row stores below cannot alias them, so GCC keeps them in registers
  // instead of reloading them per element (which stopped it vectorising some rules).
  const CommonUpdateParams limits = common;
  const Rule local_rule = rule;
  for (int64_t j = 0; j < d; ++j) {
    float wj = w[j];
    std::array<float, Rule::kNumSlots> s;
    for (int k = 0; k < Rule::kNumSlots; ++k) s[k] = slots[k][j];
    UpdateElement<kApplyCommon>(local_rule, limits, lr, decay, grad[j], wj, s);
    for (int k = 0; k < Rule::kNumSlots; ++k) slots[k][j] = s[k];
    w[j] = wj;
  }
}

// The same row of every slot: slot pointers advanced by `offset` floats.
template <size_t kNumSlots>
std::array<float*, kNumSlots> SlotRows(const std::array<float*, kNumSlots>& slots,
                                       int64_t offset) {
  std::array<float*, kNumSlots> rows;
  for (size_t k = 0; k < kNumSlots; ++k) rows[k] = slots[k] + offset;
  return rows;
}

// Prefetches, for writing, the row at `offset` of the table and of every slot: touched rows are
// scattered over tables far larger than the caches.
template <size_t kNumSlots>
__attribute__((always_inline)) inline void PrefetchRows(const float* table,
                                                        const std::array<float*, kNumSlots>& slots,
                                                        int64_t offset, int64_t dim) {
  for (int64_t j = 0; j < dim; j += kFloatsPerCacheLine) {
    __builtin_prefetch(table + offset + j, 1);
    for (size_t k = 0; k < kNumSlots; ++k) __builtin_prefetch(slots[k] + offset + j, 1);
  }
}

namespace row_updates_internal {

// Rows are prefetched this many 64-byte lines (of the table and all slots together) ahead of the
// row being updated, enough misses in flight to cover a memory latency with the rows in between.
constexpr int64_t kPrefetchLinesAhead = 64;

inline int64_t PrefetchDistance(int64_t dim, int num_slots) {
  return RowsAhead(kPrefetchLinesAhead, CacheLinesPerRow(dim) * (1 + num_slots), /*min_rows=*/2);
}

template <typename Rule, int64_t kDim, bool kApplyCommon>
__attribute__((always_inline)) inline void UpdateTouchedRowsBody(
    const Rule& rule, const CommonUpdateParams& common, float lr, const GradientGroups& groups,
    int64_t dim, int64_t u_begin, int64_t u_end, float* table,
    const std::array<float*, Rule::kNumSlots>& slots, float* scratch) {
  const int64_t d = kDim > 0 ? kDim : dim;
  const int64_t distance = PrefetchDistance(d, Rule::kNumSlots);
  for (int64_t u = u_begin; u < u_end; ++u) {
    if (u + distance < u_end) {
      PrefetchRows(table, slots, groups.unique_ids[u + distance] * d, d);
    }
    // With the dimension fixed, the gradient is a local array the compiler can keep in
    // registers from its sum to the update; through `scratch` it would be stored per term.
    float registers[kDim > 0 ? kDim : 1];
    float* gradient = kDim > 0 ? registers : scratch;
    SumGroupInline<kDim>(groups, u, d, gradient);
    const int64_t offset = groups.unique_ids[u] * d;
    UpdateRow<Rule, kDim, kApplyCommon>(rule, common, lr, gradient, d, table + offset,
                                        SlotRows(slots, offset));
  }
}

template <typename Rule, bool kApplyCommon>
__attribute__((always_inline)) inline void UpdateAllRowsBody(
    const Rule& rule, const CommonUpdateParams& common, float lr, const GradientGroups& groups,
    int64_t dim, int64_t row_begin, int64_t row_end, float* table,
    const std::array<float*, Rule::kNumSlots>& slots, float* scratch) {
  const auto& ids = groups.unique_ids;
  int64_t u = std::lower_bound(ids.begin(), ids.end(), row_begin) - ids.begin();
  for (int64_t row = row_begin; row < row_end; ++row) {
    if (u < groups.num_unique() && ids[u] == row) {
      SumGroupInline<0>(groups, u++, dim, scratch);
    } else {
      std::fill(scratch, scratch + dim, 0.0f);
    }
    const int64_t offset = row * dim;
    UpdateRow<Rule, 0, kApplyCommon>(rule, common, lr, scratch, dim, table + offset,
                                     SlotRows(slots, offset));
  }
}

// Each loop's entry points for one ISA: the bodies above inline into functions compiled with
// that ISA's target attribute (none for the baseline). Dimension 64, the most common embedding
// width, is fixed at compile time (its gradient sum then stays in registers); other dimensions
// take the general loop. Both loops also come without the shared knobs, for the common case of
// none (kApplyCommon).
#define TF_EMBEDDING_ROW_UPDATE_LOOPS(Suffix, Target)                                           \
  template <typename Rule, int64_t kDim, bool kApplyCommon>                                     \
  Target void UpdateTouchedRows##Suffix(                                                        \
      const Rule& rule, const CommonUpdateParams& common, float lr,                             \
      const GradientGroups& groups, int64_t dim, int64_t u_begin, int64_t u_end, float* table,  \
      const std::array<float*, Rule::kNumSlots>& slots, float* scratch) {                       \
    UpdateTouchedRowsBody<Rule, kDim, kApplyCommon>(rule, common, lr, groups, dim, u_begin,     \
                                                    u_end, table, slots, scratch);              \
  }                                                                                             \
  template <typename Rule, bool kApplyCommon>                                                   \
  Target void UpdateAllRows##Suffix(                                                            \
      const Rule& rule, const CommonUpdateParams& common, float lr,                             \
      const GradientGroups& groups, int64_t dim, int64_t row_begin, int64_t row_end,            \
      float* table, const std::array<float*, Rule::kNumSlots>& slots, float* scratch) {         \
    UpdateAllRowsBody<Rule, kApplyCommon>(rule, common, lr, groups, dim, row_begin, row_end,    \
                                          table, slots, scratch);                               \
  }

TF_EMBEDDING_ROW_UPDATE_LOOPS(Baseline, )
#if defined(TF_EMBEDDING_X86_DISPATCH)
TF_EMBEDDING_ROW_UPDATE_LOOPS(Avx2, TF_EMBEDDING_TARGET_AVX2)
TF_EMBEDDING_ROW_UPDATE_LOOPS(Avx512, TF_EMBEDDING_TARGET_AVX512)
#endif
#undef TF_EMBEDDING_ROW_UPDATE_LOOPS

template <typename Rule, int64_t kDim, bool kApplyCommon>
void UpdateTouchedRowsForIsa(SimdIsa isa, const Rule& rule, const CommonUpdateParams& common,
                             float lr, const GradientGroups& groups, int64_t dim, int64_t u_begin,
                             int64_t u_end, float* table,
                             const std::array<float*, Rule::kNumSlots>& slots, float* scratch) {
#if defined(TF_EMBEDDING_X86_DISPATCH)
  switch (isa) {
    case SimdIsa::kAvx512:
      return UpdateTouchedRowsAvx512<Rule, kDim, kApplyCommon>(rule, common, lr, groups, dim,
                                                               u_begin, u_end, table, slots,
                                                               scratch);
    case SimdIsa::kAvx2:
      return UpdateTouchedRowsAvx2<Rule, kDim, kApplyCommon>(rule, common, lr, groups, dim,
                                                             u_begin, u_end, table, slots,
                                                             scratch);
    case SimdIsa::kBaseline:
      break;
  }
#else
  (void)isa;
#endif
  UpdateTouchedRowsBaseline<Rule, kDim, kApplyCommon>(rule, common, lr, groups, dim, u_begin,
                                                      u_end, table, slots, scratch);
}

template <typename Rule, bool kApplyCommon>
void UpdateTouchedRowsForCommon(SimdIsa isa, const Rule& rule, const CommonUpdateParams& common,
                                float lr, const GradientGroups& groups, int64_t dim,
                                int64_t u_begin, int64_t u_end, float* table,
                                const std::array<float*, Rule::kNumSlots>& slots,
                                float* scratch) {
  if (dim == 64) {
    return UpdateTouchedRowsForIsa<Rule, 64, kApplyCommon>(isa, rule, common, lr, groups, dim,
                                                           u_begin, u_end, table, slots, scratch);
  }
  UpdateTouchedRowsForIsa<Rule, 0, kApplyCommon>(isa, rule, common, lr, groups, dim, u_begin,
                                                 u_end, table, slots, scratch);
}

}  // namespace row_updates_internal

// Updates the rows of groups [u_begin, u_end) of `groups` (each row once, with its summed
// gradient), with the loop compiled for `isa`. `table` and every slot are [rows, dim]; `scratch`
// holds dim floats. Disjoint group ranges touch disjoint rows, so callers may run them
// concurrently.
template <typename Rule>
void UpdateTouchedRowsWithIsa(SimdIsa isa, const Rule& rule, const CommonUpdateParams& common,
                              float lr, const GradientGroups& groups, int64_t dim,
                              int64_t u_begin, int64_t u_end, float* table,
                              const std::array<float*, Rule::kNumSlots>& slots, float* scratch) {
  WithCommonKnobs(common, [&](auto apply_common) {
    row_updates_internal::UpdateTouchedRowsForCommon<Rule, decltype(apply_common)::value>(
        isa, rule, common, lr, groups, dim, u_begin, u_end, table, slots, scratch);
  });
}

// Updates every row in [row_begin, row_end): touched rows with their summed gradient, the
// others with a zero gradient (non-lazy Adam). Arguments as UpdateTouchedRowsWithIsa's.
template <typename Rule>
void UpdateAllRowsWithIsa(SimdIsa isa, const Rule& rule, const CommonUpdateParams& common,
                          float lr, const GradientGroups& groups, int64_t dim, int64_t row_begin,
                          int64_t row_end, float* table,
                          const std::array<float*, Rule::kNumSlots>& slots, float* scratch) {
  using namespace row_updates_internal;  // NOLINT(build/namespaces): the per-ISA loops
  WithCommonKnobs(common, [&](auto apply_common) {
    constexpr bool kApplyCommon = decltype(apply_common)::value;
#if defined(TF_EMBEDDING_X86_DISPATCH)
    switch (isa) {
      case SimdIsa::kAvx512:
        return UpdateAllRowsAvx512<Rule, kApplyCommon>(rule, common, lr, groups, dim, row_begin,
                                                       row_end, table, slots, scratch);
      case SimdIsa::kAvx2:
        return UpdateAllRowsAvx2<Rule, kApplyCommon>(rule, common, lr, groups, dim, row_begin,
                                                     row_end, table, slots, scratch);
      case SimdIsa::kBaseline:
        break;
    }
#else
    (void)isa;
#endif
    UpdateAllRowsBaseline<Rule, kApplyCommon>(rule, common, lr, groups, dim, row_begin, row_end,
                                              table, slots, scratch);
  });
}

// The two loops with the ISA the kernels use (SelectedSimdIsa()).
template <typename Rule>
void UpdateTouchedRows(const Rule& rule, const CommonUpdateParams& common, float lr,
                       const GradientGroups& groups, int64_t dim, int64_t u_begin, int64_t u_end,
                       float* table, const std::array<float*, Rule::kNumSlots>& slots,
                       float* scratch) {
  UpdateTouchedRowsWithIsa(SelectedSimdIsa(), rule, common, lr, groups, dim, u_begin, u_end,
                           table, slots, scratch);
}

template <typename Rule>
void UpdateAllRows(const Rule& rule, const CommonUpdateParams& common, float lr,
                   const GradientGroups& groups, int64_t dim, int64_t row_begin, int64_t row_end,
                   float* table, const std::array<float*, Rule::kNumSlots>& slots,
                   float* scratch) {
  UpdateAllRowsWithIsa(SelectedSimdIsa(), rule, common, lr, groups, dim, row_begin, row_end,
                       table, slots, scratch);
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_ROW_UPDATES_H_
