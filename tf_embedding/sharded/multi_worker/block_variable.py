"""`WorkerBlockVariable`: one table (or slot) of a multi-worker `TPUEmbedding`, of which this
worker holds only its own row block.

The table is laid out as one block per worker, by rank (`layout.ShardLayout` over the group's
devices, 'div' or 'mod'), or as one block on one worker (a table-wise `ShardingPlan` entry); a
block lives in exactly one process and nothing of the table is mirrored. What the rest of
TensorFlow sees of the whole table is its checkpoint:

* **Building.** Each worker computes only its block's initial rows where the initializer allows
  it, a window at a time (`ShardLayout.initial_block_windows`).
* **Saving.** Each worker writes only its block, as a slice of the full shape, into the chief's
  checkpoint (`block_saver`); a 'mod' table, whose blocks are no slices, as windows of rows the
  workers exchange (`strided_windows`).
* **Restoring.** Each worker reads only its block's rows ('mod': a window of the table at a
  time, before `build`). A checkpoint of any block count, strategy or process count restores,
  and a multi-worker checkpoint restores into one process, `TPUEmbeddingForServing` and stock
  TF.
"""

from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.trackable import base as trackable_base
from tensorflow.python.training.saving import saveable_object

from tf_embedding import ops
from tf_embedding.sharded.layout import ShardLayout
from tf_embedding.sharded.multi_worker import strided_windows
from tf_embedding.sharded.multi_worker.group import WorkerGroup
from tf_embedding.sharded.strided_variable import interleave


