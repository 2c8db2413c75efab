#include "cc/core/feature_outputs.h"

#include <algorithm>

#include "cc/core/errors.h"

namespace tf_embedding {
namespace {

// "[a, b]"
std::string ShowCounts(const int64_t* values, int64_t size) {
  std::string out = "[";
  for (int64_t i = 0; i < size; ++i) out += (i > 0 ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

}  // namespace

Status FeatureOutputFirstDims(const FeatureOutputsSpec& spec, const int64_t* row_counts,
                              int64_t num_counts, int64_t activation_rows, int64_t activation_dim,
                              std::vector<int64_t>* first_dims) {
  const int64_t num_features = static_cast<int64_t>(spec.output_shapes.size());
  if (num_counts != num_features) {
    return TableError(spec.table_name, "feature_row_counts has ", num_counts,
                      " entries for ", num_features, " features");
  }
  first_dims->clear();
  int64_t total_rows = 0;
  bool fits = true;
  for (int64_t f = 0; f < num_features; ++f) {
    const std::vector<int64_t>& shape = spec.output_shapes[f];
    if (shape.size() < 2 || shape.back() != activation_dim) {
      return TableError(spec.table_name, "output shape ", f, " has ", shape.size(),
                        " dimensions, the last of them not the activations' ", activation_dim);
    }
    int64_t sample_rows = 1;
    for (size_t d = 1; d + 1 < shape.size(); ++d) sample_rows *= shape[d];
    const int64_t rows = row_counts[f];
    if (rows < 0) {
      return TableError(spec.table_name, ElementName("feature_row_counts", f), " = ", rows,
                        " is negative");
    }
    // An unknown batch dimension (-1: the batch size was unknown when the shapes were fixed)
    // bounds no batch, and only whole samples of some rows tell how many there are.
    const bool unbounded = shape[0] < 0;
    if (unbounded && !(spec.partial && sample_rows > 0)) {
      return TableError(spec.table_name, "output shape ", f,
                        " has an unknown batch dimension, which only a partial batch of samples"
                        " with rows may have");
    }
    const int64_t expected_rows = shape[0] * sample_rows;
    if (spec.partial && sample_rows > 0) {
      fits &= (unbounded || rows <= expected_rows) && rows % sample_rows == 0;
      first_dims->push_back(rows / sample_rows);
    } else {
      // A full batch, or one whose samples have no rows (a 0 in the shape's middle), which
      // tells no batch size: the shape's own.
      fits &= rows == expected_rows;
      first_dims->push_back(shape[0]);
    }
    // Each term at most activation_rows + 1, so the sum cannot overflow and still tells a
    // mismatch.
    total_rows += std::min(rows, activation_rows + 1);
  }
  if (!fits) {
    return Status::Error(spec.message + " Rows per feature: " +
                         ShowCounts(row_counts, num_counts) + ".");
  }
  if (total_rows != activation_rows) {
    return TableError(spec.table_name, "the rows per feature ", ShowCounts(row_counts, num_counts),
                      " do not add up to the activations' ", activation_rows, " rows");
  }
  return Status();
}

}  // namespace tf_embedding
