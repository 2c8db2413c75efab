"""The sharded engine behind `tf_embedding.TPUEmbedding`.

* `tpu_embedding`: the public class (enqueue / dequeue / apply_gradients, checkpoints).
* `table_state`: what the engine knows about one table (its features, blocks and variables).
* `layout`: how a table's rows split into contiguous blocks over devices.
* `queues`: the per-replica queues that carry a batch from enqueue to dequeue to apply.

The package imports nothing itself, so `import tf_embedding.sharded.layout` stays light.
"""
