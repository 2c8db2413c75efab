// The main job's TSV reader (tf_embedding/job/data/criteo.py): a batch of lines parsed in one
// op, where the same rules written as TensorFlow string ops cost ~6 µs of CPU a line (a regex per
// cell, string copies per column), more than a training step's share of the line.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_embedding {
namespace {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TfeDecodeTsv")
    .Input("lines: string")
    .Output("label: float")
    .Output("dense: float")
    .Output("valid: bool")
    .Output("ids: num_features * int64")
    .Output("row_splits: num_features * int64")
    .Output("weights: num_weighted * float")
    .Attr("num_dense: int >= 0")
    .Attr("num_features: int >= 0")
    .Attr("num_weighted: int >= 0")
    .Attr("feature_names: list(string)")
    .Attr("string_ids: list(bool)")
    .Attr("weighted: list(bool)")
    .Attr("vocabulary_sizes: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle lines;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &lines));
      const auto rows = c->Dim(lines, 0);
      int64_t num_dense = 0;
      int64_t num_features = 0;
      int64_t num_weighted = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("num_dense", &num_dense));
      TF_RETURN_IF_ERROR(c->GetAttr("num_features", &num_features));
      TF_RETURN_IF_ERROR(c->GetAttr("num_weighted", &num_weighted));
      tensorflow::shape_inference::DimensionHandle splits;
      TF_RETURN_IF_ERROR(c->Add(rows, 1, &splits));
      c->set_output(0, c->Vector(rows));
      c->set_output(1, c->Matrix(rows, num_dense));
      c->set_output(2, c->Vector(rows));
      for (int64_t f = 0; f < num_features; ++f) {
        c->set_output(3 + f, c->Vector(InferenceContext::kUnknownDim));
        c->set_output(3 + num_features + f, c->Vector(splits));
      }
      for (int64_t w = 0; w < num_weighted; ++w) {
        c->set_output(3 + 2 * num_features + w, c->Vector(InferenceContext::kUnknownDim));
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
Parses labeled TSV lines `label \t dense_1 .. dense_D \t cat_1 .. cat_F` by the rules of
tf_embedding/job/data/criteo.py's `decode_lines` (its TensorFlow-op form, which serving graphs
keep): `valid[i]` is false for a line whose label is not "0" or "1", that has not 1 + D + F
cells, whose dense cells are not empty or a finite decimal number, or a categorical token that
is not an id (an integer of at most 18 digits, or a non-empty string) or, for a weighted
feature, `id:weight` with a finite decimal weight. Empty dense cells are 0; a categorical cell
holds ids separated by ',' (empty tokens skipped). Integer ids become rows modulo the
vocabulary (floor modulo), string ids `Fingerprint64(id) % vocabulary` (as
`tf.strings.to_hash_bucket_fast`); a vocabulary of -1 (a dynamic table's keys) keeps integer
ids as they are and takes string ids `Fingerprint64(id) % (2^63 - 1)`. Outputs per feature: rows and row splits, and for weighted
features the weights (1 where a token has none). The rows of invalid lines are unspecified.
InvalidArgumentError for lines that are not a vector, or attr lists whose lengths differ from
num_features, a vocabulary below 1 other than -1, or num_weighted not the number of weighted features.
)doc");

}  // namespace
}  // namespace tf_embedding
