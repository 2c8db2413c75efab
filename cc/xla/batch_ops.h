// XLA building blocks of the kernels in cc/xla: the XLA forms of cc/core's CSR batch walk
// (the row of each lookup), lookup-combine and gradient grouping.
//
// XLA compiles for shapes, not values, and cannot fail at run time, so the XLA kernels check
// shapes when they compile and give data the TF kernels would reject a defined, in-bounds
// meaning instead (docs/xla.md, "Limits"): a lookup whose id is outside [0, rows) of its
// table, or that falls in no row of its batch, is skipped, contributing to no activation,
// gradient or update. Every sum runs in the TF kernels' order (lookup order within a row, batch
// then lookup order within an id), which XLA's scatter-add keeps on CPUs.
#ifndef TF_EMBEDDING_CC_XLA_BATCH_OPS_H_
#define TF_EMBEDDING_CC_XLA_BATCH_OPS_H_

#include <cstdint>
#include <vector>

#include "xla/hlo/builder/xla_builder.h"

namespace tf_embedding {

// Inclusive prefix sum of the integer vector `values` of `size` elements.
xla::XlaOp PrefixSum(xla::XlaOp values, int64_t size);

// The rows `indices` (int64 [n]) of `matrix` ([rows, dim], rows >= 1): [n, dim]. Indices
// outside [0, rows) read a clamped row, so callers mask what they read there.
xla::XlaOp GatherRows(xla::XlaOp matrix, xla::XlaOp indices, int64_t dim);

// The elements `indices` of the vector `values` (same clamping as GatherRows).
xla::XlaOp GatherElements(xla::XlaOp values, xla::XlaOp indices);

// How a scatter combines an update with what is already there.
enum class Combine { kAdd, kMin, kReplace };

// `buffer` ([m, dim]) with the rows `updates` ([n, dim]) combined into the rows `indices`
// (int64 [n]); updates at indices outside [0, m) are dropped. Updates are applied in order.
xla::XlaOp ScatterRows(xla::XlaOp buffer, xla::XlaOp indices, xla::XlaOp updates,
                       Combine combine);

// The same for the vector `buffer` ([m]) and the element updates `updates` ([n]).
xla::XlaOp ScatterElements(xla::XlaOp buffer, xla::XlaOp indices, xla::XlaOp updates,
                           Combine combine);

// The output row of each of the `num_ids` lookups of a CSR batch with `num_rows` rows:
// int64 [num_ids], where row r holds lookups [row_splits[r], row_splits[r + 1]). A lookup in no
// row (only in a malformed batch) gets num_rows or more.
xla::XlaOp RowOfLookups(xla::XlaOp row_splits, int64_t num_rows, int64_t num_ids);

// Lookup-combine: the [num_rows, dim] activations of the lookups `ids`, `gains` ([num_ids])
// into output `rows` (RowOfLookups) from `table` ([table_rows, dim]). Skipped lookups add
// nothing; each row is summed from 0 in lookup order, as CombineRows sums it.
xla::XlaOp CombineLookups(xla::XlaOp table, int64_t table_rows, int64_t dim, xla::XlaOp ids,
                          xla::XlaOp gains, int64_t num_ids, xla::XlaOp rows,
                          int64_t num_rows);

// The terms of a table gradient: one gradient row per term, each for one id, in the TF
// kernels' order (batch or list order, then position), which is the order GroupById sums them.
struct GradientTerms {
  xla::XlaOp ids;   // int64 [size]; -1 for a lookup in no row of its batch, which is skipped
  xla::XlaOp rows;  // float [size, dim]
  int64_t size = 0;
};

// One CSR batch of the gradient and sparse-apply ops, with the gradient of its activations.
struct CsrGradientBatch {
  xla::XlaOp row_splits;            // int64 [num_rows + 1]
  xla::XlaOp ids;                   // int64 [num_ids]
  xla::XlaOp gains;                 // float [num_ids]
  xla::XlaOp activation_gradients;  // float [num_rows, dim]
  int64_t num_rows = 0;
  int64_t num_ids = 0;
};

// One term per lookup of the batches: gain * its row's activation gradient.
GradientTerms CsrGradientTerms(xla::XlaBuilder* builder,
                               const std::vector<CsrGradientBatch>& batches, int64_t dim);

// One term per row of the lists (`ids` [sizes[i]], `rows` [sizes[i], dim]).
GradientTerms RowGradientTerms(xla::XlaBuilder* builder, const std::vector<xla::XlaOp>& ids,
                               const std::vector<xla::XlaOp>& rows,
                               const std::vector<int64_t>& sizes, int64_t dim);

// Terms of a table gradient grouped by id, in place of cc/core's sort: group g is the terms of one id, summed at the position of its first
// term, in term order. Positions that start no group hold `vocabulary_size` as id (out of
// range, so scatters into the table skip them) and zeros.
struct IdGroups {
  xla::XlaOp ids;       // int64 [terms]
  xla::XlaOp sums;      // float [terms, dim]
  xla::XlaOp is_first;  // pred [terms]: starts a group
};

// Groups `terms` ([num_terms, dim]) by `ids` (int64 [num_terms]); terms with an id outside
// [0, vocabulary_size) are skipped. Uses an int32 scratch of vocabulary_size elements (the
// first term of each id), which costs less than XLA's comparison sort for any table that fits
// in memory. REQUIRES: 0 < num_terms < 2^31, vocabulary_size >= 1.
IdGroups GroupById(xla::XlaOp ids, xla::XlaOp terms, int64_t num_terms, int64_t dim,
                   int64_t vocabulary_size);

// The groups moved to the front in order of first occurrence: [num_terms] ids (the padding
// holds -1, -2, ...: distinct, negative, so every consumer skips or drops them) and
// [num_terms, dim] sums (zeros in the padding).
struct CompactGroups {
  xla::XlaOp ids;
  xla::XlaOp sums;
};
CompactGroups Compact(const IdGroups& groups, int64_t num_terms, int64_t dim);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_BATCH_OPS_H_
