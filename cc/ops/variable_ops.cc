// TfeAssignRows: writes a window of rows into a table variable in place (TfeResetRows: chosen
// rows, from a source matrix); TfeRestoreRows: reads a
// range of a checkpointed table's rows, and nothing else (docs/kernels.md). Together they build
// a block a window at a time, without a temporary of its size or a read of the whole table.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_embedding {

REGISTER_OP("TfeAssignRows")
    .Input("table: resource")
    .Input("first_row: int64")
    .Input("rows: float")
    .Attr("table_name: string = ''")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      return c->WithRank(c->input(2), 2, &unused);
    })
    .Doc(R"doc(
table[first_row + i] = rows[i] for i in [0, rows.shape[0]), in place under the variable's
exclusive lock (a private copy first when another tensor shares the buffer, TF's rule). Unlike
TF's sliced assignment it leaves the variable out of copy-on-read mode.
)doc");

REGISTER_OP("TfeResetRows")
    .Input("table: resource")
    .Input("rows: int64")
    .Input("source: float")
    .Input("source_rows: int64")
    .Attr("table_name: string = ''")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &unused));
      return c->WithRank(c->input(3), 1, &unused);
    })
    .Doc(R"doc(
table[rows[i]] = source[source_rows[i]] for every i, in place, as TfeAssignRows writes: the rows a
dynamic table gives to new keys, reset to their initial values (a row of the initializer pool,
or a slot's initial row).
)doc");

REGISTER_OP("TfeRestoreRows")
    .Input("prefix: string")
    .Input("tensor_name: string")
    .Input("first_row: int64")
    .Input("num_rows: int64")
    .Output("rows: float")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle unused;
      for (int i = 0; i < 4; ++i) TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
      c->set_output(0, c->Matrix(c->UnknownDim(), c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Rows [first_row, first_row + num_rows) of the float32 matrix `tensor_name` in the V2 checkpoint
`prefix`, read from its data files alone: a stored tensor or stored row slices are read only
where they hold those rows (TF's reader reads each whole stored tensor or slice it touches).
)doc");

}  // namespace tf_embedding
