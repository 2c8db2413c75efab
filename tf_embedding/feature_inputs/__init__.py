"""Feature inputs: the rules of one feature, as TF reads it on each path, with TF's messages.

* `rules`: the TPU path's (`TPUEmbedding` enqueue, output shapes, gradients' checks);
  `cpu_rules`: the CPU path's (TF's `cpu_embedding_lookup`: `TPUEmbeddingV0`, serving, the
  front ends' lookups), with the combiners' norms.
* `feature_input`: one feature's input as the fused ops read it, the shapes of its activations,
  and how a ragged input fills `output_shape` (both paths' rule).
* `buckets`: ids padded to power-of-two buckets.

The ops that convert them into CSR batches are `tf_embedding.ops`."""
