"""Tables: random values and a table variable with its optimizer's slots (the op tests), and an
embedding object's tables and slots, as variables or values by name."""

from typing import Any

import numpy as np
import tensorflow as tf


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
