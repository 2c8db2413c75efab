"""What the Keras front ends' mixed-precision tests share: a step on unit activation gradients
and the refusal of `mixed_float16`, from the global policy or the layer's `dtype`."""

from typing import Any, Callable

import pytest
import tensorflow as tf

# (how the policy is set, what the refusal says of where it came from)
POLICY_SOURCES = [("global", "from Keras' global policy"),
                  ("argument", "from the layer's `dtype` argument")]


def step_on_unit_gradients(layer: Any, lookup: Callable[[], tf.Tensor]) -> tf.Tensor:
    """One update on loss = sum of the activations `lookup()` returns (unit activation
    gradients, exact in bfloat16), through the layer's gradient trap; those activations."""
    with tf.GradientTape() as tape:
        activations = lookup()
        loss = tf.reduce_sum(tf.cast(activations, tf.float32))
    tape.gradient(loss, layer.trainable_variables)
    return activations


def assert_mixed_float16_refused(make: Callable[..., Any], how: str, source: str,
                                 owner: str) -> None:
    """`make(**kwargs)` under mixed_float16 set `how` raises naming `owner`, the policy and
    `source`."""
    kwargs = {"dtype": "mixed_float16"} if how == "argument" else {}
    if how == "global":
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    with pytest.raises(ValueError, match=rf"{owner} '.*': dtype policy 'mixed_float16' "
                                         rf"\(compute float16, variables float32\), {source}"
                                         r".*loss scaling"):
        make(**kwargs)
