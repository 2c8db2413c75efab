// The key index of a dynamic table (cc/core/dynamic_index.h, docs/dynamic_vocabulary.md): a
// resource made by TfeDynamicIndex, read and updated by TfeDynamicLookup, saved and restored
// through TfeDynamicIndexExport / TfeDynamicIndexImport, its counts read by TfeDynamicIndexStats;
// TfeDropMissingLookups drops a batch's lookups of keys without a row.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_embedding {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfeDynamicIndex")
    .Output("index: resource")
    .Attr("block_rows: list(int) >= 1")
    .Attr("strided: bool = false")
    .Attr("admit_after: int = 1")
    .Attr("evict_after_steps: int = 0")
    .Attr("evict_every_steps: int = 1")
    .Attr("refuse_when_full: bool = false")
    .Attr("candidate_capacity: int = 0")
    .Attr("pool_rows: int = 1")
    .Attr("table_name: string = ''")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
The key index of a dynamic table whose blocks hold `block_rows` rows ('div' contiguous, or
`strided`: block b's slot j is table row j * blocks + b), empty, with its admission and eviction
options (cc/core/dynamic_index.h; evict_after_steps 0: never by age).
)doc");

REGISTER_OP("TfeDynamicLookup")
    .Input("index: resource")
    .Input("keys: int64")
    .Input("training: bool")
    .Output("rows: int64")
    .Output("admitted_rows: int64")
    .Output("admitted_pool_rows: int64")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle keys, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &keys));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      c->set_output(0, keys);
      c->set_output(1, c->Vector(c->UnknownDim()));
      c->set_output(2, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Each key's table row, -1 for a key with none. With `training`, the step's counting, admission and
eviction run first; `admitted_rows` are the rows of the keys admitted in it, whose values start as
rows `admitted_pool_rows` of the table's initial pool.
)doc");

REGISTER_OP("TfeDropMissingLookups")
    .Input("row_splits: int64")
    .Input("rows: int64")
    .Input("gains: float")
    .Output("kept_row_splits: int64")
    .Output("kept_rows: int64")
    .Output("kept_gains: float")
    .Attr("table_name: string = ''")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle row_splits, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &row_splits));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &unused));
      c->set_output(0, row_splits);
      c->set_output(1, c->Vector(c->UnknownDim()));
      c->set_output(2, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
A CSR batch of a dynamic table (`rows`: TfeDynamicLookup's, -1 for a key without a row) with the
lookups of keys without a row dropped: they read zeros and get no gradient, while the gains, fixed
at conversion, keep counting them in mean and sqrtn denominators.
)doc");

REGISTER_OP("TfeDynamicIndexExport")
    .Input("index: resource")
    .Output("row_records: int64")
    .Output("candidate_records: int64")
    .Output("stats: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Matrix(c->UnknownDim(), 3));
      c->set_output(1, c->Matrix(c->UnknownDim(), 3));
      c->set_output(2, c->Vector(6));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The index's state: each table row's (key, count, last step) (key -1: free), the candidates'
(block by block, each in ascending (last step, key)), and the stats (step, occupied, candidates,
admitted, evicted, refused).
)doc");

REGISTER_OP("TfeDynamicIndexStats")
    .Input("index: resource")
    .Output("stats: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(6));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The index's stats alone, as TfeDynamicIndexExport gives them (step, occupied, candidates,
admitted, evicted, refused), without copying its records.
)doc");

// The ranks of an import's records and stats (both imports' inputs 1 to 3).
static absl::Status CheckImportedState(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &unused));
  return c->WithRank(c->input(3), 1, &unused);
}

REGISTER_OP("TfeDynamicIndexImport")
    .Input("index: resource")
    .Input("row_records: int64")
    .Input("candidate_records: int64")
    .Input("stats: int64")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(CheckImportedState)
    .Doc(R"doc(
Replaces the index's state with one TfeDynamicIndexExport wrote for an index of the same layout;
an invalid state (another layout, a key twice, a key in another block's row) fails and changes
nothing.
)doc");

REGISTER_OP("TfeDynamicIndexImportPlaced")
    .Input("index: resource")
    .Input("row_records: int64")
    .Input("candidate_records: int64")
    .Input("stats: int64")
    .Output("saved_rows: int64")
    .Output("new_rows: int64")
    .Attr("table_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(CheckImportedState(c));
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
TfeDynamicIndexImport of a state exported by an index of the same capacity and any block layout
(cc/core/dynamic_relayout.h): the row records are first placed for this index's layout, and
every admitted key's saved and new table row come out, for the caller to move the table's rows
(none move when the layouts agree). A block too small for its keys fails, naming the table, the
block and both counts, and changes nothing.
)doc");

}  // namespace tf_embedding
