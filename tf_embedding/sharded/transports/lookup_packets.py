"""How a worker's lookups of a table travel between the workers of a MultiWorkerMirroredStrategy
cluster (`collective_rows`, `collective_gradients`): per lookup its block-local id (int64), and
its output row (int32) and gain (float32, bit for bit) packed into one int64, 16 bytes in all.
A part holds every id, then every packed pair, in CSR order."""

import tensorflow as tf


def pack(rows: tf.Tensor, gains: tf.Tensor) -> tf.Tensor:
    """int64 [n]: each lookup's output row (int32 [n]) and gain (float32 [n])."""
    return tf.bitcast(tf.stack([rows, tf.bitcast(gains, tf.int32)], axis=1), tf.int64)


def rows_of(packed: tf.Tensor) -> tf.Tensor:
    """The output rows (int64 [n]) of `pack`ed pairs."""
    return tf.cast(tf.bitcast(packed, tf.int32)[:, 0], tf.int64)


def unpack(lookups: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(block-local ids int64, output rows int64, gains float32) of a part: ids, then pairs."""
    ids, packed = tf.split(lookups, 2)
    pairs = tf.bitcast(packed, tf.int32)
    return ids, tf.cast(pairs[:, 0], tf.int64), tf.bitcast(pairs[:, 1], tf.float32)
