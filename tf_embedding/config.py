"""Embedding configuration: TableConfig, FeatureConfig, QuantizationConfig, RowIdInitializer.

These mirror `tf.tpu.experimental.embedding` of TensorFlow 2.21 argument for argument: same
defaults, same validation order and messages, same attributes and `__repr__`, so code written
against stock TensorFlow runs unchanged. `CustomCombiner` and `SparseCoreEmbeddingConfig` are
SparseCore-only and deliberately absent.
"""

import math
import numbers
from typing import Any, Callable, List, Optional, Sequence, Union

import tensorflow as tf
from absl import logging
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2
from tensorflow.python.ops import init_ops_v2

from tf_embedding import argument_checks as checks
from tf_embedding.combiners import COMBINERS
from tf_embedding.dynamic_vocabulary import DynamicVocabulary


def _default_initializer(dim: int) -> init_ops_v2.TruncatedNormal:
    """TF's default table initializer: truncated normal, mean 0, stddev 1/sqrt(dim)."""
    return init_ops_v2.TruncatedNormal(mean=0.0, stddev=1 / math.sqrt(dim))


def _is_default_initializer(initializer: Any, dim: int) -> bool:
    """True when `initializer` is TF's default, which `TableConfig.__repr__` prints as None."""
    return (isinstance(initializer, init_ops_v2.TruncatedNormal)
            and initializer.mean == 0.0
            and math.isclose(initializer.stddev, 1 / math.sqrt(dim)))


def _is_stock_custom_combiner(combiner: Any) -> bool:
    """True for a stock `tf.tpu.experimental.embedding.CustomCombiner` (SparseCore-only)."""
    from tensorflow.python.tpu import tpu_embedding_v2_utils  # pylint: disable=g-import-not-at-top
    return isinstance(combiner, tpu_embedding_v2_utils.CustomCombiner)


class QuantizationConfig:
    """Simulated quantization of looked-up embedding rows (the table itself stays float32).

    Each looked-up row is clipped to `[lower, upper]` and rounded to one of `num_buckets` evenly
    spaced levels before the combiner runs; see `quantize`.
    """

    def __init__(self, num_buckets: int, lower: float, upper: float):
        """TF's check of `num_buckets` (its message), then tf_embedding's: an int, finite
        bounds, lower < upper (argument_checks; else every value is NaN or a bound)."""
        if not isinstance(num_buckets, numbers.Real):  # TF's comparison would fail on it
            checks.check_integer("QuantizationConfig", "num_buckets", num_buckets, low=2)
        if num_buckets < 2:
            raise ValueError(f"num_buckets is {num_buckets}, must be at least 2 for "
                             f"simulated quantization.")
        checks.check_integer("QuantizationConfig", "num_buckets", num_buckets, low=2)
        checks.check_number("QuantizationConfig", "lower", lower)
        checks.check_number("QuantizationConfig", "upper", upper)
        if not lower < upper:
            checks.refuse("QuantizationConfig", "upper", upper, f"> `lower` ({lower!r})",
                          why="the quantum (upper - lower) / (num_buckets - 1) must be > 0")
        self.num_buckets = num_buckets
        self.lower = lower
        self.upper = upper

    def quantize(self, x: tf.Tensor) -> tf.Tensor:
        """Quantizes `x` elementwise, with an identity (straight-through) gradient.

        Forward: `x = clip(x, lower, upper); q = (upper - lower) / (num_buckets - 1);
        x = floor((x - lower) / q + 0.5) * q + lower`, computed in `x.dtype`.

        The gradient is the identity because on a TPU the quantization happens inside the embedding
        engine: the gradient with respect to the activations is applied to the table rows as if no
        quantization had taken place. A custom gradient (rather than `x + stop_gradient(q(x) - x)`)
        keeps the forward result bit-exact.
        """
        x = tf.convert_to_tensor(x)

        @tf.custom_gradient
        def _quantize(values: tf.Tensor):
            lower = tf.constant(self.lower, values.dtype)
            upper = tf.constant(self.upper, values.dtype)
            quantum = (upper - lower) / tf.constant(self.num_buckets - 1, values.dtype)
            clipped = tf.clip_by_value(values, lower, upper)
            rounded = tf.floor((clipped - lower) / quantum + 0.5) * quantum + lower
            return rounded, lambda upstream: upstream

        return _quantize(x)

    def get_config(self) -> dict[str, Any]:
        return {"num_buckets": self.num_buckets, "lower": self.lower, "upper": self.upper}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "QuantizationConfig":
        return cls(**config)

    def __repr__(self) -> str:
        return ("QuantizationConfig(num_buckets={num_buckets!r}, lower={lower!r}, "
                "upper={upper!r})".format(num_buckets=self.num_buckets, lower=self.lower,
                                          upper=self.upper))


