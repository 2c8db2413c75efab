"""What the sharded engine knows about one table, and the per-table half of each step.

`TPUEmbedding` keeps one `TableState` per table: its config, the indices of the features that
look it up, its row layout and its variables. The three steps of a batch (convert on the host,
look up, turn activation gradients into block updates and apply them) are methods here, so
`tpu_embedding.py` only routes features, replicas and strategies.

How a table's lookups meet its blocks (the traffic between a worker and the PS tasks under
ParameterServerStrategy, docs/parameter_server_traffic.md):

* **rows** (tables of several blocks, by default): the ids are deduplicated once at enqueue time;
  each block receives its unique ids and returns their rows, which are combined where the step
  runs; the update sends each block its ids' summed gradient rows.
* **partial** (`partial=True`, and every table of one block): the lookups are grouped by block
  at enqueue time; each block combines its own lookups into partial activations [R, dim], summed
  in block order where the step runs; the update sends each block its lookups and the
  activation gradients, and the fused optimizer sums them per row on the block's task.

The work on each block is a `task_exchange.DeviceCall` (`block_lookups`, `apply_calls`): run in
place on the block's device, or under ParameterServerStrategy gathered per PS task into one
packet each way.
"""

import dataclasses
import functools
from typing import Any, Sequence

import tensorflow as tf

