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
                    batches: Sequence[TableBatch]) -> list[tf.Tensor]:
        """What each table's sharding fetches for its batch from the workers that own it: the
        rows of its unique ids, or its pooled activations (`collective_rows.fetch`)."""
        return collective_rows.fetch(self.group, shardings, batches)

    def lookup(self, shardings: Sequence[Any],
               batches: Sequence[TableBatch]) -> list[tf.Tensor]:
        """Each table's [R, dim] activations, with one process's bits."""
        return [sharding.combine_fetched(batch, fetched) for sharding, batch, fetched
                in zip(shardings, batches, self.gather_rows(shardings, batches))]

    def apply(self, shardings: Sequence[Any], batches: Sequence[TableBatch],
              activation_gradients: Sequence[tf.Tensor], num_replicas: int) -> None:
        """Every owner's one update per step for the global batch (a worker runs one
        replica)."""
        del num_replicas
        collective_gradients.apply_gradients(
            self.group, shardings, batches, activation_gradients,
            learning_rates([sharding.table for sharding in shardings]))
