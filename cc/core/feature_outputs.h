// How a table's stacked activations become its features' outputs (TfeFeatureOutputs, in both
// runtimes): each feature's row count checked against its output shape, once, here.
#ifndef TF_EMBEDDING_CC_CORE_FEATURE_OUTPUTS_H_
#define TF_EMBEDDING_CC_CORE_FEATURE_OUTPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/status.h"

namespace tf_embedding {

// The features' output shapes (each [..., dim]) and what a batch that does not fill them is told.
struct FeatureOutputsSpec {
  std::string table_name;
  std::vector<std::vector<int64_t>> output_shapes;
  // A smaller batch fits when each feature's rows are at most its shape's, whole samples
  // (a multiple of the rows per sample, the product of the shape's middle dimensions). With
  // partial, a shape's first dimension may be -1 (unknown): any number of whole samples fits.
  bool partial = false;
  // The error of a batch whose rows do not fit, to which the rows per feature are appended.
  std::string message;
};

// Each feature's first output dimension for its `row_counts` rows (one count per shape) of
// activations [activation_rows, activation_dim]: the shape's own, or with `partial` the count's
// samples (the shape's own if its samples have no rows). Fails with spec.message when the rows
// do not fit the shapes, and with a table error when the counts do not describe the activations.
Status FeatureOutputFirstDims(const FeatureOutputsSpec& spec, const int64_t* row_counts,
                              int64_t num_counts, int64_t activation_rows, int64_t activation_dim,
                              std::vector<int64_t>* first_dims);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_FEATURE_OUTPUTS_H_
