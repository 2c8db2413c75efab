"""Tables: random values, a table variable with its optimizer's slots, and steps of an update op
on them against numpy's rule (the op tests); an embedding object's tables and slots, as variables
or values by name."""

from typing import Any

import numpy as np
import tensorflow as tf

from helpers.references import reference_step


def random_table(vocab: int, dim: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    """A [vocab, dim] float32 table of normal values times `scale`."""
    return (np.random.default_rng(seed).normal(size=[vocab, dim]) * scale).astype(np.float32)


def make_variables(optimizer, table: np.ndarray):
    """(table variable "video", {slot name: slot variable}) as the optimizer creates them."""
    table_variable = tf.Variable(table, name="video")

    def creator(name, initializer):
        return tf.Variable(initializer(table.shape, tf.float32), name=f"video/{name}")

    # private: TF's slot protocol is the one way to make an optimizer's slots as engines do.
    return table_variable, optimizer._create_slots(table_variable, creator)


def train_table(optimizer, table: np.ndarray, steps, learning_rates, apply):
    """(table, [slot values in slot_names() order]) after `apply(optimizer, table_variable,
    slot_variables, step, lr)` for each step and learning rate, from `table` and the
    optimizer's initial slots (`make_variables`)."""
    table_variable, slot_variables = make_variables(optimizer, table)
    for step, lr in zip(steps, learning_rates):
        apply(optimizer, table_variable, slot_variables, step, lr)
    return table_variable.numpy(), [slot_variables[n].numpy() for n in optimizer.slot_names()]


def reference_training(optimizer, table: np.ndarray, batches_per_step, learning_rates):
    """`train_table`'s result by numpy's rule (references.reference_step) on CSR batches."""
    table = table.copy()
    _, slot_variables = make_variables(optimizer, table)
    slots = [slot_variables[n].numpy() for n in optimizer.slot_names()]
    for batches, lr in zip(batches_per_step, learning_rates):
        reference_step(optimizer, table, slots, batches, lr)
    return table, slots


def assert_same_training(actual, expected, pow_rule: bool = False) -> None:
    """The tables and slots of two `train_table` results, bit for bit; a rule that uses pow may
    differ from numpy's pow by an ulp or so (rtol 1e-5, atol 1e-6)."""
    tolerance = dict(rtol=1e-5, atol=1e-6) if pow_rule else dict(rtol=0, atol=0)
    for got, want in zip([actual[0], *actual[1]], [expected[0], *expected[1]]):
        np.testing.assert_allclose(got, want, **tolerance)


def table_variables(embedding) -> dict[str, dict[str, Any]]:
    """{table name: {"parameters": table, <slot name>: slot}}, each variable whole: a
    tf_embedding object's `table_variables()` (the embedding classes, the Keras layers), or
    what stock TF's classes keep in `_variables`."""
    if hasattr(embedding, "table_variables"):
        return embedding.table_variables()
    return embedding._variables  # private: stock TF's TPUEmbedding publishes no slots


def table_values(embedding) -> dict[str, np.ndarray]:
    """{"<table>/<slot or parameters>": value} of every variable of `table_variables`."""
    return {f"{table}/{name}": tf.convert_to_tensor(variable).numpy()
            for table, variables in table_variables(embedding).items()
            for name, variable in variables.items()}
