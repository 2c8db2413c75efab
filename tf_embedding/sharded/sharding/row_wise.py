"""`RowWise`: a table's rows split into blocks (`ShardLayout`), whose unique ids travel.

The ids are deduplicated once at enqueue time; each block receives its unique ids and returns
their rows, which are combined where the step runs, in the batch's lookup order. The update
reduces the activation gradients to one summed row per unique id where the step runs and sends
each block its ids' rows (docs/parameter_server_traffic.md: less data when a step's output rows
outnumber its unique ids).
"""

import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.sharding.kind import BlockSharding, deduplicated
from tf_embedding.sharded.transports.device_calls import DeviceCall

# Per block: (block-local unique ids ascending, their summed gradient rows).
BlockUpdate = tuple[tf.Tensor, tf.Tensor]


class RowWise(BlockSharding):
    """Rows back to the step, summed gradient rows to the blocks."""

    deduplicated = True
    _apply_op = staticmethod(ops.sparse_apply_rows)
    _ids_position = 0

    def distribute(self, batch: ops.CsrBatch) -> TableBatch:
        return deduplicated(self.table, batch)

    def block_lookups(self, batch: TableBatch, transport: object) -> list[DeviceCall]:
        """Per block, the rows of its unique ids."""
        del transport  # nothing is sent twice
        return [self.gather_call(block, local_ids) for block, (local_ids, _) in
                enumerate(self.table.layout.split(batch.unique_ids))]

    def combine_lookups(self, batch: TableBatch, block_results: list[tf.Tensor]) -> tf.Tensor:
        """The blocks' rows, in block order (the unique ids' order), combined here."""
        return self.combine_rows(
            batch, block_results[0] if len(block_results) == 1 else tf.concat(block_results, 0))

    def block_updates(self, batch: TableBatch, activation_gradients: tf.Tensor,
                      transport: object) -> list[BlockUpdate]:
        """Per block, its block-local unique ids and their summed gradient rows, reduced once
        here."""
        del transport
        positions, values = ops.embedding_gradient(
            [(batch.row_splits, batch.inverse, batch.gains, activation_gradients)],
            table_name=self.name)
        touched_ids = tf.gather(batch.unique_ids, positions)
        return [(local_ids, rows[0])
                for local_ids, rows in self.table.layout.split(touched_ids, values)]
