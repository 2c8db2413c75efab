"""`WorkerTableWise`: a whole table on one worker of a MultiWorkerMirroredStrategy cluster,
which pools each sample there (TorchRec's table-wise sharding), its roles run by the workers'
collectives (`transports/collectives.py`).

Forward: every worker sends the owner its lookups of the table (id, output row, gain: 16
bytes each, not deduplicated), the owner pools each worker's samples with the fused lookup in
their order (one process's bits) and sends back one row per output row, 4 dim bytes per sample
and feature instead of a row per distinct id. Update: as `WorkerRowWise`, every lookup with the
gradient rows of the looked-up samples to the owner, in one process's order.
"""

from typing import Sequence

import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.sharding.worker_row_wise import WorkerRowWise
from tf_embedding.sharded.transports import lookup_packets


class WorkerTableWise(WorkerRowWise):
    """Lookups to the owner, pooled activations back."""

    deduplicated = False

    def distribute(self, batch: ops.CsrBatch) -> TableBatch:
        """The lookups as they are (the owner reads each one)."""
        return TableBatch(batch.row_splits, batch.ids, None, batch.gains,
                          batch.feature_row_counts)

    def requests(self, batch: TableBatch,
                 group_size: int) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """To the owner: this worker's lookups (ids, then (row, gain) pairs) and its output
        rows; nothing to the others."""
        (owner,) = self._owners
        num_rows = tf.size(batch.row_splits, out_type=tf.int64) - 1
        return [(tf.concat(list(lookups), axis=0),
                 num_rows if rank == owner else tf.constant(0, tf.int64))
                for rank, lookups in enumerate(self.lookups_by_owner(batch, group_size))]

    def answer(self, requests: Sequence[tf.Tensor],
               answer_rows: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        """Each requester's samples pooled on the owner by the fused lookup ([0, dim] from a
        worker that owns no block: nothing was asked of it)."""
        if not self.owns_block:
            return [tf.zeros([0, self.table.config.dim], tf.float32) for _ in requests]
        block = self.table.variables["parameters"].block
        pooled = []
        for request, num_rows in zip(requests, answer_rows):
            ids, rows, gains = lookup_packets.unpack(request)
            row_splits = tf.searchsorted(rows, tf.range(num_rows + 1), side="left",
                                         out_type=tf.int64)
            pooled.append(ops.embedding_lookup(block, row_splits, ids, gains,
                                               table_name=self.name))
        return pooled

    def assemble(self, parts_by_rank: Sequence[tf.Tensor]) -> tf.Tensor:
        """The owner's pooled activations [R, dim]."""
        (owner,) = self._owners
        return parts_by_rank[owner]

    def combine_fetched(self, batch: TableBatch, fetched: tf.Tensor) -> tf.Tensor:
        """The activations as the owner pooled them."""
        del batch
        return fetched