def _check_combiner(combiner: Any) -> None:
    """TF's checks of `TableConfig(combiner=...)`; a stock CustomCombiner is named as
    SparseCore-only."""
    if isinstance(combiner, str):
        if combiner not in COMBINERS:
            raise ValueError(
                f"String argument `combiner` must be in {COMBINERS}. "
                f"Received: {combiner}")
    elif _is_stock_custom_combiner(combiner):
        raise ValueError(
            "CustomCombiner runs only on SparseCore (TPUEmbeddingV2) and is not supported by "
            f"tf_embedding; use one of {COMBINERS}. Received: {combiner}")
    else:
        raise ValueError(
            f"Argument `combiner` should either be a str or a CustomCombiner. "
            f"Received: {type(combiner)}")


def _check_table_arguments(vocabulary_size: Any, dim: Any, initializer: Any, optimizer: Any,
                           name: Any, quantization_config: Any, layout: Any,
                           dynamic: Any) -> None:
    """tf_embedding's checks of `TableConfig`, after TF's."""
    checks.check_integer("TableConfig", "vocabulary_size", vocabulary_size, low=1)
    checks.check_integer("TableConfig", "dim", dim, low=1)
    checks.check_initializer("TableConfig", "initializer", initializer)
    checks.check_optimizer("TableConfig", "optimizer", optimizer, refuse_numbers=True)
    checks.check_name("TableConfig", "name", name)
    if quantization_config is not None and not isinstance(quantization_config,
                                                          QuantizationConfig):
        checks.refuse("TableConfig", "quantization_config", quantization_config,
                      "None or a tf_embedding.QuantizationConfig(num_buckets, lower, upper)",
                      TypeError)
    if layout is not None and not isinstance(layout,
                                             sparse_core_layout_pb2.SparseCoreTableLayout):
        checks.refuse("TableConfig", "layout", layout,
                      "None or a SparseCoreTableLayout (SparseCore's; unused off a TPU)",
                      TypeError)
    if dynamic is not None and not isinstance(dynamic, DynamicVocabulary):
        checks.refuse("TableConfig", "dynamic", dynamic,
                      "None or a tf_embedding.DynamicVocabulary(...)", TypeError)


class TableConfig:
    """Configuration of one embedding table; several FeatureConfigs may share it.

    Identity-hashed (no `__eq__`), as in TensorFlow, because embedding classes key dicts by it.
    """

    # (Not in TF.) A `DynamicVocabulary`, or None: a fixed table (its instance attributes, then,
    # are exactly TF's).
    dynamic: Optional[DynamicVocabulary] = None

    def __init__(
        self,
        vocabulary_size: int,
        dim: int,
        initializer: Optional[Callable[..., Any]] = None,
        optimizer: Optional[Any] = None,
        combiner: str = "mean",
        name: Optional[str] = None,
        quantization_config: Optional[QuantizationConfig] = None,
        layout: Optional[Any] = None,
        dtype: tf.dtypes.DType = tf.float32,
        dynamic: Optional[DynamicVocabulary] = None,
    ):
        """Validates in TensorFlow's order (its messages), then what TF lets through
        (argument_checks): bools as sizes, an initializer not callable as (shape, dtype=...), an
        optimizer class or number, a name that is no non-empty string, a quantization config
        or layout of another type.

        `dynamic` (not in TF): a `DynamicVocabulary`; `vocabulary_size` is then the capacity."""
        if not isinstance(vocabulary_size, int) or vocabulary_size < 1:
            raise ValueError(
                f"Argument `vocabulary_size` must be an int and must be >= 1. "
                f"Received: {vocabulary_size}")

        if not isinstance(dim, int) or dim < 1:
            raise ValueError(
                f"Argument `dim` (embedding dimension) "
                f"must be an int and must be >= 1. Received: {dim}")

        if initializer is not None and not callable(initializer):
            raise ValueError(
                f"Argument `initializer` must be a callable (or None). "
                f"Received: {initializer}")
        if initializer is None:
            initializer = _default_initializer(dim)

        _check_combiner(combiner)

        if name is None:
            logging.warning(
                "Name of the table config must be specified for running on"
                " SparseCore. Different table configs must have unique names.")
        if dtype not in (tf.float32, tf.int32):
            raise ValueError(
                f"Argument `dtype` must be either float32 or int32. Received: {dtype}")

        _check_table_arguments(vocabulary_size, dim, initializer, optimizer, name,
                               quantization_config, layout, dynamic)

        self.vocabulary_size = vocabulary_size
        self.dim = dim
        self.initializer = initializer
        self.optimizer = optimizer
        self.combiner = combiner
        self.name = name
        self.quantization_config = quantization_config
        self.layout = layout
        self.dtype = dtype
        if dynamic is not None:  # a fixed table's attributes stay TF's
            self.dynamic = dynamic

    def __repr__(self) -> str:
        initializer = self.initializer
        if _is_default_initializer(initializer, self.dim):
            initializer = None
        return ("TableConfig(vocabulary_size={vocabulary_size!r}, dim={dim!r}, "
                "initializer={initializer!r}, optimizer={optimizer!r}, "
                "combiner={combiner!r}, name={name!r}, "
                "quantization_config={quantization!r}{dynamic})".format(
                    vocabulary_size=self.vocabulary_size,
                    dim=self.dim,
                    initializer=initializer,
                    optimizer=self.optimizer,
                    combiner=self.combiner,
                    name=self.name,
                    quantization=self.quantization_config,
                    dynamic="" if self.dynamic is None else f", dynamic={self.dynamic!r}",
                ))


