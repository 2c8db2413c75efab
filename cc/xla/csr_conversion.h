// The XLA form of TfeFeaturesToCsr (cc/core/csr_conversion.h), so that a Keras model or a
// TPUEmbeddingV0 step that converts its features inside a jit_compile function compiles whole.
//
// The TF kernel drops pruned lookups and sequence positions past max_sequence_length, which
// makes the batch's size depend on the ids. XLA needs sizes fixed by the input shapes, so this
// keeps every input lookup in the batch and gives the dropped ones id -1, which the XLA lookup,
// gradient and apply kernels skip (cc/xla/batch_ops.h): the activations and updates are those
// of the TF kernel's batch. Data the TF kernel rejects (ids outside [0, vocabulary_size), sparse
// indices outside dense_shape, malformed ragged row_splits) cannot fail a compiled function;
// those lookups get id -1 too. The kernel (kernels.cc) checks shapes with the TF kernel's
// messages (FeatureLayoutOf) before calling this; a sparse feature's dense_shape must be known
// when compiling, as XLA needs the row count it decides.
//
// Lookups are put in row order by an XLA sort only when they are not already (unsorted sparse
// indices, malformed input): canonical inputs, the usual case, skip the sort at run time.
#ifndef TF_EMBEDDING_CC_XLA_CSR_CONVERSION_H_
#define TF_EMBEDDING_CC_XLA_CSR_CONVERSION_H_

#include <cstdint>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tf_embedding {

// One feature's inputs, whose shapes passed FeatureLayoutOf.
struct XlaFeatureInput {
  xla::XlaOp ids;  // int64 [num_ids], flattened
  int64_t num_ids = 0;
  xla::XlaOp row_info;  // the sparse indices [num_ids, rank] or the ragged row_splits
  int64_t row_info_size = 0;
  std::vector<int64_t> dense_shape;  // sparse features only
  xla::XlaOp weights;  // float [num_ids], if the feature has weights
  FeatureLayout layout;
};

// The op's outputs.
struct XlaCsrBatch {
  xla::XlaOp row_splits;
  xla::XlaOp ids;
  xla::XlaOp gains;
  xla::XlaOp feature_row_counts;
};

XlaCsrBatch ConvertFeatures(xla::XlaBuilder* builder, const TableSpec& table,
                            const std::vector<FeatureSpec>& specs,
                            const std::vector<XlaFeatureInput>& features);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_CSR_CONVERSION_H_
