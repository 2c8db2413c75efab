"""`WorkerRowWise`: a table's blocks on the workers of a MultiWorkerMirroredStrategy cluster
(`multi_worker/block_variable.py`): one per worker (row-wise), or the whole table on one worker
(table-wise, a one-block layout), its roles run by the workers' collectives
(`transports/collectives.py`).

Forward: the unique ids go to the workers that own their rows, the rows come back, and the
requester combines them in its input order exactly as one process combines the same rows.
Update: each worker's lookups (block-local id, output row, gain) go to their owners with its
activation gradients, and each owner hands the fused optimizer the pieces feature by feature,
worker by worker: one process's order of every row's gradient terms, hence its bits
(docs/multi_worker.md "One step").
"""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.layout import ShardLayout
from tf_embedding.sharded.sharding.kind import Sharding, deduplicated
from tf_embedding.sharded.table_state import TableState
from tf_embedding.sharded.transports import lookup_packets


class WorkerRowWise(Sharding):
    """Rows back to the requester, lookups and activation gradients to the owners (the ranks
    of the table's blocks)."""

    deduplicated = True

    def __init__(self, table: TableState, owners: Sequence[int]):
        """`owners`: each of the table's blocks' rank."""
        super().__init__(table)
        self._owners = tuple(owners)

    def distribute(self, batch: ops.CsrBatch) -> TableBatch:
        return deduplicated(self.table, batch)

    def check_compilable(self) -> None:
        raise ValueError(
            f"Table {self.name} is split over the workers of a MultiWorkerMirroredStrategy "
            "cluster, whose exchanges of ids and rows are collectives that "
            "jit_compile=True cannot hold: compile the step without jit_compile "
            "(docs/multi_worker.md).")

    @property
    def owns_block(self) -> bool:
        """Whether this worker holds a block of the table (a table with fewer rows than
        workers has fewer blocks)."""
        return self.table.variables["parameters"].block is not None

    def requests(self, batch: TableBatch,
                 group_size: int) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """The features' distribution: per rank, (the block-local ids of the batch's unique
        ids in its block, how many rows the answer has: as many), empty for the ranks that own
        no block of the table."""
        return [(ids, tf.size(ids, out_type=tf.int64))
                for ids in self.ids_by_owner(batch.unique_ids, group_size)]

    def ids_by_owner(self, unique_ids: tf.Tensor, group_size: int) -> list[tf.Tensor]:
        """The block-local ids of `unique_ids` (distinct, in layout order) per rank."""
        by_rank = [tf.zeros([0], tf.int64)] * group_size
        for rank, (local_ids, _) in zip(self._owners, self.table.layout.split(unique_ids)):
            by_rank[rank] = local_ids
        return by_rank

    def answer(self, requests: Sequence[tf.Tensor],
               answer_rows: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        """The owner's lookup: each requester's rows, read in one fused lookup for all."""
        rows = self.owner_rows(tf.concat(list(requests), axis=0))
        return tf.split(rows, tf.stack(list(answer_rows)), num=len(requests))

    def assemble(self, parts_by_rank: Sequence[tf.Tensor]) -> tf.Tensor:
        """The outputs' way back: the rows of the batch's unique ids, the blocks' in block
        order (the unique ids' order)."""
        return tf.concat([parts_by_rank[rank] for rank in self._owners], axis=0)

    def owner_rows(self, local_ids: tf.Tensor) -> tf.Tensor:
        """The owner's lookup: the rows `local_ids` of this worker's block ([0, dim] without
        one), by the fused lookup, which reads the block in place and checks every id."""
        if not self.owns_block:
            return tf.zeros([0, self.table.config.dim], tf.float32)
        return ShardLayout.gather_block(self.table.variables["parameters"].block, local_ids,
                                        self.name)

    def lookups_by_owner(self, batch: TableBatch,
                         group_size: int) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """The gradients' distribution: per rank, (block-local ids int64 [n], (row, gain) pairs
        int64 [n], `lookup_packets`) of this worker's lookups in that rank's block, in CSR
        order."""
        ids = (batch.unique_ids if batch.inverse is None
               else tf.gather(batch.unique_ids, batch.inverse))
        blocks, local_ids = self.table.layout.block_and_local_ids(ids)
        owners = (blocks if self._owners == tuple(range(len(self._owners)))
                  else tf.gather(tf.constant(self._owners, tf.int32), blocks))
        num_rows = tf.size(batch.row_splits, out_type=tf.int64) - 1
        rows = tf.repeat(tf.range(num_rows, dtype=tf.int32),
                         batch.row_splits[1:] - batch.row_splits[:-1])
        packed = lookup_packets.pack(rows, batch.gains)
        return list(zip(tf.dynamic_partition(local_ids, owners, group_size),
                        tf.dynamic_partition(packed, owners, group_size)))

    def apply_owner(self, ordered: Sequence[Any], learning_rate: tf.Tensor) -> None:
        """The update: the fused optimizer on this worker's block with every worker's
        `ops.GradientBatch`es of it, in one process's order. REQUIRES: owns_block."""
        table = self.table
        optimizer = table.config.optimizer
        slots = {slot: table.variables[slot].block for slot in optimizer.slot_names()}
        ops.sparse_apply(optimizer, table.variables["parameters"].block, slots, ordered,
                         learning_rate, table_name=self.name)
