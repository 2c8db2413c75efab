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

import tensorflow as tf

from tf_embedding import serialization

# The layer's own arguments besides the feature configs and the optimizer.
_OPTIONS = ("pipeline_execution_with_tensor_core", "batch_size", "tables_trained_by",
            "sharding_plan")


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


# The compute dtypes the layer's activations may come in; its tables and slots are float32.
COMPUTE_DTYPES = ("float32", "bfloat16")


def check_dtype_policy(layer: Any, given: bool) -> None:
    """The tables and slots are float32 and the activations float32 or, under a mixed policy,
    bfloat16 (`mixed_bfloat16`, the TPU's recommended policy: the lookup runs in float32 and
    its activations are cast to the compute dtype, as Keras layers return theirs). `given`:
    whether the layer's `dtype` argument set the policy (else Keras' global one did).

    Raises:
      ValueError: a policy whose variables are not float32, or that computes in another type,
        naming the policy and where it came from. `mixed_float16` is refused: Keras' loss
        scaling would scale the tables' gradients, which the embedding optimizer applies as
        they come.
    """
    compute, variables = str(layer.compute_dtype), str(layer.variable_dtype)
    if variables == "float32" and compute in COMPUTE_DTYPES:
        return
    source = ("the layer's `dtype` argument" if given
              else "Keras' global policy (keras.mixed_precision.set_global_policy)")
    why = ("mixed_float16's loss scaling would scale the tables' gradients, which the embedding "
           "optimizer applies unscaled; use 'mixed_bfloat16' (the TPU's policy) or 'float32'"
           if (compute, variables) == ("float16", "float32") else
           f"its tables and slots are float32 and its activations {' or '.join(COMPUTE_DTYPES)}")
    raise ValueError(
        f"{type(layer).__name__} '{layer.name}': dtype policy {layer.dtype_policy.name!r} "
        f"(compute {compute}, variables {variables}), from {source}, is not supported: {why}.")


def in_compute_dtype(layer: Any, activations: tf.Tensor) -> tf.Tensor:
    """Float32 activations in the layer's compute dtype (bfloat16 under mixed_bfloat16), as
    Keras layers return theirs; the cast's gradient brings the activation gradients back to
    float32 for the update."""
    compute = tf.as_dtype(str(layer.compute_dtype))
    return activations if compute == tf.float32 else tf.cast(activations, compute)
