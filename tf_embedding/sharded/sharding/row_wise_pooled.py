"""`RowWisePooled`: a table's rows split into blocks, each of which combines its own lookups.

The lookups are grouped by block at enqueue time (`ShardLayout.group_by_block`, not
deduplicated: each block reads and updates straight from its lookups' ids); each block combines
its own lookups into partial activations [R, dim], summed in block order where the step runs (a
fixed order, so the result does not depend on where the blocks are); the update sends each
block its lookups with the activation gradients, and the fused optimizer sums them per row on
the block's device. Results agree with `RowWise` to float rounding, not bitwise.
"""

import functools
from typing import Any

import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.sharding.kind import BlockSharding
from tf_embedding.sharded.transports.device_calls import DeviceCall


class RowWisePooled(BlockSharding):
    """Partial activations back to the step, lookups and activation gradients to the blocks."""

    deduplicated = False
    _apply_op = staticmethod(ops.sparse_apply)
    _ids_position = 1

    def distribute(self, batch: ops.CsrBatch) -> TableBatch:
        row_splits, ids, gains = self.table.layout.group_by_block(batch.row_splits, batch.ids,
                                                                  batch.gains)
        return TableBatch(row_splits, ids, None, gains, batch.feature_row_counts)

    def block_lookups(self, batch: TableBatch, transport: Any) -> list[DeviceCall]:
        """Per block, its lookups combined into [R, dim] partial activations on its device."""
        table = self.table
        return [DeviceCall(device, [row_splits, self.wire_ids(ids, index), gains],
                           functools.partial(self._lookup_block, block))
                for index, ((row_splits, ids, gains), block, device) in enumerate(zip(
                    self._block_batches(batch, transport), list(table.variables["parameters"]),
                    table.layout.devices))]

    def _lookup_block(self, block: tf.Variable, inputs: list[tf.Tensor]) -> list[tf.Tensor]:
        """A block's fused lookup reads it in place and combines its own lookups."""
        row_splits, ids, gains = inputs
        return [ops.embedding_lookup(block, row_splits, ids, gains, table_name=self.name)]

    def combine_lookups(self, batch: TableBatch, block_results: list[tf.Tensor]) -> tf.Tensor:
        """The partial activations summed in block order."""
        return functools.reduce(tf.add, block_results)

    def block_updates(self, batch: TableBatch, activation_gradients: tf.Tensor,
                      transport: Any) -> list[tuple[tf.Tensor, ...]]:
        """Per block, its lookups' CSR batch with the activation gradients
        (`ops.GradientBatch`), which the fused optimizer sums per row itself."""
        return [(row_splits, ids, gains, activation_gradients)
                for row_splits, ids, gains in self._block_batches(batch, transport)]

    def _block_batches(self, batch: TableBatch, transport: Any) -> list[tuple[tf.Tensor, ...]]:
        """Per block, its lookups' CSR batch; made once per traced graph for a transport that
        remembers what it sent, so that the update finds the tensors the lookup sent."""
        return transport.cached(
            ("block batches", self.name, batch.row_splits.ref(), batch.unique_ids.ref(),
             batch.gains.ref()),
            lambda: self.table.layout.block_batches(batch.row_splits, batch.unique_ids,
                                                    batch.gains))
