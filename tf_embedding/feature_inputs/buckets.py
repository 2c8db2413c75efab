"""Id lists padded to a power of two, so that a compiled step sees few shapes.

XLA compiles a `jit_compile=True` function once per shape of its inputs, and a batch of
`SparseTensor` or `RaggedTensor` ids has a new value count almost every time. The sharded
`TPUEmbedding` pads inside `enqueue` when the step is written in the TPU's program shape
(docs/xla.md). Where the ids themselves enter the compiled function (`TPUEmbeddingV0`, the Keras
layer under `model.fit(jit_compile=True)`, an `enqueue` inside the compiled function),
`pad_ids_to_power_of_two` pads them before, typically in the `tf.data` pipeline: the padding is
lookups of id -1, which a feature with `validate_weights_and_indices=True` (the default) prunes
as stock TF's CPU lookup does, so the activations, gradients and updates are those of the
unpadded batch.
"""

from typing import Optional, Union

import tensorflow as tf

Ids = Union[tf.SparseTensor, tf.RaggedTensor]

# The padded batches' dense_shape[1]: one value for every batch, because XLA takes a
# SparseTensor's dense_shape as a compile-time constant (it sizes the conversion's outputs), so
# a column count that followed the batch would compile again for each. Pooled lookups read
# dense_shape[1] only as the columns' bound.
_COLUMNS = 2**31 - 1


def pad_ids_to_power_of_two(
        ids: Ids, weights: Optional[Ids] = None
) -> tuple[tf.SparseTensor, Optional[tf.SparseTensor]]:
    """A feature's `[batch, None]` ids (and weights, of the same structure) as `SparseTensor`s
    whose value count is the next power of two at or above the batch's.

    The added lookups are id -1 (weight 0) in the last row, at columns past the input's
    `dense_shape[1]`, which becomes 2^31 - 1 (or more, to hold them), whatever the batch: the
    order of the indices stays canonical, and the dense shape, which XLA compiles in as a
    constant, stays the same from batch to batch. They are pruned by every
    feature that validates its weights and indices (`FeatureConfig`'s default); a feature with
    `validate_weights_and_indices=False` rejects a negative id. A batch without rows is
    returned unpadded.

    Raises:
      TypeError: `ids` or `weights` is neither a `SparseTensor` nor a `RaggedTensor`.
      ValueError: `ids` is not of rank 2.
    """
    sparse_ids = _as_sparse(ids, "ids")
    if sparse_ids.shape.rank != 2:
        raise ValueError(f"pad_ids_to_power_of_two takes ids of rank 2 ([batch, None]); got "
                         f"shape {sparse_ids.shape}")
    count = tf.shape(sparse_ids.values, out_type=tf.int64)[0]
    rows, columns = sparse_ids.dense_shape[0], sparse_ids.dense_shape[1]
    padding = tf.where(rows > 0, _next_power_of_two(count) - count, tf.constant(0, tf.int64))
    indices = tf.concat([sparse_ids.indices, tf.stack(
        [tf.fill([padding], rows - 1), columns + tf.range(padding)], axis=1)], axis=0)
    dense_shape = tf.stack([rows, tf.maximum(columns + padding, _COLUMNS)])

    def padded(values: tf.Tensor, fill: Union[int, float]) -> tf.SparseTensor:
        values = tf.concat([values, tf.fill([padding], tf.constant(fill, values.dtype))], axis=0)
        return tf.SparseTensor(indices, values, dense_shape)

    padded_weights = None
    if weights is not None:
        padded_weights = padded(_as_sparse(weights, "weights").values, 0)
    return padded(sparse_ids.values, -1), padded_weights


def _as_sparse(value: Ids, what: str) -> tf.SparseTensor:
    if isinstance(value, tf.SparseTensor):
        return value
    if isinstance(value, tf.RaggedTensor):
        return value.to_sparse()
    raise TypeError(f"pad_ids_to_power_of_two takes {what} as a SparseTensor or a "
                    f"RaggedTensor; got {type(value).__name__}")


def _next_power_of_two(count: tf.Tensor) -> tf.Tensor:
    """The least power of two >= `count` (int64, >= 1): every bit below the highest set bit of
    `count - 1` set, plus one."""
    value = tf.maximum(count, 1) - 1
    for shift in (1, 2, 4, 8, 16, 32):
        value = tf.bitwise.bitwise_or(
            value, tf.bitwise.right_shift(value, tf.constant(shift, tf.int64)))
    return value + 1