from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding import ops
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded import task_exchange
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
    partial: bool = False  # combine lookups on each block's device (see the module docstring)
    # Blocks on the workers of a MultiWorkerMirroredStrategy cluster, one per worker, reached
    # through collectives (sharded/multi_worker/): always the rows traffic.
    exchanged: bool = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def is_single_block(self) -> bool:
        return len(self.layout.rows) == 1

    @property
    def combines_on_owner(self) -> bool:
        """Whether each block combines its own lookups (the partial mode; a lone block always
        does, unless it is another worker's)."""
        return not self.exchanged and (self.partial or self.is_single_block)

    def split_outputs(self, activations: tf.Tensor, feature_row_counts: tf.Tensor,
                      output_shapes: Sequence[tf.TensorShape], feature_paths: Sequence[str],
                      partial: bool) -> list[tuple[int, tf.Tensor]]:
        """(feature index, activations in the feature's output shape) for this table's
        features, from its [R, dim] activations; `output_shapes` and `feature_paths` are every
        feature's. The rows must fill the shapes, or with `partial` fit a smaller batch; shapes
        whose batch size was unknown when they were fixed take a batch of any size."""
        shapes = [output_shapes[index].as_list() + [self.config.dim]
                  for index in self.feature_indices]
        partial = partial or any(shape[0] is None for shape in shapes)
        message = (
            f"Table {self.name}: the dequeued batch's rows per feature "
            f"{[feature_paths[index] for index in self.feature_indices]} do not fill their "
            f"output shapes {[shape[:-1] for shape in shapes]}"
            + ("" if partial else "; a smaller final batch dequeues with partial=True") +
            ". The output shapes come from FeatureConfig.output_shape, build() or the first "
            "enqueue, and must fit every batch.")
        # A batch that does not fit fails this op, which the step's outputs come from, so the
        # step stops before the batch is kept for apply_gradients (which follows the outputs).
        outputs = ops.feature_outputs(activations, feature_row_counts, shapes, partial,
                                             message, self.name)
        return list(zip(self.feature_indices, outputs))

    def convert(self, feature_inputs: Sequence[FeatureInput]) -> TableBatch:
        """One replica's features of this table -> its CSR batch: grouped by block in the
        partial mode, deduplicated in the rows mode."""
        table = self.config
        if ops.compiling_with_xla():
            self._check_compilable()
        batch = ops.features_to_csr(table.name, table.vocabulary_size, table.combiner,
                                           feature_inputs)
        if self.combines_on_owner:
            # Each block reads and updates straight from its lookups' ids (`lookup`,
            # `block_updates`), so deduplicating them would be wasted work.
            row_splits, ids, gains = self.layout.group_by_block(batch.row_splits, batch.ids,
                                                                batch.gains)
            inverse = None
        else:
            row_splits, gains = batch.row_splits, batch.gains
            # Unique ids in the layout's order (ascending for 'div', grouped by block for 'mod'),
            # so each block's ids are one contiguous run (`ShardLayout.split`).
            unique = ops.dedup(batch.ids, num_shards=self.layout.dedup_shards,
                                      table_name=table.name)
            ids, inverse = unique.unique_ids, tf.cast(unique.inverse, tf.int64)
        return TableBatch(row_splits, ids, inverse, gains, batch.feature_row_counts)

    @property
    def looks_up_features_directly(self) -> bool:
        """Whether `lookup_features` may be used: one block here, read as it is (no
        quantization)."""
        return (self.is_single_block and not self.exchanged
                and self.config.quantization_config is None)

    def looked_up_table(self) -> ops.LookedUpTable:
        """The table as `lookup_features` reads it. REQUIRES: looks_up_features_directly."""
        (block,) = list(self.variables["parameters"])
        return ops.LookedUpTable(block, self.config.name, self.config.vocabulary_size,
                                        self.config.combiner)

    def _check_compilable(self) -> None:
        """Raises ValueError if XLA cannot compile this table's steps."""
        if self.exchanged:
            raise ValueError(
                f"Table {self.name} is split over the workers of a MultiWorkerMirroredStrategy "
                "cluster, whose exchanges of ids and rows are collectives that "
                "jit_compile=True cannot hold: compile the step without jit_compile "
                "(docs/multi_worker.md).")
        if not self.is_single_block:
            raise ValueError(
                f"Table {self.name} is split into {len(self.layout.rows)} blocks (on "
                f"{[str(device) for device in self.layout.devices]}), but inside "
                "jit_compile=True a table must be one block on the step's device: an "
                "XLA-compiled function reads variables of its own device only, and splitting a "
                "batch's lookups by block has no static shape. Use the default strategy without "
                "table_devices, or compile the step without jit_compile.")

    def gather(self, unique_ids: tf.Tensor) -> tf.Tensor:
        """The rows `unique_ids` (distinct, in layout order) of the table, read on each block's
        device."""
        return self.layout.gather(self.variables["parameters"], unique_ids, self.name)

    def lookup(self, batch: TableBatch, rows: tf.Tensor | None) -> tf.Tensor:
        """One replica's [R, dim] activations (`rows`: the batch's unique rows, if pipelined)."""
        if rows is not None:
            return self.combine_rows(batch, rows)
        return self.combine_lookups(batch, [outputs[0] for outputs in task_exchange.run_in_place(
            self.block_lookups(batch))])

    @property
    def _blocks_combine_lookups(self) -> bool:
        """Whether each block combines its own lookups into partial activations (the partial
        mode without quantization), rather than returning rows to combine here.

        (A partial table of several blocks has neither rows nor quantization: TPUEmbedding
        rejects those combinations.)"""
        return self.combines_on_owner and self.config.quantization_config is None

    def block_lookups(self, batch: TableBatch,
                      exchange: task_exchange.TaskExchange | None = None
                      ) -> list[task_exchange.DeviceCall]:
        """Per block, the work of a lookup on its device, returning the block's [R, dim] partial
        activations (partial mode) or the rows of its unique ids; `combine_lookups` makes the
        activations from them. `exchange`: where the step's block batches are remembered."""
        blocks = list(self.variables["parameters"])
        if self._blocks_combine_lookups:
            return [task_exchange.DeviceCall(
                        device, [row_splits, self._wire_ids(ids, index), gains],
                        functools.partial(self._lookup_block, block))
                    for index, ((row_splits, ids, gains), block, device) in enumerate(zip(
                        self._block_batches(batch, exchange), blocks, self.layout.devices))]
        return [task_exchange.DeviceCall(device, [self._wire_ids(local_ids, index)],
                                         functools.partial(self._gather_block, block))
                for index, ((local_ids, _), block, device) in enumerate(zip(
                    self.layout.split(batch.unique_ids), blocks, self.layout.devices))]

    def _lookup_block(self, block: tf.Variable, inputs: list[tf.Tensor]) -> list[tf.Tensor]:
        """A block's fused lookup reads it in place and combines its own lookups."""
        row_splits, ids, gains = inputs
        return [ops.embedding_lookup(block, row_splits, ids, gains, table_name=self.name)]

    def _gather_block(self, block: tf.Variable, inputs: list[tf.Tensor]) -> list[tf.Tensor]:
        (local_ids,) = inputs
        return [ShardLayout.gather_block(block, local_ids, self.name)]

    def _wire_ids(self, local_ids: tf.Tensor, block: int) -> task_exchange.Input:
        """Block `block`'s local ids as they travel: int32 if the block has fewer than 2^31
        rows (the ids were checked against the vocabulary when converted)."""
        return task_exchange.Narrow(local_ids) if self.layout.rows[block] <= 2**31 else local_ids

    def combine_lookups(self, batch: TableBatch,
                        block_results: list[tf.Tensor]) -> tf.Tensor:
        """The [R, dim] activations from each block's `block_lookups` result: partial
        activations summed in block order (a fixed order, so the result does not depend on where
        the blocks are), or rows combined here."""
        if self._blocks_combine_lookups:
            return functools.reduce(tf.add, block_results)
        return self.combine_rows(
            batch, block_results[0] if len(block_results) == 1 else tf.concat(block_results, 0))

    def combine_rows(self, batch: TableBatch, rows: tf.Tensor) -> tf.Tensor:
        """The [R, dim] activations from the rows of the batch's unique ids (quantized first if
        the table says so)."""
        quantization = self.config.quantization_config
        if quantization is not None:
            rows = quantization.quantize(rows)
        return ops.embedding_lookup_dense(rows, batch.row_splits, batch.inverse_or_identity(),
                                          batch.gains, table_name=self.name)

    def _block_batches(self, batch: TableBatch,
                       exchange: task_exchange.TaskExchange | None = None
                       ) -> list[tuple[tf.Tensor, ...]]:
        """Per block, its lookups' CSR batch; made once per traced graph with `exchange`, so that
        the update finds the tensors the lookup sent."""
        def make() -> list[tuple[tf.Tensor, ...]]:
            return self.layout.block_batches(batch.row_splits, batch.unique_ids, batch.gains)

        if exchange is None:
            return make()
        return exchange.cached(("block batches", self.name, batch.row_splits.ref(),
                                batch.unique_ids.ref(), batch.gains.ref()), make)

    def activation_gradients(self, batch: TableBatch,
                             flat_gradients: Sequence[tf.Tensor | None]) -> tf.Tensor:
        """This table's features' gradients stacked into [R, dim] (None: zeros)."""
        dim = self.config.dim
        counts = tf.unstack(batch.feature_row_counts, num=len(self.feature_indices))
        return tf.concat([
            tf.zeros(tf.stack([count, dim]), tf.float32) if flat_gradients[index] is None
            else tf.reshape(tf.cast(flat_gradients[index], tf.float32), [-1, dim])
            for index, count in zip(self.feature_indices, counts)], axis=0)

    def block_updates(self, batch: TableBatch, activation_gradients: tf.Tensor,
                      exchange: task_exchange.TaskExchange | None = None) -> list[Any]:
        """This replica's share of the update of each block.

        Partial mode (and one block): per block, its lookups' CSR batch with the activation
        gradients (`ops.GradientBatch`), which the fused optimizer sums per row itself. Rows
        mode: per block, the block-local unique ids and their summed gradient rows
        (`BlockUpdate`), reduced once here. `exchange`: as `block_lookups`.
        """
        if self.combines_on_owner:
            return [(row_splits, ids, gains, activation_gradients)
                    for row_splits, ids, gains in self._block_batches(batch, exchange)]
        positions, values = ops.embedding_gradient(
            [(batch.row_splits, batch.inverse, batch.gains, activation_gradients)],
            table_name=self.name)
        touched_ids = tf.gather(batch.unique_ids, positions)
        return [(local_ids, rows[0])
                for local_ids, rows in self.layout.split(touched_ids, values)]

    def apply_calls(self, replica_updates: Sequence[Sequence[Any]],
                    learning_rate: tf.Tensor) -> list[task_exchange.DeviceCall]:
        """Per block, the update of it on its device with all replicas' updates of that block.

        `replica_updates[r][b]` is replica r's `block_updates(...)[b]`.
        """
        ids_position = 1 if self.combines_on_owner else 0  # in a block update (block_updates)
        return [task_exchange.DeviceCall(
                    device,
                    [self._wire_ids(tensor, block) if position == ids_position else tensor
                     for per_replica in replica_updates
                     for position, tensor in enumerate(per_replica[block])]
                    + [tf.cast(learning_rate, tf.float32)],
                    functools.partial(self._apply_block, block, len(replica_updates)))
                for block, device in enumerate(self.layout.devices)]

    def _apply_block(self, block: int, num_replicas: int,
                     inputs: list[tf.Tensor]) -> list[tf.Tensor]:
        """The fused optimizer on block `block`, from `apply_calls`' inputs."""
        *flat_updates, learning_rate = inputs
        size = len(flat_updates) // num_replicas
        updates = [tuple(flat_updates[replica * size:(replica + 1) * size])
                   for replica in range(num_replicas)]
        optimizer = self.config.optimizer
        slots = {slot: list(self.variables[slot])[block] for slot in optimizer.slot_names()}
        apply = ops.sparse_apply if self.combines_on_owner else ops.sparse_apply_rows
        apply(optimizer, list(self.variables["parameters"])[block], slots, updates,
              learning_rate, table_name=self.name)
        return []