class WorkerBlockVariable(trackable_base.Trackable):
    """This worker's block of a table of shape `shape` split over `group` by `layout`.

    Attributes:
      block: the block's `ResourceVariable` on this worker, or None when this rank owns no
        block (a table with fewer rows than workers, or another worker's whole table).
      layout: the table's blocks, on the group's devices.
      owners: each block's rank.
      shape, dtype, name: the whole table's.
    """

    def __init__(self, name: str, shape: tuple[int, int], dtype: tf.DType,
                 initializer: Callable[..., Any], trainable: bool, layout: ShardLayout,
                 group: WorkerGroup):
        self.name = name
        self.shape = tf.TensorShape(shape)
        self.dtype = dtype
        self.layout = layout
        self.group = group
        self.block = None
        self.owners = group.ranks_of(layout.devices)
        # This rank's block among the table's, if it owns one.
        self._index = self.owners.index(group.rank) if group.rank in self.owners else None
        restoring = isinstance(initializer, trackable_base.CheckpointInitialValueCallable)
        if self._index is not None:
            with tf.device(group.device):
                self.block = self._initialised_block(initializer, dtype, trainable)
        if restoring:
            # The block already holds the checkpoint's value: keep the pending restore from
            # reading it a second time (as ShardLayout.create_variable does).
            self._maybe_initialize_trackable()
            self._update_uid = initializer.restore_uid

    def _initialised_block(self, initializer: Callable[..., Any], dtype: tf.DType,
                           trainable: bool) -> tf.Variable:
        """This rank's block variable holding its initial rows, written a window at a time
        where the initializer allows it (`ShardLayout.initial_block_windows`), so no temporary
        of the block's size is made."""
        shape = (int(self.shape[0]), int(self.shape[1]))
        windows = self.layout.initial_block_windows(initializer, shape, dtype, self._index)
        name = f"{self.name}_{self.group.rank}"
        if windows is None:
            return resource_variable_ops.ResourceVariable(
                initial_value=self.layout.initial_block_value(initializer, shape, dtype,
                                                              self._index),
                name=name, dtype=dtype, trainable=trainable)
        block = resource_variable_ops.ResourceVariable(
            initial_value=tf.zeros([self.layout.rows[self._index], shape[1]], dtype),
            name=name, dtype=dtype, trainable=trainable)
        first_row = 0
        for window in windows:
            ops.assign_rows(block, tf.constant(first_row, tf.int64), window,
                            table_name=self.name)
            first_row += int(window.shape[0])
        return block

    @property
    def block_index(self) -> int | None:
        """This rank's block among the table's (None: it owns none)."""
        return self._index

    @property
    def owns_block(self) -> bool:
        return self.block is not None

    def _padded_block(self) -> tf.Tensor:
        """This rank's block padded to the largest block's rows (the gather needs one shape)."""
        rows = max(self.layout.rows)
        dim = int(self.shape[1])
        if self.block is None:
            return tf.zeros([rows, dim], self.dtype)
        value = tf.convert_to_tensor(self.block)
        return tf.pad(value, [[0, rows - int(self.block.shape[0])], [0, 0]])

    def full_value(self) -> tf.Tensor:
        """The whole table, gathered from every worker (a collective: call it on every worker,
        in the same order).

        Raises:
          ValueError: the whole table is larger than the memory a worker had available when
            the cluster formed (the same answer on every worker); read a table that large a
            block at a time (`TPUEmbedding.table_blocks`).
        """
        table_bytes = self.shape.num_elements() * self.dtype.size
        if table_bytes > self.group.least_available_bytes:
            raise ValueError(
                f"Table variable '{self.name}' is {table_bytes / 2**30:.2f} GiB whole "
                f"({self.shape[0]} x {self.shape[1]} {self.dtype.name}), more than the "
                f"{self.group.least_available_bytes / 2**30:.2f} GiB a worker had available "
                "when the cluster formed, so it cannot be gathered onto every worker: read it "
                "a block at a time (TPUEmbedding.table_blocks(), each worker its own rows), or "
                "save a checkpoint (each worker writes its own blocks).")
        keys = self.group.exchange_keys()
        padded_rows = max(self.layout.rows)
        with tf.device(self.group.device):
            gathered = self.group.all_gather(self._padded_block(), keys[0])
            blocks = [gathered[rank * padded_rows:rank * padded_rows + rows]
                      for rank, rows in zip(self.owners, self.layout.rows)]
            if self.layout.strided:
                return interleave(blocks)
            return tf.concat(blocks, axis=0)

    def assign(self, value: Any) -> Any:
        """Sets the whole table to `value` ([rows, dim], the same on every worker): this
        worker keeps its block's rows. No collective."""
        if self.block is None:
            return tf.no_op()
        return self.block.assign(self.layout.block_value(value, self._index))

    def saved_slices(self) -> list[tuple[str, tf.Tensor]]:
        """(slice spec, value) of each slice of the full shape this worker writes into a
        checkpoint (`block_saver`): its block; for a 'mod' table, windows of rows that its
        workers exchange (`strided_windows`); a 'mod' table with fewer rows than workers is
        gathered and the chief writes it whole. A collective for 'mod': every worker calls it,
        in the same order."""
        if self.layout.strided:
            if len(self.owners) == self.group.size:
                return strided_windows.saved_windows(self)
            full = self.full_value()
            return [("", full)] if self.group.rank == 0 else []
        if self.block is None:
            return []
        return [(_slice_spec(self.shape, self.layout, self._index),
                 tf.convert_to_tensor(self.block))]

    def writing_ranks(self) -> tuple[int, ...]:
        """The ranks whose `saved_slices` are not empty."""
        if self.layout.strided and len(self.owners) < self.group.size:
            return (0,)
        if self.layout.strided:
            return strided_windows.writing_ranks(self)
        return self.owners

    def _serialize_to_tensors(self) -> dict[str, Any]:
        # What a restore reads: this block's slice ('mod': the whole table; no block: the first
        # row, ignored). A save writes nothing here: `block_saver` writes the blocks.
        key = trackable_base.VARIABLE_VALUE_KEY
        spec = self._restore_spec()
        return {key: {spec: saveable_object.SaveSpec(lambda: None, spec, key, dtype=self.dtype,
                                                     device=self.group.device)}}

    def _restore_spec(self) -> str:
        if self.layout.strided:
            return ""
        if self.block is None:
            rows, dim = int(self.shape[0]), int(self.shape[1])
            return f"{rows} {dim} 0,1:0,{dim}"
        return _slice_spec(self.shape, self.layout, self._index)

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> Any:
        if self.block is None:
            return tf.no_op()
        value = restored_tensors[trackable_base.VARIABLE_VALUE_KEY]
        if isinstance(value, dict):
            (value,) = value.values()
        if self.layout.strided:
            # The whole table was read.
            return self.assign(value)
        return self.block.assign(value)


def _slice_spec(shape: tf.TensorShape, layout: ShardLayout, index: int) -> str:
    """The slice spec (TF's "full shape offset,length:offset,length") of the table's contiguous
    block `index`."""
    rows, dim = int(shape[0]), int(shape[1])
    return f"{rows} {dim} {layout.offsets[index]},{layout.rows[index]}:0,{dim}"
