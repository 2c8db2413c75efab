// The main job's synthetic click log (tf_embedding/job/data/synthetic.py): one feature of a batch
// in one op, where the same draws written as TensorFlow ops took ~15 element-wise ops per id.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_embedding {
namespace {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TfeSyntheticFeature")
    .Input("columns: float64")
    .Input("seeds: Tseed")
    .Output("row_splits: int64")
    .Output("rows: int64")
    .Output("weights: float")
    .Output("contribution: float")
    .Attr("Tseed: {int32, int64}")
    .Attr("feature_name: string")
    .Attr("batch_size: int >= 0")
    .Attr("max_ids: int >= 1")
    .Attr("min_ids: int >= 1 = 1")
    .Attr("weighted: bool")
    .Attr("combiner: {'sum', 'mean', 'sqrtn'}")
    .Attr("multiplier: int >= 0")
    .Attr("offset: int >= 0")
    .Attr("weight_min: float")
    .Attr("weight_max: float")
    .SetShapeFn([](InferenceContext* c) {
      int64_t batch_size = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("batch_size", &batch_size));
      c->set_output(0, c->Vector(batch_size + 1));
      c->set_output(1, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(2, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(3, c->Vector(batch_size));
      return absl::OkStatus();
    })
    .Doc(R"doc(
One feature of a synthetic batch of `batch_size` samples, drawn exactly as these stateless
TensorFlow ops draw it (seeds[s] is the seed pair of stream s):

  lengths = stateless_uniform([batch_size], seeds[0], min_ids, max_ids + 1, int64)
                                                 (all max_ids if min_ids == max_ids)
  u = stateless_uniform([sum(lengths)], seeds[1], dtype=float64)
  scaled = u * N; column = min(int64(scaled), N - 1)        (columns: [N, 4] alias table)
  kept = scaled - column < columns[column, 0]
  rank = kept ? column : int64(columns[column, 1]); effect = columns[column, kept ? 2 : 3]
  rows = (rank * multiplier + offset) % N
  weights = stateless_uniform([sum(lengths)], seeds[2], weight_min, weight_max)  (if weighted)
  contribution[b] = the combiner over sample b's lookups of (weight, effect): weighted sum,
                    divided (0 where the divisor is 0) by the sum of weights ("mean") or the
                    root of the sum of squared weights ("sqrtn"); weight 1 when not weighted.

The op returns the ids as a ragged batch (row_splits, rows), the weights ([0] when not
weighted) and each sample's contribution to the click logit. InvalidArgumentError, naming the
feature, for an alias table that is not [N, 4] with 1 <= N <= 2^31, multiplier or offset not below
N, seeds not [3, 2], an alias entry that is not a rank below N, or min_ids above max_ids.
)doc");

}  // namespace
}  // namespace tf_embedding
