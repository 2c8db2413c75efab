"""`WorkerCollectives`: the transport of a MultiWorkerMirroredStrategy cluster, whose workers
each hold one block of every table (`multi_worker/`). A step's lookups cost three collectives
for all tables (`collective_rows`), its update three more (`collective_gradients`), whatever
the table count; every worker calls them at the same point of its step."""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.multi_worker.group import WorkerGroup
from tf_embedding.sharded.table_state import learning_rates
from tf_embedding.sharded.transports import collective_gradients
from tf_embedding.sharded.transports import collective_rows


class WorkerCollectives:
    """Moves a step's ids, rows and gradients between the workers of `group`."""

    def __init__(self, group: WorkerGroup):
        self.group = group

    def gather_rows(self, shardings: Sequence[Any],
                    unique_ids: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        """Each table's rows of its batch's `unique_ids`, from the workers that own them."""
        return collective_rows.gather_rows(self.group, shardings, unique_ids)

    def lookup(self, shardings: Sequence[Any],
               batches: Sequence[TableBatch]) -> list[tf.Tensor]:
        """Each table's [R, dim] activations: its unique rows gathered, combined here in this
        worker's input order (one process's bits)."""
        rows = self.gather_rows(shardings, [batch.unique_ids for batch in batches])
        return [sharding.combine_rows(batch, table_rows)
                for sharding, batch, table_rows in zip(shardings, batches, rows)]

    def apply(self, shardings: Sequence[Any], batches: Sequence[TableBatch],
              activation_gradients: Sequence[tf.Tensor], num_replicas: int) -> None:
        """Every owner's one update per step for the global batch (a worker runs one
        replica)."""
        del num_replicas
        collective_gradients.apply_gradients(
            self.group, shardings, batches, activation_gradients,
            learning_rates([sharding.table for sharding in shardings]))
