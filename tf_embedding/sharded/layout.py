"""Where the rows of a sharded table live, and how ids travel to them.

A table (and each of its slots) is split into contiguous row blocks, one per device, as TF splits
a TPU embedding table over its hosts: with `n` devices the first `vocabulary_size % n` blocks get
one extra row, and blocks that would be empty (fewer rows than devices) are not created. Each
block is a plain `ResourceVariable` on its device; a `ShardedVariable` groups them, so a
checkpoint stores one full-shape tensor as slices under TF's key, which restores into any other
block count and into the unsharded classes.
"""

import itertools
from typing import Any, Callable, Sequence

import tensorflow as tf
from tensorflow.python.distribute import sharded_variable
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.trackable import base as trackable_base

from tf_embedding import ops


def block_rows(vocabulary_size: int, num_devices: int) -> tuple[int, ...]:
    """The row count of each block of a table split over `num_devices` devices (empty blocks,
    which are not created, left out)."""
    base, extra = divmod(vocabulary_size, num_devices)
    rows = [base + 1] * extra + [base] * (num_devices - extra)
    return tuple(count for count in rows if count)


class ShardLayout:
    """The row blocks of one table: block `s` holds rows `[offsets[s], offsets[s + 1])` on
    `devices[s]` (None: the default device)."""

    def __init__(self, vocabulary_size: int, devices: Sequence[str | None]):
        self.rows = block_rows(vocabulary_size, len(devices))
        # Empty blocks come last, so the first len(rows) devices hold the blocks.
        self.devices = tuple(devices[:len(self.rows)])
        self.offsets = tuple(itertools.accumulate(self.rows, initial=0))

    def create_variable(self, name: str, shape: tuple[int, int], dtype: tf.DType,
                        initializer: Callable[..., Any],
                        trainable: bool) -> sharded_variable.ShardedVariable:
        """One variable per block, initialised with its rows of `initializer(shape, dtype)`.

        The full initial value is computed once and sliced, so the initial table does not depend
        on the block count. A pending checkpoint restore instead reads each block's slice from
        the checkpoint.
        """
        restoring = isinstance(initializer, trackable_base.CheckpointInitialValueCallable)
        full_value = None if restoring else initializer(shape, dtype=dtype)
        blocks = []
        for index, (device, offset, rows) in enumerate(
                zip(self.devices, self.offsets, self.rows)):
            with tf.device(device):
                if restoring:
                    value = initializer(shape, dtype=dtype, shard_info=trackable_base.ShardInfo(
                        shape=(rows, shape[1]), offset=(offset, 0)))
                else:
                    value = full_value[offset:offset + rows]
                # ResourceVariable directly, not tf.Variable: a strategy's variable creator (e.g.
                # MirroredStrategy's, when built under its scope) must not mirror the blocks.
                blocks.append(resource_variable_ops.ResourceVariable(
                    initial_value=value, name=f"{name}_{index}", dtype=dtype,
                    trainable=trainable))
        variable = sharded_variable.ShardedVariable(blocks, name=name)
        if restoring:
            # The blocks already hold the checkpoint's values; marking the container restored
            # (as a ResourceVariable marks itself) keeps the pending restore from reading the
            # checkpoint a second time.
            variable._maybe_initialize_trackable()  # pylint: disable=protected-access
            variable._update_uid = initializer.restore_uid  # pylint: disable=protected-access
        return variable

    def split(self, sorted_ids: tf.Tensor,
              *aligned: tf.Tensor) -> list[tuple[tf.Tensor, list[tf.Tensor]]]:
        """Per block: (block-local ids, the matching rows of each `aligned` tensor).

        `sorted_ids` are ascending table ids; block `s` owns the contiguous run of them in
        `[offsets[s], offsets[s + 1])`.
        """
        if len(self.rows) == 1:
            return [(sorted_ids, list(aligned))]
        inner = tf.constant(self.offsets[1:-1], tf.int64)
        bounds = tf.unstack(tf.concat([
            tf.zeros([1], tf.int64),
            tf.searchsorted(sorted_ids, inner, side="left", out_type=tf.int64),
            tf.size(sorted_ids, out_type=tf.int64)[None]], axis=0), num=len(self.rows) + 1)
        return [(sorted_ids[start:end] - offset, [tensor[start:end] for tensor in aligned])
                for start, end, offset in zip(bounds[:-1], bounds[1:], self.offsets)]

    def group_by_block(self, row_splits: tf.Tensor, ids: tf.Tensor,
                       gains: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """A CSR batch of R output rows with its lookups regrouped block by block.

        Returns (row_splits, ids, gains) over `len(rows) * R` rows: row `s * R + r` holds block
        `s`'s lookups of output row r, in their original order, so each block's lookups are a
        contiguous CSR batch of their own (`block_batches`). One block: the batch unchanged.
        """
        if len(self.rows) == 1:
            return row_splits, ids, gains
        num_rows = tf.size(row_splits, out_type=tf.int64) - 1
        lookup_rows = tf.repeat(tf.range(num_rows), row_splits[1:] - row_splits[:-1])
        blocks = tf.searchsorted(tf.constant(self.offsets[1:-1], tf.int64), ids, side="right",
                                 out_type=tf.int32)
        # A stable partition by block keeps each block's lookups in row order.
        order = tf.concat(tf.dynamic_partition(tf.range(tf.size(ids)), blocks, len(self.rows)),
                          axis=0)
        grouped_rows = tf.gather(tf.cast(blocks, tf.int64) * num_rows + lookup_rows, order)
        grouped_splits = tf.searchsorted(
            grouped_rows, tf.range(len(self.rows) * num_rows + 1), side="left",
            out_type=tf.int64)
        return grouped_splits, tf.gather(ids, order), tf.gather(gains, order)

    def block_batches(self, row_splits: tf.Tensor, ids: tf.Tensor,
                      gains: tf.Tensor) -> list[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
        """Per block, the CSR batch (row_splits over R rows, block-local ids, gains) of a batch
        grouped by `group_by_block`."""
        if len(self.rows) == 1:
            return [(row_splits, ids, gains)]
        num_rows = (tf.size(row_splits, out_type=tf.int64) - 1) // len(self.rows)
        batches = []
        for block, offset in enumerate(self.offsets[:-1]):
            splits = row_splits[block * num_rows:(block + 1) * num_rows + 1]
            start, end = splits[0], splits[-1]
            batches.append((splits - start, ids[start:end] - offset, gains[start:end]))
        return batches

    def gather(self, variable: sharded_variable.ShardedVariable, sorted_ids: tf.Tensor,
               table_name: str) -> tf.Tensor:
        """The rows `sorted_ids` (ascending) of `variable`, float `[len(sorted_ids), dim]`.

        Each block is read on its own device by the fused lookup (one lookup per output row),
        which reads the variable in place: a stock gather would switch the variable to
        copy-on-read, making every later in-place update copy the whole block.
        """
        parts = []
        # Iterating a ShardedVariable yields its blocks (`.variables` does not, inside a save).
        for (local_ids, _), block, device in zip(self.split(sorted_ids), variable, self.devices):
            with tf.device(device):
                count = tf.size(local_ids, out_type=tf.int64)
                parts.append(ops.embedding_lookup(
                    block, tf.range(count + 1), local_ids, tf.ones([count], tf.float32),
                    table_name=table_name))
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
