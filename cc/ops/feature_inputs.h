// The inputs and attrs of the ops that read features as the CSR conversion takes them
// (TfeFeaturesToCsr, TfeFeaturesCheck, TfeFeaturesLookup), defined once: N features, each its
// ids, row info (sparse indices or ragged row splits), dense shape and weights, and per feature
// its input kind, whether it has weights, its max_sequence_length, whether invalid lookups are
// pruned and its name (cc/kernels/csr_conversion_attrs.h reads them). A fragment of a
// REGISTER_OP chain: REGISTER_OP("...") TFE_FEATURE_INPUTS .Output(...)...
#ifndef TF_EMBEDDING_CC_OPS_FEATURE_INPUTS_H_
#define TF_EMBEDDING_CC_OPS_FEATURE_INPUTS_H_

#define TFE_FEATURE_INPUTS                        \
  .Input("ids: Tids")                             \
      .Input("row_info: N * int64")               \
      .Input("dense_shapes: N * int64")           \
      .Input("weights: N * float")                \
      .Attr("N: int >= 1")                        \
      .Attr("Tids: list({int32, int64}) >= 1")    \
      .Attr("input_kinds: list(string)")          \
      .Attr("has_weights: list(bool)")            \
      .Attr("max_sequence_lengths: list(int)")    \
      .Attr("prune_invalid: list(bool)")          \
      .Attr("feature_names: list(string)")

#endif  // TF_EMBEDDING_CC_OPS_FEATURE_INPUTS_H_
