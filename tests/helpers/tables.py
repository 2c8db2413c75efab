"""Tables for the op tests: random values, and a table variable with its optimizer's slots."""

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

    return table_variable, optimizer._create_slots(table_variable, creator)
