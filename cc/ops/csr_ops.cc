// Host-side conversion ops: features -> CSR batch, and shard partition + dedup of its ids.
// Semantics: docs/kernels.md.
#include "absl/status/status.h"
#include "cc/core/dedup.h"
#include "cc/kernels/tf_status.h"
#include "cc/ops/feature_inputs.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_embedding {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfeFeaturesToCsr") TFE_FEATURE_INPUTS
    .Output("row_splits: int64")
    .Output("csr_ids: int64")
    .Output("gains: float")
    .Output("feature_row_counts: int64")
    .Attr("combiner: string")
    .Attr("vocabulary_size: int")
    .Attr("table_name: string")
    .SetShapeFn([](InferenceContext* c) {
      int64_t num_features = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("N", &num_features));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(1, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(2, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(3, c->Vector(num_features));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Converts the features of one table into one stacked CSR batch (docs/kernels.md). Ids must be
below `vocabulary_size`, or with vocabulary_size -1 (a dynamic table's keys) any id >= 0.
)doc");

REGISTER_OP("TfeFeaturesCheck") TFE_FEATURE_INPUTS
    .Output("invalid_feature: int32")
    .Output("message: string")
    .Attr("combiner: string")
    .Attr("vocabulary_size: int")
    .Attr("table_name: string")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
TfeFeaturesToCsr's checks of the same inputs' structure (not the ids' range), reported, not
raised, as the index of the first feature that conversion would refuse (-1 for none) and its
error message (empty when valid). A multi-worker step gathers the index from every worker, so
one worker's malformed batch fails the step on all of them.
)doc");

REGISTER_OP("TfeCsrDedup")
    .Input("ids: int64")
    .Output("unique_ids: int64")
    .Output("inverse: int32")
    .Output("shard_splits: int64")
    .Attr("num_shards: int >= 1")
    .Attr("table_name: string = ''")
    .SetShapeFn([](InferenceContext* c) {
      int64_t num_shards = 0;
      std::string table_name;
      TF_RETURN_IF_ERROR(c->GetAttr("num_shards", &num_shards));
      TF_RETURN_IF_ERROR(c->GetAttr("table_name", &table_name));
      TF_RETURN_IF_ERROR(ToAbslStatus(CheckNumShards(table_name, num_shards)));
      ShapeHandle ids;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &ids));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(1, ids);
      c->set_output(2, c->Vector(num_shards + 1));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Groups a CSR batch's ids by shard (id % num_shards), deduplicates them (ascending within a
shard), and returns each lookup's index into the unique ids.
)doc");

}  // namespace tf_embedding
