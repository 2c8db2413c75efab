"""keras-rs's input kinds as the engine's: every feature becomes a rank-2 ragged batch.

keras-rs's CPU path (`EmbedReduce`, a Keras `Embedding` followed by a reduction) reduces the
last input dimension with the table's combiner:

* a dense `[B]` input is looked up without reduction; weights count only with the "sum"
  combiner (a one-id "mean" or "sqrtn" is the row itself);
* a dense `[..., L]` input reduces its L ids, every id counting (0 included), weighted by dense
  weights of the same shape (or, with the "sum" combiner, of a leading part of it, broadcast;
  keras-rs's "mean" and "sqrtn" of broadcast weights divide by the weights before they are
  broadcast, which is no weighted mean, and are refused);
* `tf.SparseTensor` `[B, L]` and `tf.RaggedTensor` `[B, None]` reduce each row's ids, with
  weights of the same kind and layout; an empty row gives zeros.

Each case is the same weighted lookup as a ragged batch of the ids that count, so the engine
looks up one kind whatever the user gave, and the SavedModel trace (stock ops) reads exactly
the lookups training read.
"""

from typing import Any, NamedTuple

import tensorflow as tf


class EngineInput(NamedTuple):
    """One feature as the engine looks it up, and how to shape its [rows, dim] activations."""

    ids: tf.RaggedTensor  # int64 ids, int64 row splits
    weights: tf.RaggedTensor | None  # float32, the ids' layout
    output_shape: tf.Tensor | None  # leading dims of a dense input of rank > 2, else None
    static_shape: tf.TensorShape  # the input's shape without its reduced dimension

    def finish(self, activations: tf.Tensor, dim: int) -> tf.Tensor:
        """The activations in the shape keras-rs gives this input: [B, dim] or [..., dim]."""
        if self.output_shape is not None:
            activations = tf.reshape(activations, tf.concat([self.output_shape, [dim]], axis=0))
        activations.set_shape(self.static_shape.concatenate([dim]))
        return activations


def _ids(values: Any) -> Any:
    return values if values.dtype == tf.int64 else tf.cast(values, tf.int64)


def _ragged(values: tf.Tensor) -> tf.RaggedTensor:
    return tf.RaggedTensor.from_tensor(values, row_splits_dtype=tf.int64)


def engine_input(path: str, inputs: Any, weights: Any, combiner: str) -> EngineInput:
    """`inputs` (and `weights`, or None) of feature `path` as a ragged batch (see module doc).

    Raises:
      TypeError: an input that is not a tensor, or weights of another kind than the input.
      ValueError: a scalar, a sparse or ragged input that is not of rank 2, or weights whose
        shape does not fit the input's.
    """
    if isinstance(inputs, tf.RaggedTensor):
        return _from_ragged(path, inputs, weights)
    if isinstance(inputs, tf.SparseTensor):
        return _from_sparse(path, inputs, weights)
    if isinstance(weights, (tf.RaggedTensor, tf.SparseTensor)):
        raise TypeError(f"Feature '{path}': weights are a {type(weights).__name__} but the "
                        "input is dense; give dense weights.")
    try:
        inputs = tf.convert_to_tensor(inputs)
    except (TypeError, ValueError) as error:
        raise TypeError(f"Feature '{path}': expected a Tensor, SparseTensor or RaggedTensor, "
                        f"got {type(inputs)}.") from error
    return _from_dense(path, inputs, weights, combiner)


def _check_same_kind(path: str, inputs: Any, weights: Any) -> None:
    if weights is not None and not isinstance(weights, type(inputs)):
        raise TypeError(f"Feature '{path}': weights must be a {type(inputs).__name__} like "
                        f"the input, got {type(weights).__name__}.")


def _from_ragged(path: str, inputs: tf.RaggedTensor, weights: Any) -> EngineInput:
    _check_same_kind(path, inputs, weights)
    if inputs.ragged_rank != 1 or inputs.shape.rank != 2:
        raise ValueError(f"Feature '{path}': a RaggedTensor input must have rank 2 (one "
                         f"ragged dimension), got shape {inputs.shape}.")
    ids = inputs.with_values(_ids(inputs.values)).with_row_splits_dtype(tf.int64)
    if weights is not None:
        weights = ids.with_values(tf.cast(weights.values, tf.float32))
    return EngineInput(ids, weights, None, inputs.shape[:1])


def _from_sparse(path: str, inputs: tf.SparseTensor, weights: Any) -> EngineInput:
    _check_same_kind(path, inputs, weights)
    if inputs.shape.rank != 2:
        raise ValueError(f"Feature '{path}': a SparseTensor input must have rank 2, got shape "
                         f"{inputs.shape}.")
    # Rows in canonical (row-major) order, as tf.sparse ops make them; column gaps are fine.
    ids = tf.RaggedTensor.from_value_rowids(_ids(inputs.values), inputs.indices[:, 0],
                                            nrows=inputs.dense_shape[0])
    if weights is not None:
        weights = ids.with_values(tf.cast(weights.values, tf.float32))
    return EngineInput(ids, weights, None, inputs.shape[:1])


def _from_dense(path: str, inputs: tf.Tensor, weights: Any, combiner: str) -> EngineInput:
    rank = inputs.shape.rank
    if rank is None or rank < 1:
        raise ValueError(f"Feature '{path}': a dense input must have rank 1 or more, got "
                         f"shape {inputs.shape}.")
    if not inputs.dtype.is_integer:
        # As Keras' Embedding does.
        inputs = tf.cast(inputs, tf.int32)
    inputs = _ids(inputs)
    if weights is not None:
        weights = tf.convert_to_tensor(weights)
        if weights.shape.rank is None or weights.shape.rank > rank or not (
                inputs.shape[:weights.shape.rank].is_compatible_with(weights.shape)):
            raise ValueError(f"Feature '{path}': the shape of `weights` {weights.shape} is not "
                             f"compatible with the shape of the input {inputs.shape}.")
        weights = tf.cast(weights, tf.float32)
    if rank == 1:
        # One id a row: no reduction, and only "sum" multiplies by the weight.
        kept = None if weights is None or combiner != "sum" else _ragged(weights[:, None])
        return EngineInput(_ragged(inputs[:, None]), kept, None, inputs.shape)
    if weights is not None and weights.shape.rank < rank:
        if combiner != "sum":
            # keras-rs divides by the weights before broadcasting them (a "mean" of one row's
            # ids weighted by w is their sum, whatever their count): not a weighted mean.
            raise ValueError(
                f"Feature '{path}': weights of shape {weights.shape} for input of shape "
                f"{inputs.shape} are broadcast over the reduced ids, which only the 'sum' "
                f"combiner defines; this table's is '{combiner}'. Give one weight per id.")
        weights = tf.reshape(weights, tf.concat(
            [tf.shape(weights), tf.ones([rank - weights.shape.rank], tf.int32)], axis=0))
        weights = tf.broadcast_to(weights, tf.shape(inputs))
    if rank == 2:
        return EngineInput(_ragged(inputs), None if weights is None else _ragged(weights), None,
                           inputs.shape[:1])
    length = tf.shape(inputs)[-1:]
    flat = lambda values: _ragged(tf.reshape(values, tf.concat([[-1], length], axis=0)))
    return EngineInput(flat(inputs), None if weights is None else flat(weights),
                       tf.shape(inputs)[:-1], inputs.shape[:-1])
