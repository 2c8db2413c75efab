"""The checkpoint tests' fixture and helpers, shared by the checkpoint tests of the serving,
replicated and sharded classes.

The fixture is the reference's: tables video 8x4 (sum, two features) and user 16x2 (mean), with
inputs for its three features and arguments for each optimizer class. The helpers write a
checkpoint, read its object graph (to compare with stock's), set or read every table and slot
variable of an object with a `variables` property, and hold an engine where a model's Keras layer
holds its own.
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

# Optimizer class name -> arguments; slot initial values differ from 0 where TF allows it.
OPTIMIZERS = {
    "SGD": {"learning_rate": 0.1},
    "Adagrad": {"learning_rate": 0.1, "initial_accumulator_value": 0.2},
    "AdagradMomentum": {"learning_rate": 0.1, "momentum": 0.9},
    "Adam": {"learning_rate": 0.1},
    "FTRL": {"learning_rate": 0.1, "initial_accumulator_value": 0.3},
}

FEATURES = {
    "watched": tf.ragged.constant([[0, 1], [], [7]], dtype=tf.int64),
    "favorited": tf.sparse.from_dense(tf.constant([[3, 0], [0, 0], [5, 6]], tf.int64)),
    "friends": tf.constant([[2], [15], [9]], tf.int64),
}


def feature_config(configs):
    """The reference's fixture: video 8x4 (sum) shared by two features, user 16x2 (mean)."""
    video = configs.TableConfig(vocabulary_size=8, dim=4, combiner="sum", name="video")
    user = configs.TableConfig(vocabulary_size=16, dim=2, combiner="mean", name="user")
    return {"watched": configs.FeatureConfig(table=video),
            "favorited": configs.FeatureConfig(table=video),
            "friends": configs.FeatureConfig(table=user)}


def randomize(embedding, seed: int) -> dict[str, np.ndarray]:
    """Gives every table and slot variable random values; returns them by variable name."""
    rng = np.random.default_rng(seed)
    values = {}
    for slots in embedding.variables.values():
        for variable in slots.values():
            value = rng.uniform(0.1, 1.0, size=variable.shape).astype(np.float32)
            variable.assign(value)
            values[variable.name] = value
    return values


def variable_values(embedding) -> dict[str, np.ndarray]:
    return {variable.name: variable.numpy()
            for slots in embedding.variables.values() for variable in slots.values()}


def layer_engine_holder(engine) -> tf.Module:
    """A module tree that holds `engine` where a model's Keras layer (attribute `embedding`)
    holds its engine, so that the model's checkpoint restores into `engine`."""
    holder = tf.Module()
    holder.embedding = tf.Module()
    # private: the checkpoint path of the layers' engine is TFRS's attribute name.
    holder.embedding._tpu_embedding = engine  # pylint: disable=protected-access
    return holder


def save(embedding, directory) -> str:
    return tf.train.Checkpoint(embedding=embedding).save(str(directory / "ckpt"))


def object_graph(path: str) -> list:
    """Every node of the checkpoint's object graph: children, attributes, slot references."""
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(tf.train.load_checkpoint(path).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return [([(c.node_id, c.local_name) for c in node.children],
             [(a.name, a.full_name, a.checkpoint_key) for a in node.attributes],
             len(node.slot_variables))
            for node in graph.nodes]
