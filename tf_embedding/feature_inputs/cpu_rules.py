"""TF's rules for reading a feature on the CPU path, with TF's messages: `validate_features`
(structure, weights, kinds), then `cpu_lookup_plan`, which mirrors the branches of TF's
`cpu_embedding_lookup`, and `combiner_norm`, what a combiner divides a row's weighted sum by.

`TPUEmbeddingV0`, `TPUEmbeddingForServing`, `serving_embedding_lookup` and the front ends'
lookups follow them; the fused lookup converts a plan's `FeatureInput`, the stock-op serving
lookup picks the op it names. A dense `(B, 1)` input gives `(B, 1, dim)` here, `(B, dim)` on the
TPU path (`rules`).
"""

import dataclasses
from typing import Any, Callable, NamedTuple

import tensorflow as tf
from absl import logging
from tensorflow.python.util import nest

from tf_embedding.combiners import COMBINERS
from tf_embedding.feature_inputs.feature_input import FeatureInput, check_ids_dtype
from tf_embedding.feature_inputs.feature_input import ragged_sequence_length

Feature = tf.Tensor | tf.SparseTensor | tf.RaggedTensor


def combiner_norm(combiner: str, weights: tf.Tensor,
                  row_sum: Callable[[tf.Tensor], tf.Tensor]) -> tf.Tensor | None:
    """What `combiner` divides each row's weighted sum by (None: nothing, for "sum").

    "mean": the row's sum of weights; "sqrtn": the square root of its sum of squared weights.
    `row_sum` reduces per-lookup values to per-row sums (a segment sum, or a sum over a ragged
    dimension). The C++ conversion folds the same factor into each lookup's gain.
    """
    if combiner == "sum":
        return None
    if combiner == "mean":
        return row_sum(weights)
    if combiner == "sqrtn":
        return tf.sqrt(row_sum(weights * weights))
    raise ValueError(f"Unknown combiner {combiner!r}; expected one of {COMBINERS}.")


class ValidatedFeature(NamedTuple):
    """One flattened input with the config it is looked up with."""

    path: str
    inputs: Feature
    weights: tf.SparseTensor | tf.RaggedTensor | None
    feature: Any


def validate_features(inputs: Any, weights: Any | None,
                      feature_config: Any) -> list[ValidatedFeature]:
    """Pairs each input with its `FeatureConfig` after TF's structure, weight and type checks.

    `inputs` may be any sub-structure of `feature_config` (matched by joined string path);
    `weights` is None or has the structure of `inputs`, with None entries allowed.

    Raises:
      ValueError: with TF's message, at the first offending feature in flattening order.
    """
    flat_inputs = nest.flatten_with_joined_string_paths(inputs)
    flat_weights = [None] * len(flat_inputs)
    if weights is not None:
        nest.assert_same_structure(inputs, weights)
        flat_weights = nest.flatten(weights)
    flat_features = dict(nest.flatten_with_joined_string_paths(feature_config))

    input_keys = {key for key, _ in flat_inputs}
    if not input_keys.issubset(flat_features.keys()):
        raise ValueError(
            "Inputs are not a subset of feature_config. Inputs keys are {}, but"
            " feature_config keys are {}".format(input_keys, flat_features.keys()))

    validated = []
    for (path, inp), weight in zip(flat_inputs, flat_weights):
        feature = flat_features[path]
        _check_cpu_weight(path, inp, weight, feature)
        _check_cpu_input(path, inp, feature)
        validated.append(ValidatedFeature(path, inp, weight, feature))
    return validated


def _check_cpu_weight(path: str, inp: Any, weight: Any, feature: Any) -> None:
    if weight is None:
        return
    if isinstance(inp, tf.Tensor):
        raise ValueError("Weight specified for {}, but input is dense.".format(path))
    if type(weight) is not type(inp):
        raise ValueError(
            "Weight for {} is of type {} but it does not match type of the "
            "input which is {}.".format(path, type(weight), type(inp)))
    if feature.max_sequence_length > 0:
        raise ValueError(
            "Weight specified for {}, but this is a sequence feature.".format(path))


