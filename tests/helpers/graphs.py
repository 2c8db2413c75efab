"""What a traced tf.function runs."""

import collections
from typing import Any

import tensorflow as tf


def custom_op_counts(function: tf.types.experimental.PolymorphicFunction,
                     *args: Any) -> collections.Counter:
    """How many ops of each tf_embedding op type a trace of `function` on `args` has, in its
    graph and the functions nested in it (control flow branches, gradients)."""
    graph_def = function.get_concrete_function(*args).graph.as_graph_def()
    nodes = [*graph_def.node, *(node for f in graph_def.library.function for node in f.node_def)]
    return collections.Counter(node.op for node in nodes if node.op.startswith("Tfe"))


def custom_ops(function: tf.types.experimental.PolymorphicFunction, *args: Any) -> set[str]:
    """The tf_embedding op types a trace of `function` on `args` runs (`custom_op_counts`)."""
    return set(custom_op_counts(function, *args))