class RowIdInitializer:
    """Initializes row `i` of a table to `i + offset` in every column; handy in tests."""

    def __init__(self, offset: int = 0):
        self.offset = offset

    def __call__(self, shape: Union[Sequence[int], tf.TensorShape],
                 dtype: tf.dtypes.DType) -> tf.Tensor:
        return tf.range(start=self.offset, limit=self.offset + shape[0], delta=1,
                        dtype=dtype)[:, None] * tf.ones(shape, dtype=dtype)

    def get_config(self) -> dict[str, Any]:
        return {"offset": self.offset}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "RowIdInitializer":
        return cls(**config)


def _check_feature_arguments(max_sequence_length: Any, output_shape: tf.TensorShape,
                             name: Any) -> None:
    """tf_embedding's checks of `FeatureConfig`, after TF's."""
    checks.check_integer("FeatureConfig", "max_sequence_length", max_sequence_length, low=0)
    if output_shape.rank == 0:
        checks.refuse("FeatureConfig", "output_shape", output_shape,
                      "None or a shape of rank >= 1, the batch first",
                      why="the activations have shape output_shape + [dim]")
    checks.check_name("FeatureConfig", "name", name)


class FeatureConfig:
    """Configuration of one feature: the table it is looked up in and its output layout."""

    def __init__(self,
                 table: TableConfig,
                 max_sequence_length: int = 0,
                 validate_weights_and_indices: bool = True,
                 output_shape: Optional[Union[List[int], tf.TensorShape]] = None,
                 name: Optional[str] = None):
        """Validates in TensorFlow's order (output_shape is converted before the bool check),
        then what TF lets through (argument_checks): a bool as `max_sequence_length`, an
        output shape of rank 0 (no batch), a name that is no non-empty string."""
        if not isinstance(table, TableConfig):
            raise ValueError(f"Argument `table` has invalid type {type(table)}. "
                             "Expected `tf.tpu.experimental.embedding.TableConfig`.")

        if not isinstance(max_sequence_length, int) or max_sequence_length < 0:
            raise ValueError(
                f"Argument `max_sequence_length` must be an int and must be >= 0. "
                f"Received: {max_sequence_length}")

        self.table = table
        self.max_sequence_length = max_sequence_length
        self.name = name
        self.output_shape = tf.TensorShape(output_shape)

        if not isinstance(validate_weights_and_indices, bool):
            raise ValueError(
                f"Argument `validate_weights_and_indices` must be a boolean. "
                f"Received: {validate_weights_and_indices}")
        self.validate_weights_and_indices = validate_weights_and_indices
        _check_feature_arguments(max_sequence_length, self.output_shape, name)

    def __repr__(self) -> str:
        return ("FeatureConfig(table={table!r}, "
                "max_sequence_length={max_sequence_length!r}, "
                "validate_weights_and_indices={validate_weights_and_indices!r}, "
                "output_shape={output_shape!r}, name={name!r})".format(
                    table=self.table,
                    max_sequence_length=self.max_sequence_length,
                    validate_weights_and_indices=self.validate_weights_and_indices,
                    output_shape=self.output_shape,
                    name=self.name))


def check_embedding_arguments(owner: str, feature_config: Any, optimizer: Any,
                              allow_empty: bool = True) -> None:
    """The arguments every embedding class shares (argument_checks): `feature_config` holds
    tf_embedding's or stock TF's FeatureConfigs (at least one unless `allow_empty`),
    `optimizer` is not a class."""
    checks.check_feature_config(
        owner, feature_config, (FeatureConfig, tf.tpu.experimental.embedding.FeatureConfig),
        "FeatureConfig (tf_embedding's or stock TF's)", allow_empty)
    checks.check_optimizer(owner, "optimizer", optimizer)
