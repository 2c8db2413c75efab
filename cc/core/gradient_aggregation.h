// Backward pass of the lookup: the table gradient summed per unique id, in a fixed order so that
// results are bit-identical whatever the thread count. Two inputs group into the same form: N CSR
// batches with their activation gradients, and N lists of unique ids with gradient rows already
// summed per list (the sharded engine's per-replica sums).
#ifndef TF_EMBEDDING_CC_CORE_GRADIENT_AGGREGATION_H_
#define TF_EMBEDDING_CC_CORE_GRADIENT_AGGREGATION_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cc/core/cache_lines.h"
#include "cc/core/csr_batch.h"
#include "cc/core/status.h"

namespace tf_embedding {

// One CSR batch with the gradient of the loss with respect to its activations.
struct GradientBatch {
  CsrBatch csr;
  const float* activation_gradients = nullptr;  // [csr.num_rows(), dim], row-major
};

// One list of gradient rows, each already summed for its id: ids strictly ascending (checked by
// GroupSortedRows), rows [num_ids, dim], row-major.
struct SortedRows {
  const int64_t* ids = nullptr;
  int64_t num_ids = 0;
  const float* rows = nullptr;
};

// The terms of a table gradient grouped by id: ids ascending, and within an id the terms in input
// order (batch or list order, then position). A term is gain * gradient row: a lookup of a CSR
// batch with its activation-gradient row, or a SortedRows row with gain 1. Group u is entries
// [starts[u], starts[u + 1]) of `gains` and `gradient_rows`.
//
// Grouping fills an existing object: it keeps the capacity of every buffer, its own scratch
// included, so a caller that groups batch after batch into one object (the kernels lease theirs
// from a pool, cc/kernels/gradient_groups_pool.h) allocates once instead of once per batch.
// Fresh buffers of a few MiB per batch cost more than the grouping's own work: the kernel
// zero-fills every page on first touch.
struct GradientGroups {
  std::vector<int64_t> unique_ids;
  std::vector<int64_t> starts;
  std::vector<float> gains;
  std::vector<const float*> gradient_rows;
  // The largest id and where it first occurs (input max_id_batch, element max_id_index of the
  // input named ids_input), so the caller can check the table's bound later, e.g. once it holds
  // the table's lock and knows its row count.
  int64_t max_id = -1;
  int64_t max_id_batch = 0;
  int64_t max_id_index = 0;
  const char* ids_input = nullptr;

  // GroupLookupsById's scratch: each lookup's term by input position (with every gain 1, only
  // each row's gradient row, by row), and the sort's keys, 64 or 32 bits wide.
  std::vector<float> gain_at;
  std::vector<const float*> row_at;
  std::vector<uint64_t> sort_keys;
  std::vector<uint64_t> sort_scratch;
  std::vector<uint32_t> sort_keys32;
  std::vector<uint32_t> sort_scratch32;

  int64_t num_unique() const { return static_cast<int64_t>(unique_ids.size()); }

  // Empties the groups (not the capacity) for a grouping whose ids input is `ids_input_name`.
  void Reset(const char* ids_input_name);
};

// Validates each batch (ValidateCsrBatch with an unknown vocabulary: ids must be non-negative)
// and groups the lookups by id with a stable radix sort, linear in the number of lookups
// whatever the vocabulary size. Errors start with the batch they concern ("batch <b>: ").
Status GroupLookupsById(const std::vector<GradientBatch>& batches, int64_t dim,
                        GradientGroups* groups);

// Validates each list (ids non-negative and strictly ascending) and merges the lists by id, in
// one pass over their heads: O(entries x lists), no sort. Errors start with the list they
// concern ("batch <b>: ") and call the ids "unique_ids", the name of the op's input.
Status GroupSortedRows(const std::vector<SortedRows>& lists, int64_t dim,
                       GradientGroups* groups);

// Fails, saying where, when the largest id is not below vocabulary_size.
Status CheckIdsBelow(const GradientGroups& groups, int64_t vocabulary_size);

// out[0:dim] = sum over the terms of group u of gain * gradient row, accumulated in float in the
// group's order. One thread per group makes the result independent of threading.
void SumGroup(const GradientGroups& groups, int64_t u, int64_t dim, float* out);

// How many terms ahead SumGroupInline prefetches gradient rows, which it reads in id order, i.e.
// at random, from an array that usually exceeds L2.
constexpr int64_t kGradientRowPrefetchDistance = 8;

// SumGroup's body, for loops that inline it into code compiled for a wider ISA
// (cc/core/row_updates.h). kDim > 0 fixes the dimension at compile time so the row loops unroll
// and vectorise fully (and a caller's local `out` can stay in registers); kDim == 0 handles any
// dimension.
template <int64_t kDim>
__attribute__((always_inline)) inline void SumGroupInline(const GradientGroups& groups, int64_t u,
                                                          int64_t dim, float* __restrict out) {
  const int64_t d = kDim > 0 ? kDim : dim;
  const int64_t total = static_cast<int64_t>(groups.gradient_rows.size());
  const int64_t begin = groups.starts[u], end = groups.starts[u + 1];
  // Gradient rows are read in id order, i.e. at random: each is prefetched whole, some terms
  // ahead.
  const auto prefetch_ahead = [&](int64_t i) {
    if (i + kGradientRowPrefetchDistance < total) {
      const float* ahead = groups.gradient_rows[i + kGradientRowPrefetchDistance];
      for (int64_t j = 0; j < d; j += kFloatsPerCacheLine) __builtin_prefetch(ahead + j);
    }
  };
  if (begin == end) {
    std::fill(out, out + d, 0.0f);
    return;
  }
  // The first term sets the sum to 0 + term: the value of summing from zero, without first
  // storing the zeros. A gain of 1, every gain of the sum combiner without weights, adds the row
  // without the multiplication (1 * x == x): the branch costs less than the products.
  prefetch_ahead(begin);
  const float first_gain = groups.gains[begin];
  const float* __restrict first_row = groups.gradient_rows[begin];
  if (first_gain == 1.0f) {
    for (int64_t j = 0; j < d; ++j) out[j] = 0.0f + first_row[j];
  } else {
    for (int64_t j = 0; j < d; ++j) out[j] = 0.0f + first_gain * first_row[j];
  }
  for (int64_t i = begin + 1; i < end; ++i) {
    prefetch_ahead(i);
    const float gain = groups.gains[i];
    const float* __restrict row = groups.gradient_rows[i];
    if (gain == 1.0f) {
      for (int64_t j = 0; j < d; ++j) out[j] += row[j];
    } else {
      for (int64_t j = 0; j < d; ++j) out[j] += gain * row[j];
    }
  }
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_GRADIENT_AGGREGATION_H_