def _check_cpu_input(path: str, inp: Any, feature: Any) -> None:
    if isinstance(inp, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
        check_ids_dtype(path, inp.dtype)
    if isinstance(inp, tf.Tensor):
        if feature.max_sequence_length > 0:
            raise ValueError(
                "Feature {} is a sequence feature but a dense tensor "
                "was passed.".format(path))
    elif isinstance(inp, tf.RaggedTensor):
        if inp.shape.rank != 2:
            raise ValueError(
                "Only rank 2 ragged tensor is supported, but got rank {}".format(
                    inp.shape.rank))
        batch_size = inp.shape[0]
        if feature.output_shape and batch_size is not None:
            ragged_sequence_length(feature, batch_size)
    elif not isinstance(inp, tf.SparseTensor):
        raise ValueError(
            "Input {} is type {}. Tensor, SparseTensor or "
            "RaggedTensor expected.".format(path, type(inp)))


@dataclasses.dataclass(frozen=True)
class CpuLookupPlan:
    """How one feature is looked up on the CPU path, following TF's `cpu_embedding_lookup`.

    `feature_input` says how its ids are read (weights, pruning, sequence length); the fused
    lookup converts it, the serving lookup picks the stock op it names.
    """

    feature_input: FeatureInput
    # Reshape the activations to this (output_shape + [dim]) at the end.
    output_shape: list[int] | None = None
    # TF uses embedding_lookup_sparse: no pruning, and rows past the largest sample id present
    # are dropped.
    trim_trailing_rows: bool = False
    # Set for a ragged input with output_shape whose batch size is known only at run time: its
    # prod(output_shape) output rows hold either pooled samples or sequence positions.
    runtime_output_shape_feature: Any = None

    @property
    def sequence_length(self) -> int:
        """Positions per sample of a sequence feature (one lookup each); 0 when pooled."""
        return self.feature_input.max_sequence_length

    def finish(self, activations: tf.Tensor) -> tf.Tensor:
        """The conversion's activation block of this feature in the shape TF's CPU lookup
        gives it."""
        if self.trim_trailing_rows:
            # The largest sample id present, plus one; reduce_max of nothing is the minimum int.
            num_rows = tf.maximum(tf.reduce_max(self.feature_input.tensor.indices[:, 0]), -1) + 1
            activations = activations[:num_rows]
        if self.output_shape is not None:
            activations = tf.reshape(activations, self.output_shape)
        return activations


def cpu_lookup_plan(item: ValidatedFeature) -> CpuLookupPlan:
    """The CPU path's reading of one validated feature (see `CpuLookupPlan`)."""
    feature, inp, path = item.feature, item.inputs, item.path
    if isinstance(inp, tf.SparseTensor):
        rank = inp.shape.rank
        if not feature.output_shape and feature.max_sequence_length > 0 and rank in (None, 2):
            return CpuLookupPlan(FeatureInput(
                path, inp, max_sequence_length=feature.max_sequence_length))
        if feature.max_sequence_length > 0:
            logging.warning(
                "max_sequence_length setting will be ignored because the rank of the input "
                "tensor is %s which is not 2.", rank)
        if not feature.validate_weights_and_indices and rank is not None and rank <= 2:
            return CpuLookupPlan(FeatureInput(path, inp, item.weights),
                                 trim_trailing_rows=True)
        return CpuLookupPlan(FeatureInput(path, inp, item.weights,
                                                     prune_invalid=True))
    if isinstance(inp, tf.RaggedTensor):
        if feature.output_shape:
            output_shape = feature.output_shape.as_list() + [feature.table.dim]
            if inp.shape[0] is None:
                return CpuLookupPlan(FeatureInput(path, inp, item.weights),
                                     output_shape=output_shape,
                                     runtime_output_shape_feature=feature)
            # validate_features has checked that output_shape fits the batch size.
            sequence_length = ragged_sequence_length(feature, inp.shape[0])
            if sequence_length:
                # TF ignores the weights and the combiner of such a feature.
                return CpuLookupPlan(FeatureInput(
                    path, inp, max_sequence_length=sequence_length), output_shape=output_shape)
            return CpuLookupPlan(FeatureInput(path, inp, item.weights),
                                 output_shape=output_shape)
        if feature.max_sequence_length > 0:
            return CpuLookupPlan(FeatureInput(
                path, inp, max_sequence_length=feature.max_sequence_length))
        return CpuLookupPlan(FeatureInput(path, inp, item.weights))
    return CpuLookupPlan(FeatureInput(path, inp))
