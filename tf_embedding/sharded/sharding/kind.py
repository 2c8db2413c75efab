"""What every sharding kind is, and what the kinds run over block calls share.

A `Sharding` belongs to one table (`TableState`): it converts the table's features into the
table's batch in the form its roles read (`convert`), combines rows into activations
(`combine_rows`), and says whether an XLA-compiled step can hold it (`check_compilable`).
A `BlockSharding` also has the roles a block transport (`transports/block_calls.py`) runs:
`block_lookups` / `combine_lookups` for the forward, `block_updates` / `apply_calls` for the
update, each block's work a `DeviceCall` on the block's device.
"""

import abc
import functools
from typing import Any, Callable, Sequence

import tensorflow as tf

from tf_embedding import dynamic_vocabulary, ops
from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding.sharded import dynamic_table
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.layout import ShardLayout
from tf_embedding.sharded.table_state import TableState
from tf_embedding.sharded.transports.device_calls import DeviceCall, Input, narrowed


class Sharding(abc.ABC):
    """One table's sharding."""

    # Whether the table's batches hold its unique ids and an `inverse` (else each lookup's id).
    deduplicated: bool

    def __init__(self, table: TableState):
        self.table = table

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def looks_up_features_directly(self) -> bool:
        """Whether the forward-only one-op lookup (`table_wise.lookup_features`) may read the
        table: one block here, read as it is."""
        return False

    def convert(self, feature_inputs: Sequence[FeatureInput], training: Any = False
                ) -> TableBatch:
        """One replica's features of this table -> its CSR batch, in this kind's form; a
        dynamic table's keys become its rows first (`dynamic_table`), counted, admitted and
        evicted if `training`."""
        config, dynamic = self.table.config, self.table.dynamic
        if ops.compiling_with_xla():
            if dynamic is not None:
                raise dynamic_vocabulary.dynamic_table_error(self.name,
                                                             dynamic_table.NOT_COMPILABLE)
            self.check_compilable()
        batch = ops.features_to_csr(
            config.name, dynamic_vocabulary.conversion_vocabulary_size(config),
            config.combiner, feature_inputs)
        if dynamic is not None:
            batch = dynamic.remap(self.table, batch, training)
        return self.distribute(batch)

    @abc.abstractmethod
    def distribute(self, batch: ops.CsrBatch) -> TableBatch:
        """The features' distribution: a converted CSR batch of the table arranged for this
        kind's roles (deduplicated, or grouped by block)."""

    def check_compilable(self) -> None:
        """Raises ValueError if XLA cannot compile this table's steps (a table of several
        blocks; kinds that XLA can compile say so)."""
        layout = self.table.layout
        raise ValueError(
            f"Table {self.name} is split into {len(layout.rows)} blocks (on "
            f"{[str(device) for device in layout.devices]}), but inside "
            "jit_compile=True a table must be one block on the step's device: an "
            "XLA-compiled function reads variables of its own device only, and splitting a "
            "batch's lookups by block has no static shape. Use the default strategy without "
            "table_devices, or compile the step without jit_compile.")

    def combine_rows(self, batch: TableBatch, rows: tf.Tensor) -> tf.Tensor:
        """The [R, dim] activations from the rows of the batch's `unique_ids` (quantized first
        if the table says so), combined in the batch's lookup order."""
        quantization = self.table.config.quantization_config
        if quantization is not None:
            rows = quantization.quantize(rows)
        return ops.embedding_lookup_dense(rows, batch.row_splits, batch.inverse_or_identity(),
                                          batch.gains, table_name=self.name)

    def combine_fetched(self, batch: TableBatch, fetched: tf.Tensor) -> tf.Tensor:
        """The [R, dim] activations from what the transport fetched for the batch
        (`gather_rows`, also at a pipelined enqueue): by default the rows of its unique ids."""
        return self.combine_rows(batch, fetched)


def deduplicated(table: TableState, batch: ops.CsrBatch) -> TableBatch:
    """A CSR batch with its ids deduplicated once, in the layout's order (ascending for 'div',
    grouped by block for 'mod'), so each block's ids are one contiguous run
    (`ShardLayout.split`)."""
    unique = ops.dedup(batch.ids, num_shards=table.layout.dedup_shards,
                       table_name=table.name)
    return TableBatch(batch.row_splits, unique.unique_ids, tf.cast(unique.inverse, tf.int64),
                      batch.gains, batch.feature_row_counts)


class BlockSharding(Sharding):
    """A sharding whose roles are `DeviceCall`s on the table's blocks."""

    # The fused optimizer that applies a block's updates (a staticmethod), and where the
    # block-local ids stand in one update (`block_updates`).
    _apply_op: Callable[..., Any]
    _ids_position: int

    @abc.abstractmethod
    def block_lookups(self, batch: TableBatch, transport: Any) -> list[DeviceCall]:
        """Per block, the work of a lookup on its device; `combine_lookups` makes the
        activations from their results. `transport`: the block transport running them."""

    @abc.abstractmethod
    def combine_lookups(self, batch: TableBatch, block_results: list[tf.Tensor]) -> tf.Tensor:
        """The [R, dim] activations from each block's `block_lookups` result."""

    @abc.abstractmethod
    def block_updates(self, batch: TableBatch, activation_gradients: tf.Tensor,
                      transport: Any) -> list[Any]:
        """This replica's share of the update of each block."""

    def gather_call(self, block: int, local_ids: tf.Tensor) -> DeviceCall:
        """The rows `local_ids` of block `block`, read in place on its device."""
        variable = list(self.table.variables["parameters"])[block]
        return DeviceCall(self.table.layout.devices[block], [self.wire_ids(local_ids, block)],
                          lambda inputs: [ShardLayout.gather_block(variable, inputs[0],
                                                                   self.name)])

    def wire_ids(self, local_ids: tf.Tensor, block: int) -> Input:
        """Block `block`'s local ids as they may travel (`device_calls.narrowed`)."""
        return narrowed(local_ids, self.table.layout.rows[block])

    def apply_calls(self, replica_updates: Sequence[Sequence[Any]],
                    learning_rate: tf.Tensor) -> list[DeviceCall]:
        """Per block, the update of it on its device with all replicas' updates of that block.

        `replica_updates[r][b]` is replica r's `block_updates(...)[b]`.
        """
        return [DeviceCall(
                    device,
                    [self.wire_ids(tensor, block) if position == self._ids_position else tensor
                     for per_replica in replica_updates
                     for position, tensor in enumerate(per_replica[block])]
                    + [tf.cast(learning_rate, tf.float32)],
                    functools.partial(self._apply_block, block, len(replica_updates)))
                for block, device in enumerate(self.table.layout.devices)]

    def _apply_block(self, block: int, num_replicas: int,
                     inputs: list[tf.Tensor]) -> list[tf.Tensor]:
        """The fused optimizer on block `block`, from `apply_calls`' inputs."""
        *flat_updates, learning_rate = inputs
        size = len(flat_updates) // num_replicas
        updates = [tuple(flat_updates[replica * size:(replica + 1) * size])
                   for replica in range(num_replicas)]
        table = self.table
        optimizer = table.config.optimizer
        slots = {slot: list(table.variables[slot])[block] for slot in optimizer.slot_names()}
        self._apply_op(optimizer, list(table.variables["parameters"])[block], slots, updates,
                       learning_rate, table_name=self.name)
        return []