def lookup_features(tables: Sequence[TableState],
                    table_inputs: Sequence[Sequence[FeatureInput]]
                    ) -> list[tuple[tf.Tensor, tf.Tensor]]:
    """One replica's features of each table -> (its [R, dim] activations, each feature's row
    count): `TableState.convert` + `lookup`'s bits, for a batch that no update follows, in one op
    per device holding tables (one op for all, on one device), so that its threads share every
    table's rows. REQUIRES: every table looks_up_features_directly."""
    positions_by_device: dict[str | None, list[int]] = {}
    for position, state in enumerate(tables):
        (device,) = state.layout.devices
        positions_by_device.setdefault(device, []).append(position)
    results: list[Any] = [None] * len(tables)
    for device, positions in positions_by_device.items():
        with tf.device(device):
            looked_up = ops.features_lookup(
                [tables[position].looked_up_table() for position in positions],
                [table_inputs[position] for position in positions])
        for position, result in zip(positions, looked_up):
            results[position] = result
    return results


def apply_updates(strategy: tf.distribute.Strategy, tables: Sequence[TableState],
                  num_replicas: int, updates: list[list[Any]],
                  exchange: task_exchange.TaskExchange | None) -> None:
    """`apply_gradients`' merge_call body: every block of `tables` is updated once, on its
    device, with all replicas' updates of it (`TableState.block_updates`, per table); through
    `exchange` (one packet per parameter-server task) if given."""
    calls = []
    for state, block_updates, learning_rate in zip(tables, updates, learning_rates(tables)):
        # Per replica, in replica order: its update of each block.
        replica_updates = [
            [tuple(strategy.experimental_local_results(part)[replica] for part in update)
             for update in block_updates]
            for replica in range(num_replicas)]
        calls += state.apply_calls(replica_updates, learning_rate)
    if exchange is None:
        task_exchange.run_in_place(calls)
    else:
        exchange.run(calls)


def learning_rates(tables: Sequence[TableState]) -> list[tf.Tensor]:
    """Each table's optimizer's learning rate for this update: a callable learning rate is
    evaluated once per optimizer and apply_gradients call."""
    by_optimizer: dict[int, tf.Tensor] = {}
    for state in tables:
        optimizer = state.config.optimizer
        if id(optimizer) not in by_optimizer:
            by_optimizer[id(optimizer)] = optimizer.learning_rate_tensor()
    return [by_optimizer[id(state.config.optimizer)] for state in tables]
