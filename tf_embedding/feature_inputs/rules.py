"""TF's rules for reading a feature on the TPU path (`TPUEmbedding.enqueue` / `dequeue` /
`apply_gradients`), with TF's messages: accepted input kinds (`check_enqueue_types`), how the
CSR conversion reads one enqueued feature (`tpu_feature_input`), the output-shape rules
(`input_shape` ... `check_fully_defined`) and the gradients' checks (`check_gradients`).

A dense input gives one activation per id; shapes come from `FeatureConfig.output_shape`,
`build()` or the first enqueued features. The CPU path's rules (TF's `cpu_embedding_lookup`,
where a dense `(B, 1)` input gives `(B, 1, dim)`, `(B, dim)` here) are `cpu_rules`; both read a
ragged input's `output_shape` by `feature_input.ragged_sequence_length`.
"""

import math
from typing import Any, Sequence

import tensorflow as tf
from absl import logging
from tensorflow.python.util import nest

from tf_embedding.feature_inputs.feature_input import FeatureInput, ragged_sequence_length


def check_enqueue_types(paths: Sequence[str], flat_inputs: Sequence[Any]) -> None:
    """Raises ValueError for an input that is not a Tensor, SparseTensor or RaggedTensor.

    Kinds may be mixed in one call, as TF 2.21's enqueue accepts: each feature is converted by
    its own kind's rules into its table's CSR batch.
    """
    for path, inp in zip(paths, flat_inputs):
        if not isinstance(inp, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
            raise ValueError("Input {} is of unknown type {}. Please only pass "
                             "Tensor, SparseTensor or RaggedTensor as input to "
                             "enqueue.".format(path, type(inp)))


def tpu_feature_input(path: str, feature: Any, inp: Any, weight: Any,
                      output_shape: tf.TensorShape) -> FeatureInput:
    """How the CSR conversion reads one enqueued feature, after TF's weight checks.

    `output_shape` is the feature's, wherever it came from (`FeatureConfig.output_shape`,
    `build()` or the first enqueue). A dense input gives one row per id. A sparse input of rank
    above 2 gives `prod(dense_shape[:-1])` pooled rows. A rank 2 sparse or a ragged input gives
    `B` pooled rows, or `B * S` rows for a sequence of length `S`: `max_sequence_length` when
    the feature sets it and no `output_shape`; `prod(FeatureConfig.output_shape) / B` when that
    is larger than the batch; `prod(output_shape[1:])` for a shape from `build()` or an enqueue.

    Raises:
      ValueError: a weight for a dense input, a weight of another kind than its input, a weight
        for a sequence feature, or a ragged input with `output_shape` and no static batch size.
    """
    if isinstance(inp, tf.Tensor):
        if weight is not None:
            raise ValueError(
                "Weight specified for dense input {}, which is not allowed. "
                "Weight will always be 1 in this case.".format(path))
        # A TPU reads a dense input as one id per output row, whatever max_sequence_length says.
        return FeatureInput(path, inp)

    kind = "SparseTensor" if isinstance(inp, tf.SparseTensor) else "RaggedTensor"
    if weight is not None and not isinstance(weight, type(inp)):
        raise ValueError("Weight for {} is type {} which does not match "
                         "type input which is {}.".format(path, type(weight), kind))
    if not feature.output_shape and feature.max_sequence_length > 0:
        sequence_length = feature.max_sequence_length
        if isinstance(inp, tf.SparseTensor) and inp.shape.rank != 2:
            logging.warning("Input tensor is rank %d which is above 2, the "
                            "max_sequence_length setting will be ignored.", inp.shape.rank)
            sequence_length = 0
    elif output_shape and (isinstance(inp, tf.RaggedTensor) or inp.shape.rank == 2):
        if not feature.output_shape:
            # A shape from build() or an earlier enqueue, [B] or [B, S]: the per-replica batch
            # pooled, or B sequences of length S (also for a smaller final batch).
            sequence_length = math.prod(output_shape[1:]) if len(output_shape) > 1 else 0
        elif inp.shape[0] is not None:
            sequence_length = ragged_sequence_length(feature, inp.shape[0])
        elif isinstance(inp, tf.RaggedTensor):
            raise ValueError(
                f"Feature {path} sets output_shape, so its ragged input needs a static "
                "batch size (the first dimension of its shape).")
        else:
            sequence_length = 0
    else:
        sequence_length = 0
    # As in TF's serving lookup, so that training and serving read the same ids.
    prune_invalid = isinstance(inp, tf.SparseTensor) and feature.validate_weights_and_indices
    if sequence_length:
        if weight is not None:
            # The conversion gives every sequence position gain 1; TF's CPU lookup rejects
            # such weights too.
            raise ValueError(
                "Weight specified for {}, but this is a sequence feature.".format(path))
        return FeatureInput(path, inp, max_sequence_length=sequence_length)
    return FeatureInput(path, inp, weight, prune_invalid=prune_invalid)


# Output shapes on the TPU path. Every feature's activations have the per-replica shape
# `output_shape + [dim]`. `output_shape` comes, by priority, from `FeatureConfig.output_shape`,
# from `build(per_replica_input_shapes=...)` (or the deprecated batch-size arguments), or from
# the shapes of the first enqueued features; input shapes become output shapes by dropping
# their last dimension. Later inputs must agree with the stored shapes.

def input_shape(path: str, tensor: Any, feature: Any) -> tf.TensorShape:
    """The per-replica input shape TF derives from one enqueued feature (static shapes only).

    Raises:
      ValueError: the input's rank is not supported for its kind, or a dense input of rank 2 or
        more has a last dimension other than 1.
    """
    shape = tensor.shape.as_list()
    if isinstance(tensor, tf.SparseTensor):
        if len(shape) < 2:
            raise ValueError("Only rank 2 and above sparse tensor is supported,"
                             " find rank {} sparse tensor for input {}".format(len(shape), path))
        if not feature.output_shape and feature.max_sequence_length > 0 and len(shape) == 2:
            shape.insert(len(shape) - 1, feature.max_sequence_length)
    elif isinstance(tensor, tf.RaggedTensor):
        if len(shape) != 2:
            raise ValueError("Only rank 2 ragged tensor is supported,"
                             " find rank {} ragged tensor for input {}".format(len(shape), path))
        if not feature.output_shape and feature.max_sequence_length > 0:
            shape.insert(len(shape) - 1, feature.max_sequence_length)
    else:
        # TF's message says "sparse" here too.
        if len(shape) < 1:
            raise ValueError("Only rank 1 and above dense tensor is supported,"
                             " find rank {} sparse tensor for input {}".format(len(shape), path))
        if len(shape) > 1 and shape[-1] != 1:
            raise ValueError(
                "Input {}: Rank 2 or above dense tensor should have last dimension as 1 "
                "as the last dimension will always be reduced. "
                "Instead got dense tensor as shape {}".format(path, shape))
    return tf.TensorShape(shape)


def output_shapes_from_input_shapes(input_shapes: Sequence[tf.TensorShape],
                                    features: Sequence[Any]) -> list[tf.TensorShape]:
    """Drops each input shape's last dimension, after inserting `max_sequence_length` before it
    for rank 2 sequence inputs whose feature sets no `output_shape`."""
    output_shapes = []
    for shape, feature in zip(input_shapes, features):
        if shape.rank is None or shape.rank < 1:
            raise ValueError(
                "Received input tensor of shape {}. Rank must be 1 and above".format(shape))
        if (len(shape) == 2 and shape[-1] != 1 and not feature.output_shape
                and feature.max_sequence_length > 0):
            dims = shape.as_list()
            dims.insert(len(dims) - 1, feature.max_sequence_length)
            shape = tf.TensorShape(dims)
        output_shapes.append(shape if shape.rank == 1 else shape[:-1])
    return output_shapes


def output_shapes_from_batch_size(batch_size: int,
                                  features: Sequence[Any]) -> list[tf.TensorShape]:
    """The deprecated `per_replica_batch_size` path: `[B]`, or `[B, msl]` for sequence features."""
    return [tf.TensorShape([batch_size, feature.max_sequence_length])
            if not feature.output_shape and feature.max_sequence_length > 0
            else tf.TensorShape(batch_size)
            for feature in features]


def output_shapes_from_build_arguments(per_replica_input_shapes: Any,
                                       per_replica_batch_size: int | None,
                                       features: Sequence[Any]) -> list[tf.TensorShape] | None:
    """The output shapes `build()`'s arguments give, with TF's precedence and warnings; None
    when they give none."""
    output_shapes = None
    if per_replica_batch_size and per_replica_input_shapes is None:
        logging.warning(
            "per_replica_batch_size argument will be deprecated, please specify "
            "all the input shapes using per_replica_input_shapes argument.")
        output_shapes = output_shapes_from_batch_size(per_replica_batch_size, features)
    if per_replica_input_shapes is not None:
        if isinstance(per_replica_input_shapes, int):
            logging.warning(
                "Passing batch size to per_replica_input_shapes argument will be"
                " deprecated, please specify all the input shapes using"
                " per_replica_input_shapes argument.")
            output_shapes = output_shapes_from_batch_size(per_replica_input_shapes, features)
        else:
            nest.assert_same_structure(nest.flatten(per_replica_input_shapes), features)
            output_shapes = output_shapes_from_input_shapes(
                nest.flatten(per_replica_input_shapes), features)
    return output_shapes


def check_output_shapes(paths: Sequence[str], stored: Sequence[tf.TensorShape],
                        incoming: Sequence[tf.TensorShape]) -> None:
    """Raises ValueError where an incoming shape contradicts a stored one (unknown dims match)."""
    for path, old, new in zip(paths, stored, incoming):
        if not (old and new):
            continue
        # A rank 1 or 2 incoming shape may stand for a higher rank stored one (a ragged input
        # whose output_shape splits its batch); the lookup checks the element count instead.
        if len(new) in (1, 2) and len(old) > len(new):
            continue
        # TF treats unknown (and zero) dimensions as matching anything.
        if len(old) != len(new) or any(
                a and b and a != b for a, b in zip(old.as_list(), new.as_list())):
            raise ValueError(
                f"Inconsistent shape founded for input feature {path}, "
                f"Output shape is set to be {old}, "
                f"But got incoming output shape {new}")


def update_output_shapes(stored: Sequence[tf.TensorShape],
                         incoming: Sequence[tf.TensorShape]) -> list[tf.TensorShape]:
    """Stored shapes win; incoming ones fill the features that have none yet."""
    return [old if old else new for old, new in zip(stored, incoming)]


def check_fully_defined(paths: Sequence[str], shapes: Sequence[tf.TensorShape]) -> None:
    """Raises ValueError for the first feature whose output shape is not fully defined beyond
    its batch dimension. (TF requires the batch dimension too; here an unknown one, as a
    distributed dataset's is on several MultiWorkerMirroredStrategy workers when traced, makes
    every batch a partial one of any size: `FeatureOutputsSpec`.)"""
    for path, shape in zip(paths, shapes):
        if shape.rank is None or not shape[1:].is_fully_defined():
            raise ValueError(
                f"Input Feature {path} has output shape set as "
                f"{shape} which is not fully defined. "
                "Please specify the fully defined shape in either FeatureConfig "
                "or for the build method.")


def check_gradients(feature_config: Any, gradients: Any, output_shapes: Sequence[tf.TensorShape],
                    warned_paths: set[str]) -> list[tf.Tensor | None]:
    """TF's structure, type and shape checks of `apply_gradients`' gradients (the batch
    dimension may be unknown: the gradient of a `dequeue(partial=True)`); warns once per
    feature path (kept in `warned_paths`) that has no gradient.

    Returns:
      The flat gradients, None where a feature has none.
    """
    nest.assert_same_structure(feature_config, gradients)
    flat_gradients = []
    for (path, gradient), feature, output_shape in zip(
            nest.flatten_with_joined_string_paths(gradients), nest.flatten(feature_config),
            output_shapes):
        expected = output_shape.as_list() + [feature.table.dim]
        if gradient is not None and not isinstance(gradient, tf.Tensor):
            raise ValueError(f"found non-tensor type: {type(gradient)} at path {path}.")
        if gradient is not None and not _batch_shape_matches(gradient.shape, expected):
            raise ValueError("Found gradient of shape {} at path {}. Expected "
                             "shape {}.".format(gradient.shape, path, expected))
        if gradient is None and path not in warned_paths:
            warned_paths.add(path)
            logging.warning(
                "No gradient passed for feature %s, sending zero "
                "gradient. This may not be correct behavior for certain "
                "optimizers like Adam.", path)
        flat_gradients.append(gradient)
    return flat_gradients


def _batch_shape_matches(shape: tf.TensorShape, expected: list[int]) -> bool:
    """TF's exact shape check, except that the batch dimension may be statically unknown (in
    the gradient, or in the output shape: then any batch size matches)."""
    if shape.rank != len(expected):
        return False
    dims = shape.as_list()
    return dims[1:] == expected[1:] and (expected[0] is None or dims[0] in (None, expected[0]))
