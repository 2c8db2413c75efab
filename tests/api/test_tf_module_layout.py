"""Code written against TF's TPU-embedding modules: `tf_embedding.tpu` mirrors their names, and
the private hooks TPU programs call (`_retrieve_variables`, `_load_variables`) keep their CPU
meaning: the host variables are the tables."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.tpu import tpu_embedding_v2 as stock_tpu_embedding_v2

import tf_embedding
from tf_embedding import for_serving
from tf_embedding.tpu import (tpu_embedding_for_serving, tpu_embedding_v1, tpu_embedding_v2,
                              tpu_embedding_v2_utils)

pytestmark = pytest.mark.unit

# {mirror module: {name: tf_embedding's object}}; docs/api_differences.md gives the same map.
MIRRORED = {
    tpu_embedding_v2: {"TPUEmbedding": tf_embedding.TPUEmbedding,
                       "TPUEmbeddingVariable": stock_tpu_embedding_v2.TPUEmbeddingVariable},
    tpu_embedding_v2_utils: {name: getattr(tf_embedding, name) for name in (
        "TableConfig", "FeatureConfig", "QuantizationConfig", "RowIdInitializer", "SGD",
        "Adagrad", "AdagradMomentum", "Adam", "FTRL")},
    tpu_embedding_for_serving: {"TPUEmbeddingForServing": tf_embedding.TPUEmbeddingForServing,
                                "cpu_embedding_lookup": for_serving.serving_embedding_lookup},
    tpu_embedding_v1: {"TPUEmbeddingV0": tf_embedding.TPUEmbeddingV0},
}


@pytest.mark.parametrize("module", MIRRORED, ids=lambda module: module.__name__)
def test_each_mirror_module_names_tf_embeddings_objects(module):
    for name, value in MIRRORED[module].items():
        assert getattr(module, name) is value, name
    assert sorted(module.__all__) == sorted(
        set(MIRRORED[module]) | ({"_Optimizer"} if module is tpu_embedding_v2_utils else set()))


def test_tables_are_not_tpu_embedding_variables_and_read_whole():
    """TF's tests read `variables[0]` of a TPUEmbeddingVariable (one host's whole table); ours
    are ShardedVariables of row blocks, so the check is false and `numpy()` gives the table."""
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        table = tf_embedding.TableConfig(5, 2, name="t",
                                         initializer=tf_embedding.RowIdInitializer())
        engine = tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table)},
                                           tf_embedding.SGD(0.1))
    engine.build()
    variable = engine.table_variables()["t"]["parameters"]
    assert not isinstance(variable, tpu_embedding_v2.TPUEmbeddingVariable)
    assert len(variable.variables) == 2
    np.testing.assert_equal(variable.numpy(), np.repeat(np.arange(5.0), 2).reshape(5, 2))


def sgd_engine(rows):
    table = tf_embedding.TableConfig(rows, 64, combiner="sum", name="t",
                                     initializer=tf.keras.initializers.Constant(1.0))
    engine = tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table)},
                                       tf_embedding.SGD(0.5))

    @tf.function
    def step(ids, training):
        engine.enqueue({"f": ids}, training=training)
        activations = engine.dequeue()
        if training:
            engine.apply_gradients(tf.nest.map_structure(tf.ones_like, activations))
        return activations["f"]

    return engine, step


# 70,000 x 64 float32 is over 16 MiB: the kernels move it onto huge pages when they first touch
# it, so an assignment after that must still reach the next lookup.
@pytest.mark.parametrize("rows", [10, 70_000])
def test_retrieve_then_load_variables_keep_the_cpu_meaning(rows):
    engine, step = sgd_engine(rows)
    ids = tf.constant([1, 3], tf.int64)
    step(ids, True)
    parameters = engine.table_variables()["t"]["parameters"]
    # private: the test is about TF's hooks that TPU programs call (_retrieve/_load_variables).
    engine._retrieve_variables()
    host = parameters.numpy()
    np.testing.assert_equal(host[[1, 3]], np.full((2, 64), 0.5, np.float32))
    np.testing.assert_equal(host[[0, 2]], np.ones((2, 64), np.float32))

    assigned = np.arange(rows * 64, dtype=np.float32).reshape(rows, 64)
    parameters.assign(assigned)
    engine._load_variables()
    np.testing.assert_equal(step(ids, False).numpy(), assigned[[1, 3]])
