// Lookup-combine ops, their activations in each feature's output shape, and the table gradient
// (docs/kernels.md).
#include <vector>

#include "cc/ops/feature_inputs.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_embedding {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// activations: [R, dim], R from row_splits [R + 1].
absl::Status SetActivationsShape(InferenceContext* c, DimensionHandle dim) {
  ShapeHandle row_splits;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &row_splits));
  DimensionHandle rows;
  TF_RETURN_IF_ERROR(c->Subtract(c->Dim(row_splits, 0), 1, &rows));
  c->set_output(0, c->Matrix(rows, dim));
  return absl::OkStatus();
}

// The dimension of a [rows, dim] shape, unknown when the rank is not known to be 2.
DimensionHandle MatrixDim(InferenceContext* c, ShapeHandle shape) {
  return c->Rank(shape) == 2 ? c->Dim(shape, 1) : c->UnknownDim();
}

}  // namespace

REGISTER_OP("TfeEmbeddingLookup")
    .Input("table: resource")
    .Input("row_splits: int64")
    .Input("ids: int64")
    .Input("gains: float")
    .Output("activations: float")
    .Attr("table_name: string = ''")
    .SetShapeFn([](InferenceContext* c) {
      const auto* handle_data = c->input_handle_shapes_and_types(0);
      const bool known = handle_data != nullptr && handle_data->size() == 1;
      return SetActivationsShape(c, known ? MatrixDim(c, (*handle_data)[0].shape)
                                          : c->UnknownDim());
    })
    .Doc(R"doc(
activations[r] = sum of gains[k] * table[ids[k]] over k in [row_splits[r], row_splits[r + 1]),
reading the table in place under the variable's shared lock.
)doc");

REGISTER_OP("TfeEmbeddingLookupDense")
    .Input("table: float")
    .Input("row_splits: int64")
    .Input("ids: int64")
    .Input("gains: float")
    .Output("activations: float")
    .Attr("table_name: string = ''")
    .SetShapeFn([](InferenceContext* c) {
      return SetActivationsShape(c, MatrixDim(c, c->input(0)));
    })
    .Doc("TfeEmbeddingLookup on a table tensor.");

REGISTER_OP("TfeFeaturesLookup")
    .Input("tables: M * resource") TFE_FEATURE_INPUTS
    .Output("activations: M * float")
    .Output("feature_row_counts: M * int64")
    .Attr("M: int >= 1")
    .Attr("table_names: list(string)")
    .Attr("combiners: list(string)")
    .Attr("vocabulary_sizes: list(int)")
    .Attr("table_feature_counts: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      int64_t num_tables = 0;
      std::vector<int64_t> table_feature_counts;
      TF_RETURN_IF_ERROR(c->GetAttr("M", &num_tables));
      TF_RETURN_IF_ERROR(c->GetAttr("table_feature_counts", &table_feature_counts));
      for (int64_t t = 0; t < num_tables; ++t) {
        const auto* handle_data = c->input_handle_shapes_and_types(t);
        const bool known = handle_data != nullptr && handle_data->size() == 1;
        c->set_output(t, c->Matrix(InferenceContext::kUnknownDim,
                                   known ? MatrixDim(c, (*handle_data)[0].shape)
                                         : c->UnknownDim()));
        c->set_output(num_tables + t,
                      c->Vector(t < static_cast<int64_t>(table_feature_counts.size())
                                    ? table_feature_counts[t]
                                    : InferenceContext::kUnknownDim));
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
For each of M tables, TfeFeaturesToCsr of its features (the per-feature inputs and attrs list
every table's features, table by table, table_feature_counts[t] of them for table t) looked up in
it as TfeEmbeddingLookup does: the activations of its stacked batch and each of its features' row
count, the same bits as the two ops, in one op whose threads share the rows of every table. For
lookups that no update follows (no gradient).
)doc");

REGISTER_OP("TfeFeatureOutputs")
    .Input("activations: float")
    .Input("feature_row_counts: int64")
    .Output("outputs: N * float")
    .Attr("N: int >= 1")
    .Attr("output_shapes: list(shape)")
    .Attr("partial: bool = false")
    .Attr("message: string")
    .Attr("table_name: string = ''")
    .SetShapeFn([](InferenceContext* c) {
      std::vector<tensorflow::PartialTensorShape> shapes;
      bool partial = false;
      TF_RETURN_IF_ERROR(c->GetAttr("output_shapes", &shapes));
      TF_RETURN_IF_ERROR(c->GetAttr("partial", &partial));
      if (static_cast<int>(shapes.size()) != c->num_outputs()) {
        return absl::InvalidArgumentError("output_shapes must have one shape per output");
      }
      for (int f = 0; f < c->num_outputs(); ++f) {
        ShapeHandle shape;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[f], &shape));
        if (partial && c->RankKnown(shape) && c->Rank(shape) > 0) {
          TF_RETURN_IF_ERROR(c->ReplaceDim(shape, 0, c->UnknownDim(), &shape));
        }
        c->set_output(f, shape);
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
A table's activations [R, dim], the rows of its N features stacked (feature_row_counts[f] of
them for feature f), as each feature's activations in its output shape: shapes [d0, ..., dim]
that the rows must fill, or with partial = true a smaller batch of whole samples ([?, ..., dim]).
A batch that does not fit fails with `message` and the rows per feature.
)doc");

REGISTER_OP("TfeEmbeddingGradient")
    .Input("row_splits: N * int64")
    .Input("ids: N * int64")
    .Input("gains: N * float")
    .Input("activation_gradients: N * float")
    .Output("unique_ids: int64")
    .Output("values: float")
    .Attr("N: int >= 1")
    .Attr("vocabulary_size: int = -1")
    .Attr("table_name: string = ''")
    .SetShapeFn([](InferenceContext* c) {
      std::vector<ShapeHandle> activation_gradients;
      TF_RETURN_IF_ERROR(c->input("activation_gradients", &activation_gradients));
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->Matrix(c->UnknownDim(), MatrixDim(c, activation_gradients[0])));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The table gradient of N lookups: values[u] = sum of gains[k] * activation_gradients[row of k]
over every lookup k of unique_ids[u] (ascending), summed in batch order, then lookup order.
vocabulary_size < 0 only checks ids >= 0.
)doc");

}  // namespace tf_embedding
