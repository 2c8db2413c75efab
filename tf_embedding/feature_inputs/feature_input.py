"""One feature's input as the fused ops read it (`FeatureInput`), the shapes stock TF's CPU
lookup gives its activations, so that a table's stacked `[R, dim]` activations split back into
per-feature outputs, and how a ragged input fills a feature's `output_shape`
(`ragged_sequence_length`), which both paths' rules (`rules`, `cpu_rules`) read it by."""

import math
from typing import Any, List, NamedTuple, Optional, Sequence, Union

import tensorflow as tf

TensorLike = Union[tf.Tensor, tf.SparseTensor, tf.RaggedTensor]


class FeatureInput(NamedTuple):
    """One feature's ids as given by the user, with how to read them."""

    name: str
    tensor: TensorLike
    weight: Optional[TensorLike] = None
    max_sequence_length: int = 0
    # Stock safe_embedding_lookup_sparse: drop ids < 0, and weights <= 0 unless combiner is sum.
    prune_invalid: bool = False


def input_kind(tensor: TensorLike) -> str:
    """"dense", "sparse" or "ragged": how the ops read a feature's ids (or weights)."""
    if isinstance(tensor, tf.SparseTensor):
        return "sparse"
    if isinstance(tensor, tf.RaggedTensor):
        return "ragged"
    return "dense"


def check_ids_dtype(feature_name: str, dtype: tf.DType) -> None:
    """Raises TypeError, naming the feature, unless ids of `dtype` can index a table."""
    if dtype not in (tf.int32, tf.int64):
        raise TypeError(f"Feature {feature_name}: ids must be int32 or int64, got {dtype.name}.")


def ragged_sequence_length(feature: Any, batch_size: int) -> int:
    """Positions per sample for a ragged (or rank 2 sparse) input whose feature sets
    `output_shape`.

    0 means the input is pooled with the table's combiner (`output_shape` holds `batch_size`
    samples); otherwise `output_shape` holds `batch_size` sequences of the returned length.

    Raises:
      ValueError: `output_shape` is neither `batch_size` elements nor a multiple of it.
    """
    output_size = math.prod(feature.output_shape.as_list())
    if output_size == batch_size:
        return 0
    if 0 < batch_size < output_size and output_size % batch_size == 0:
        return output_size // batch_size
    raise ValueError(output_shape_factor_message(feature, batch_size))


def output_shape_factor_message(feature: Any, batch_size: Any) -> str:
    """TF's message for an `output_shape` that does not fit the input's batch size."""
    return ("Output shape set in the FeatureConfig should be the factor of "
            "the input data batch size. But instead got output shape {}, "
            "input data batch size {}".format(feature.output_shape, batch_size))


def activation_shape(feature: FeatureInput, dim: int) -> tf.Tensor:
    """The shape (int64) stock TF's CPU lookup gives this feature's activations.

    Dense: input shape + [dim]. Sparse: dense_shape[:-1] + [dim], or [B, msl, dim] for a
    sequence feature of rank 2 (or unknown rank). Ragged: [B, dim], or [B, msl, dim].
    """
    tensor, msl = feature.tensor, tf.constant([feature.max_sequence_length], tf.int64)
    kind = input_kind(tensor)
    if kind == "sparse":
        if feature.max_sequence_length > 0 and tensor.shape.rank in (None, 2):
            outer = tf.concat([tensor.dense_shape[:1], msl], axis=0)
        else:
            outer = tensor.dense_shape[:-1]
    elif kind == "ragged":
        batch = tf.reshape(tensor.nrows(out_type=tf.int64), [1])
        outer = tf.concat([batch, msl], axis=0) if feature.max_sequence_length > 0 else batch
    else:
        outer = tf.shape(tensor, out_type=tf.int64)
    return tf.concat([outer, tf.constant([dim], tf.int64)], axis=0)


def split_activations(activations: tf.Tensor, feature_row_counts: tf.Tensor,
                      features: Sequence[FeatureInput], dim: int) -> List[tf.Tensor]:
    """Splits a batch's stacked [R, dim] activations into each feature's output, given the
    output rows of each feature (`CsrBatch.feature_row_counts`). A lone feature's rows are all
    of them, with no split op (a step runs this per table)."""
    blocks = ([activations] if len(features) == 1 else
              tf.split(activations, feature_row_counts, num=len(features), axis=0))
    return [_shaped_activations(block, feature, dim) for block, feature in zip(blocks, features)]


def _shaped_activations(rows: tf.Tensor, feature: FeatureInput, dim: int) -> tf.Tensor:
    """A feature's [R, dim] activations in the shape `activation_shape` gives. A pooled feature
    of rank-2 ids (or dense ids of rank 1) has one row per sample, already its shape: it needs
    no reshape, nor the ops that would compute its shape, only its static batch size."""
    tensor = feature.tensor
    kind = input_kind(tensor)
    if (kind == "dense" and tensor.shape.rank == 1) or (
            feature.max_sequence_length == 0 and (
                kind == "ragged" or (kind == "sparse" and tensor.shape.rank == 2))):
        rows.set_shape([tensor.shape[0], dim])
        return rows
    return tf.reshape(rows, activation_shape(feature, dim))
