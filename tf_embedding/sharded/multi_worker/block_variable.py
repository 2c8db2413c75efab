"""`WorkerBlockVariable`: one table (or slot) of a multi-worker `TPUEmbedding`, of which this
worker holds only its own row block.

The table is laid out as one block per worker, by rank (`layout.ShardLayout` over the group's
devices, 'div' or 'mod'), or as one block on one worker (a table-wise `ShardingPlan` entry); a
block lives in exactly one process and nothing of the table is mirrored. What the rest of TensorFlow sees of the whole table is its checkpoint:

* **Saving.** MWMS's rule is that every worker saves, the chief (rank 0) to the real path and
  the others to temporary ones. Every worker's save therefore gathers the blocks (one collective
  gather, `WorkerGroup.all_gather`); rank 0 writes the whole table under TF's key, as one
  tensor, in the format of an unsharded stock variable, and the other ranks write only their own
  block ('div': as a slice of the full shape; 'mod', whose block is no slice: the whole table).
  The tensors are produced lazily (`SaveSpec` callables), only when a save runs.
* **Restoring.** Each worker reads only what its block needs: its slice ('div'), or the whole
  table, strided ('mod'). A checkpoint of any block count, strategy or process count restores, and
  a multi-worker checkpoint restores into one process, `TPUEmbeddingForServing` and stock TF.
"""

from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.trackable import base as trackable_base
from tensorflow.python.training.saving import saveable_object

from tf_embedding.sharded.layout import ShardLayout
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
                self.block = resource_variable_ops.ResourceVariable(
                    initial_value=layout.initial_block_value(initializer, shape, dtype,
                                                             self._index),
                    name=f"{name}_{group.rank}", dtype=dtype, trainable=trainable)
        if restoring:
            # The block already holds the checkpoint's value: keep the pending restore from
            # reading it a second time (as ShardLayout.create_variable does).
            self._maybe_initialize_trackable()
            self._update_uid = initializer.restore_uid

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
        in the same order)."""
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

    def _serialize_to_tensors(self) -> dict[str, Any]:
        key = trackable_base.VARIABLE_VALUE_KEY
        spec = _slice_spec(self.shape, self.layout, self.group.rank, self._index)
        if spec is None:
            return {key: saveable_object.SaveSpec(self.full_value, "", key, dtype=self.dtype,
                                                  device=self.group.device)}

        def own_block() -> tf.Tensor:
            # Every rank joins the gather the chief's save waits for, and keeps its block.
            full = self.full_value()
            return self.layout.block_value(full, self._index)

        return {key: {spec: saveable_object.SaveSpec(own_block, spec, key, dtype=self.dtype,
                                                     device=self.group.device)}}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> Any:
        if self.block is None:
            return tf.no_op()
        value = restored_tensors[trackable_base.VARIABLE_VALUE_KEY]
        if isinstance(value, dict):
            (value,) = value.values()
        if _slice_spec(self.shape, self.layout, self.group.rank, self._index) is None:
            # The whole table was read (the spec `_serialize_to_tensors` gave).
            return self.assign(value)
        return self.block.assign(value)


def _slice_spec(shape: tf.TensorShape, layout: ShardLayout, rank: int,
                index: int | None) -> str | None:
    """The slice spec (TF's "full shape offset,length:offset,length") of `rank`'s block (the
    table's block `index`), for a rank other than 0 with a contiguous block; None where the
    whole table is saved."""
    if rank == 0 or layout.strided or index is None:
        return None
    rows, dim = int(shape[0]), int(shape[1])
    return f"{rows} {dim} {layout.offsets[index]},{layout.rows[index]}:0,{dim}"
