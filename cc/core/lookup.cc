#include "cc/core/lookup.h"

#include "cc/core/combine_row.h"
#include "cc/core/isa_dispatch.h"

namespace tf_embedding {
namespace {

// CombineRows' loop over its rows (isa_dispatch.h). kUnitGains: the batch has no gains (all 1).
template <bool kUnitGains>
struct CombineRowsKernel {
  template <int64_t kDim>
  __attribute__((always_inline)) static void Run(const CsrBatch* batch, const float* table,
                                                 int64_t dim, int64_t row_begin,
                                                 int64_t row_end, float* activations) {
    const int64_t d = kDim > 0 ? kDim : dim;
    const int64_t* row_splits = batch->row_splits;
    const float* gains = batch->gains;
    const RowPrefetcher<kDim> prefetcher(batch->ids, table, d, row_splits[row_end]);
    prefetcher.Start(row_splits[row_begin]);
    for (int64_t r = row_begin; r < row_end; ++r) {
      CombineRow<kDim, kUnitGains>(
          batch->ids, row_splits[r], row_splits[r + 1], [gains](int64_t k) { return gains[k]; },
          table, d, prefetcher, activations + r * d);
    }
  }
};

}  // namespace

void CombineRows(const CsrBatch& batch, const float* table, int64_t dim, int64_t row_begin,
                 int64_t row_end, float* activations) {
  CombineRowsWithIsa(SelectedSimdIsa(), batch, table, dim, row_begin, row_end, activations);
}

void CombineRowsWithIsa(SimdIsa isa, const CsrBatch& batch, const float* table, int64_t dim,
                        int64_t row_begin, int64_t row_end, float* activations) {
  if (batch.gains == nullptr) {
    return RunForIsaAndDim<CombineRowsKernel<true>>(isa, dim, &batch, table, dim, row_begin,
                                                    row_end, activations);
  }
  RunForIsaAndDim<CombineRowsKernel<false>>(isa, dim, &batch, table, dim, row_begin, row_end,
                                            activations);
}

}  // namespace tf_embedding
