"""The Keras `TPUEmbedding` layer's config: what `get_config` stores and `from_config` reads
back, so that `.keras` files, `model.to_json()` and `keras.models.clone_model` rebuild it.

The config holds the arguments the user gave (`GivenArguments`: the feature configs before the
layer cloned them, the optimizer before it was translated), as `tf_embedding.serialization`
writes them. A Keras optimizer given to the layer or to a table is saved by Keras'
serialization and rebuilt as a new object; its `iterations`, which a translated learning-rate
schedule reads, are saved with the tables (`optimizer_iterations`), so training continues from
the same step.
"""

import dataclasses
from typing import Any

from tf_embedding import serialization

# The layer's own arguments besides the feature configs and the optimizer.
_OPTIONS = ("pipeline_execution_with_tensor_core", "batch_size", "tables_trained_by")


@dataclasses.dataclass(frozen=True)
class GivenArguments:
    """The layer's arguments as the user gave them. A plain object, not a container, so that
    Keras' file saving does not walk into the Keras optimizers it may hold (their state is
    saved by name, `optimizer_iterations`)."""

    feature_config: Any
    optimizer: Any


def get_config(given: GivenArguments, options: dict[str, Any]) -> dict[str, Any]:
    """The layer's config besides Keras' base entries (name, trainable, dtype).

    Raises:
      ValueError: a table or optimizer setting a config cannot hold (naming the table, or the
        layer's optimizer, and the argument).
    """
    return {"feature_config": serialization.serialize_features(given.feature_config),
            "optimizer": serialization.serialize_optimizer(given.optimizer,
                                                           "The layer's `optimizer`"),
            **{name: options[name] for name in _OPTIONS}}


def from_config(config: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """(feature_config, optimizer, the other keyword arguments) of a layer's config."""
    rest = dict(config)
    feature_config = serialization.deserialize_features(rest.pop("feature_config"))
    optimizer = serialization.deserialize_optimizer(rest.pop("optimizer"))
    return feature_config, optimizer, rest


def optimizer_iterations(given: GivenArguments) -> dict[str, Any]:
    """{`keras_optimizer_<i>:iterations`: variable} of the distinct Keras optimizers among the
    given arguments (`serialization.keras_optimizers`)."""
    return {f"keras_optimizer_{index}:iterations": optimizer.iterations
            for index, optimizer in enumerate(
                serialization.keras_optimizers(given.feature_config, given.optimizer))}


def check_float32(layer: Any) -> None:
    """The tables and activations are float32: a Keras `dtype` that computes or stores in
    another type would be ignored, so it is refused.

    Raises:
      ValueError: a `dtype` (policy) whose compute or variable dtype is not float32.
    """
    dtypes = {str(layer.compute_dtype), str(layer.variable_dtype)}
    if dtypes != {"float32"}:
        raise ValueError(
            f"TPUEmbedding '{layer.name}' looks up and trains float32 tables and returns "
            f"float32 activations; dtype={layer.dtype_policy.name!r} (compute "
            f"{layer.compute_dtype}, variables {layer.variable_dtype}) is not supported. Leave "
            "`dtype` unset or give 'float32'.")
