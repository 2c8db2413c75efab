"""Feature inputs: TF's rules for reading a feature (`rules`), one feature's input as the fused
ops read it and the shapes of its activations (`feature_input`), and padding ids to
power-of-two buckets (`buckets`). The ops that convert them into CSR batches are
`tf_embedding.ops`."""
