"""A block's rows read from the checkpoint being restored, and no others.

Restored before `build`, a variable gets a `CheckpointInitialValueCallable` as its initializer,
which reads through TF's checkpoint reader: asked for a block's rows, that reader reads each
whole stored tensor or slice it touches (all of a one-process or stock checkpoint's table), so
every block of a large table would cost the whole table. `read_rows` reads the rows alone,
straight from the checkpoint's data files (`ops.restore_rows`).
"""

from typing import Any, NamedTuple

import tensorflow as tf
from tensorflow.python.trackable import base as trackable_base

from tf_embedding import ops


class CheckpointTensor(NamedTuple):
    """A variable's value in a checkpoint: the checkpoint's prefix and the value's key."""
    prefix: str
    key: str


def pending_value(initializer: Any) -> CheckpointTensor | None:
    """Where a restore-on-create initializer's value is, or None (not restoring, or a
    checkpoint whose node holds no single variable value)."""
    if not isinstance(initializer, trackable_base.CheckpointInitialValueCallable):
        return None
    position = initializer.checkpoint_position
    keys = [attribute.checkpoint_key for attribute in position.object_proto.attributes
            if attribute.name == trackable_base.VARIABLE_VALUE_KEY]
    prefix = position.checkpoint.save_path_string
    if len(keys) != 1 or not isinstance(prefix, str):
        return None
    return CheckpointTensor(prefix, keys[0])


def read_rows(value: CheckpointTensor, first_row: int, num_rows: int,
              table_name: str) -> tf.Tensor:
    """Rows [first_row, first_row + num_rows) of `value`, read alone."""
    return ops.restore_rows(value.prefix, value.key, tf.constant(first_row, tf.int64),
                            tf.constant(num_rows, tf.int64), table_name=table_name)

