// TfeAssignRows: writes a window of rows into a table variable in place (docs/kernels.md), so a
// block is initialised a window at a time without a temporary of its size.
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

}  // namespace tf_embedding
