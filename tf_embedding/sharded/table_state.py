"""What the sharded engine knows about one table: its config, the indices of the features that
look it up, its row layout and its variables, and what every sharding of it needs (its
features' outputs from its activations, its activation gradients from theirs, its rows).

How the table is split and where its pieces travel is its sharding's (`sharded/sharding/`).
"""

import dataclasses
from typing import Any, Sequence

import tensorflow as tf
from tensorflow.python.distribute import sharded_variable

from tf_embedding import ops
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.layout import ShardLayout


@dataclasses.dataclass(frozen=True)
class TableState:
    """One table of a `TPUEmbedding`.

    `variables` is the table's entry of the embedding's tracked `{"parameters": ..., <slot>:
    ...}` dict (filled by `build()`); every value is a `ShardedVariable` laid out by `layout`
    (a `WorkerBlockVariable` on a MultiWorkerMirroredStrategy cluster).
    """

    config: Any  # TableConfig
    feature_indices: tuple[int, ...]  # into the flattened feature_config, in order
    layout: ShardLayout
    variables: dict[str, Any]
    # A dynamic table's index and pool (`dynamic_table.DynamicTable`); None for a fixed table.
    dynamic: Any = None

    @property
    def name(self) -> str:
        return self.config.name

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

    def gather(self, unique_ids: tf.Tensor) -> tf.Tensor:
        """The rows `unique_ids` (distinct, in layout order) of the table, read on each block's
        device."""
        return self.layout.gather(self.variables["parameters"], unique_ids, self.name)

    def activation_gradients(self, batch: TableBatch,
                             flat_gradients: Sequence[tf.Tensor | None]) -> tf.Tensor:
        """This table's features' gradients stacked into [R, dim] (None: zeros)."""
        dim = self.config.dim
        counts = tf.unstack(batch.feature_row_counts, num=len(self.feature_indices))
        return tf.concat([
            tf.zeros(tf.stack([count, dim]), tf.float32) if flat_gradients[index] is None
            else tf.reshape(tf.cast(flat_gradients[index], tf.float32), [-1, dim])
            for index, count in zip(self.feature_indices, counts)], axis=0)


def learning_rates(tables: Sequence[TableState]) -> list[tf.Tensor]:
    """Each table's optimizer's learning rate for this update: a callable learning rate is
    evaluated once per optimizer and apply_gradients call."""
    by_optimizer: dict[int, tf.Tensor] = {}
    for state in tables:
        optimizer = state.config.optimizer
        if id(optimizer) not in by_optimizer:
            by_optimizer[id(optimizer)] = optimizer.learning_rate_tensor()
    return [by_optimizer[id(state.config.optimizer)] for state in tables]


def check_slot_layouts(tables: Sequence[TableState]) -> None:
    """Slots made by a `slot_variable_creation_fn` must be sharded like their table."""
    for state in tables:
        for slot, variable in state.variables.items():
            if not (isinstance(variable, sharded_variable.ShardedVariable) and
                    [block.shape[0] for block in variable] == list(state.layout.rows)):
                raise ValueError(
                    f"Slot '{slot}' of table {state.name} is not sharded like the table "
                    f"(row blocks {list(state.layout.rows)}). TPUEmbedding "
                    "creates slots itself; a slot_variable_creation_fn is not supported.")
