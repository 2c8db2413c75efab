"""What the sharded engine knows about one table, and the per-table half of each step.

`TPUEmbedding` keeps one `TableState` per table: its config, the indices of the features that
look it up, its row layout and its variables. The three steps of a batch (convert on the host,
look up, turn activation gradients into block updates and apply them) are methods here, so
`tpu_embedding.py` only routes features, replicas and strategies.

A table of one block is read and updated straight from its lookups' ids; a table of several
blocks deduplicates its ids once at enqueue time and reuses the unique ids through lookup and
apply.
"""

import dataclasses
from typing import Any, Sequence

import tensorflow as tf

from tf_embedding import inputs as inputs_lib
from tf_embedding import ops
from tf_embedding.sharded import queues
from tf_embedding.sharded.layout import ShardLayout

# Per block: (block-local unique ids ascending, their summed gradient rows).
BlockUpdate = tuple[tf.Tensor, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class TableState:
    """One table of a `TPUEmbedding`.

    `variables` is the table's entry of the embedding's tracked `{"parameters": ..., <slot>:
    ...}` dict (filled by `build()`); every value is a `ShardedVariable` laid out by `layout`.
    """

    config: Any  # TableConfig
    feature_indices: tuple[int, ...]  # into the flattened feature_config, in order
    layout: ShardLayout
    variables: dict[str, Any]

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def is_single_block(self) -> bool:
        return len(self.layout.rows) == 1

    def convert(self, feature_inputs: Sequence[inputs_lib.FeatureInput]) -> queues.TableBatch:
        """One replica's features of this table -> its CSR batch, deduplicated if sharded."""
        table = self.config
        batch = inputs_lib.features_to_csr(table.name, table.vocabulary_size, table.combiner,
                                           feature_inputs)
        if self.is_single_block:
            # Read and updated straight from the lookups' ids (`lookup`, `block_updates`), so
            # deduplicating them would be wasted work.
            ids = batch.ids
            inverse = tf.range(tf.size(ids, out_type=tf.int64))
        else:
            unique = inputs_lib.dedup(batch.ids, num_shards=1, table_name=table.name)
            ids, inverse = unique.unique_ids, tf.cast(unique.inverse, tf.int64)
        return queues.TableBatch(batch.row_splits, ids, inverse, batch.gains,
                                 batch.feature_row_counts)

    def gather(self, unique_ids: tf.Tensor) -> tf.Tensor:
        """The rows `unique_ids` (ascending) of the table, read on each block's device."""
        return self.layout.gather(self.variables["parameters"], unique_ids, self.name)

    def lookup(self, batch: queues.TableBatch, rows: tf.Tensor | None) -> tf.Tensor:
        """One replica's [R, dim] activations (`rows`: the batch's unique rows, if pipelined)."""
        quantization = self.config.quantization_config
        if rows is None and quantization is None and self.is_single_block:
            # The fused lookup reads the one block in place, without first gathering the
            # unique rows; `unique_ids` are the lookups' ids in order (`convert`).
            return ops.embedding_lookup(list(self.variables["parameters"])[0], batch.row_splits,
                                        batch.unique_ids, batch.gains, table_name=self.name)
        if rows is None:
            rows = self.gather(batch.unique_ids)
        if quantization is not None:
            rows = quantization.quantize(rows)
        return ops.embedding_lookup_dense(rows, batch.row_splits, batch.inverse, batch.gains,
                                          table_name=self.name)

    def activation_gradients(self, batch: queues.TableBatch,
                             flat_gradients: Sequence[tf.Tensor | None]) -> tf.Tensor:
        """This table's features' gradients stacked into [R, dim] (None: zeros)."""
        dim = self.config.dim
        counts = tf.unstack(batch.feature_row_counts, num=len(self.feature_indices))
        return tf.concat([
            tf.zeros(tf.stack([count, dim]), tf.float32) if flat_gradients[index] is None
            else tf.reshape(tf.cast(flat_gradients[index], tf.float32), [-1, dim])
            for index, count in zip(self.feature_indices, counts)], axis=0)

    def block_updates(self, batch: queues.TableBatch,
                      activation_gradients: tf.Tensor) -> list[Any]:
        """This replica's share of the update of each block.

        One block: the CSR batch with its activation gradients (`ops.GradientBatch`), which the
        fused optimizer sums per row itself. Several blocks: per block, the block-local unique
        ids and their summed gradient rows (`BlockUpdate`), reduced once here.
        """
        if self.is_single_block:
            return [(batch.row_splits, batch.unique_ids, batch.gains, activation_gradients)]
        positions, values = ops.embedding_gradient(
            [(batch.row_splits, batch.inverse, batch.gains, activation_gradients)],
            table_name=self.name)
        touched_ids = tf.gather(batch.unique_ids, positions)
        return [(local_ids, rows[0])
                for local_ids, rows in self.layout.split(touched_ids, values)]

    def apply(self, replica_updates: Sequence[Sequence[Any]], learning_rate: tf.Tensor) -> None:
        """Updates every block once, on its device, with all replicas' updates of that block.

        `replica_updates[r][b]` is replica r's `block_updates(...)[b]`.
        """
        optimizer = self.config.optimizer
        # pylint: disable=protected-access
        blocks = {slot: list(variable) for slot, variable in self.variables.items()}
        for block, device in enumerate(self.layout.devices):
            updates = [per_replica[block] for per_replica in replica_updates]
            slots = {slot: blocks[slot][block] for slot in optimizer._slot_names()}
            apply = ops.sparse_apply if self.is_single_block else ops.sparse_apply_rows
            with tf.device(device):
                apply(optimizer, blocks["parameters"][block], slots, updates, learning_rate,
                      table_name=self.name)
