"""What the block transports (`InPlace`, `TaskPackets`) share: a step's lookups and updates are
the shardings' `DeviceCall`s for all tables in one list, which the transport's `run` moves, and
the updates of every replica meet in one merge_call.

A sharding run over block calls has these roles (`sharding/kind.py`): `block_lookups` (the
features' distribution and each block's lookup), `combine_lookups` (the outputs' way back),
`block_updates` (a replica's gradients by block) and `apply_calls` (each block's update with
every replica's gradients).
"""

import abc
from typing import Any, Callable, Hashable, Sequence, TypeVar

import tensorflow as tf

from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.table_state import learning_rates
from tf_embedding.sharded.transports.device_calls import DeviceCall

T = TypeVar("T")


class BlockCalls(abc.ABC):
    """A transport that runs `DeviceCall`s on the blocks' devices."""

    @abc.abstractmethod
    def run(self, calls: Sequence[DeviceCall]) -> list[list[tf.Tensor]]:
        """Each call's body run on its device; each call's outputs where the step runs."""

    @abc.abstractmethod
    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """`make()`, or what it made before in this traced graph for `key`, when the transport
        remembers what it sent (a tensor sent twice would travel twice)."""

    def gather_rows(self, shardings: Sequence[Any],
                    batches: Sequence[TableBatch]) -> list[tf.Tensor]:
        """Each table's rows of its batch's unique ids, read on each block's device (a
        pipelined enqueue)."""
        return [sharding.table.gather(batch.unique_ids)
                for sharding, batch in zip(shardings, batches)]

    def lookup(self, shardings: Sequence[Any],
               batches: Sequence[TableBatch]) -> list[tf.Tensor]:
        """Each table's [R, dim] activations of this replica's `batches`."""
        calls = [sharding.block_lookups(batch, self)
                 for sharding, batch in zip(shardings, batches)]
        results = iter(self.run([call for table in calls for call in table]))
        return [sharding.combine_lookups(batch, [next(results)[0] for _ in table_calls])
                for sharding, batch, table_calls in zip(shardings, batches, calls)]

    def apply(self, shardings: Sequence[Any], batches: Sequence[TableBatch],
              activation_gradients: Sequence[tf.Tensor], num_replicas: int) -> None:
        """Updates every block once with all replicas' gradients (call it in replica context):
        in one merge_call under a strategy, directly without one (one replica)."""
        updates = [sharding.block_updates(batch, gradient, self)
                   for sharding, batch, gradient in zip(shardings, batches, activation_gradients)]
        if not tf.distribute.has_strategy():
            self._apply_updates(tf.distribute.get_strategy(), shardings, 1, updates)
            return
        tf.distribute.get_replica_context().merge_call(
            self._apply_updates, args=(shardings, num_replicas, updates))

    def _apply_updates(self, strategy: tf.distribute.Strategy, shardings: Sequence[Any],
                       num_replicas: int, updates: list[list[Any]]) -> None:
        """The update of every block of every table, with all replicas' updates of it."""
        calls = []
        tables = [sharding.table for sharding in shardings]
        for sharding, block_updates, learning_rate in zip(shardings, updates,
                                                          learning_rates(tables)):
            # Per replica, in replica order: its update of each block.
            replica_updates = [
                [tuple(strategy.experimental_local_results(part)[replica] for part in update)
                 for update in block_updates]
                for replica in range(num_replicas)]
            calls += sharding.apply_calls(replica_updates, learning_rate)
        self.run(calls)
