"""tf_embedding.keras.TPUEmbedding against TensorFlow Recommenders' layer on CPU (tf_keras).

TFRS imports only under tf_keras, so this module runs in the suite's second session, with
TF_USE_LEGACY_KERAS=1 (tools/run_tests.sh; conftest.py leaves it out of the first). Same tables
and inputs give the same activations; checkpoints move both ways between the two layers and
into the mid-level classes.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_recommenders as tfrs
from tensorflow_recommenders.layers.embedding import tpu_embedding_layer

import tf_embedding
from tf_embedding import keras as embedding_keras

from helpers.checkpoints import layer_engine_holder
from helpers.keras_layer import inputs, make_feature_config, make_samples

pytestmark = pytest.mark.integration

stock = tf.tpu.experimental.embedding


def configs_of(module):
    """The layer fixture's configs (helpers.keras_layer) built with tf_embedding's or stock
    TF's classes; `friends` is a sequence of 3, so sequence outputs are compared too."""
    return make_feature_config(configs=module, friends_max_sequence_length=3)


class Holder(tf.keras.Model):
    """A model with the layer under the attribute `embedding`, as users' models hold it."""

    def __init__(self, layer):
        super().__init__()
        self.embedding = layer

    def call(self, inputs):
        return self.embedding(*inputs)


def ours(optimizer=None):
    return embedding_keras.TPUEmbedding(configs_of(tf_embedding),
                                        optimizer or tf_embedding.Adagrad(0.1))


def theirs(optimizer=None):
    return tfrs.layers.embedding.TPUEmbedding(configs_of(stock),
                                              optimizer or stock.Adagrad(0.1))


@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_same_activations_as_tfrs(kind):
    step = make_samples(np.random.default_rng(0), 1)[0]
    features, weights = inputs(step, kind)
    expected = theirs()(features, weights)
    actual = ours()(features, weights)
    for name in features:
        np.testing.assert_allclose(actual[name].numpy(), expected[name].numpy(), rtol=1e-6,
                                   atol=1e-6, err_msg=name)


def test_serving_config_lookups_match_tfrs():
    step = make_samples(np.random.default_rng(1), 1)[0]
    features = {"clicked": inputs(step, "ragged")[0]["watched"]}
    results = []
    for make, module in ((theirs, stock), (ours, tf_embedding)):
        layer = make()
        video = [t for t in layer.embedding_tables if t.name == "video"][0]
        layer(*inputs(step, "ragged"))
        serving_config = {"clicked": module.FeatureConfig(video, max_sequence_length=2)}
        results.append(layer(features, serving_config=serving_config)["clicked"].numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-6)


def variables_by_key(path):
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(path)
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def test_checkpoints_move_both_ways_with_the_same_keys(tmp_path):
    rng = np.random.default_rng(2)
    step = make_samples(rng, 1)[0]
    trained = Holder(ours())
    with tf.GradientTape() as tape:
        out = trained(inputs(step, "ragged"))
        loss = tf.add_n([tf.reduce_sum(v * v) for v in out.values()])
    tape.gradient(loss, trained.trainable_variables)
    ours_path = tf.train.Checkpoint(model=trained).write(str(tmp_path / "ours"))

    tfrs_model = Holder(theirs())
    tfrs_model(inputs(step, "ragged"))
    tfrs_path = tf.train.Checkpoint(model=tfrs_model).write(str(tmp_path / "tfrs"))
    assert sorted(variables_by_key(ours_path)) == sorted(variables_by_key(tfrs_path))

    # Ours -> TFRS: the trained tables and slots arrive.
    tf.train.Checkpoint(model=tfrs_model).read(ours_path).assert_consumed()
    saved = variables_by_key(ours_path)
    for table, variable in tfrs_model.embedding.embedding_tables.items():
        np.testing.assert_array_equal(
            variable.numpy(),
            saved[f"model/embedding/_tpu_embedding/{table.name}/.ATTRIBUTES/VARIABLE_VALUE"])

    # TFRS -> ours, before and after our layer is built (restore-on-create and assignment).
    for table, variable in tfrs_model.embedding.embedding_tables.items():
        variable.assign(rng.uniform(-1, 1, variable.shape))
    tfrs_path = tf.train.Checkpoint(model=tfrs_model).write(str(tmp_path / "tfrs2"))
    expected = {t.name: v.numpy() for t, v in tfrs_model.embedding.embedding_tables.items()}
    for build_first in (False, True):
        restored = Holder(ours())
        if build_first:
            restored(inputs(step, "ragged"))
        tf.train.Checkpoint(model=restored).read(tfrs_path).assert_existing_objects_matched()
        restored(inputs(step, "ragged"))
        for table, variable in restored.embedding.embedding_tables.items():
            np.testing.assert_array_equal(tf.convert_to_tensor(variable).numpy(),
                                          expected[table.name])


def test_layer_checkpoint_restores_into_the_mid_level_serving_class(tmp_path):
    step = make_samples(np.random.default_rng(3), 1)[0]
    model = Holder(ours())
    model(inputs(step, "ragged"))
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    serving = tf_embedding.TPUEmbeddingForServing(configs_of(tf_embedding),
                                                  tf_embedding.Adagrad(0.1))
    holder = layer_engine_holder(serving)
    tf.train.Checkpoint(model=holder).read(path).assert_existing_objects_matched()
    for table, variable in model.embedding.embedding_tables.items():
        served = [v for t, v in serving.embedding_tables.items() if t.name == table.name][0]
        np.testing.assert_array_equal(served.numpy(), tf.convert_to_tensor(variable).numpy())


def test_keras_legacy_optimizers_translate_as_tfrs_translates_them():
    for keras_optimizer in (tf.keras.optimizers.legacy.Adagrad(0.3, initial_accumulator_value=2),
                            tf.keras.optimizers.legacy.Adam(0.2, beta_1=0.7),
                            tf.keras.optimizers.legacy.SGD(0.1),
                            tf.keras.optimizers.legacy.Ftrl(0.1, beta=0.5)):
        expected = tpu_embedding_layer.translate_keras_optimizer(keras_optimizer)
        actual = embedding_keras.translate_keras_optimizer(keras_optimizer)
        assert type(actual).__name__ == type(expected).__name__
        for name, value in vars(expected).items():
            if name in ("learning_rate", "slot_variable_creation_fn"):
                continue
            assert getattr(actual, name) == value, name
        assert float(actual.learning_rate_tensor()) == pytest.approx(
            float(tf.convert_to_tensor(keras_optimizer.learning_rate)))


def test_model_optimizer_mode_trains_like_tfrs_on_cpu():
    # TFRS's CPU behaviour: trainable tables, updated by the model's Keras optimizer.
    rng = np.random.default_rng(4)
    steps = make_samples(rng, 3)
    results = []
    for layer in (theirs(stock.SGD(0.1)),
                  embedding_keras.TPUEmbedding(configs_of(tf_embedding), "sgd",
                                               tables_trained_by="model_optimizer")):
        model = Holder(layer)
        keras_optimizer = tf.keras.optimizers.legacy.Adagrad(0.2)
        for step in steps:
            with tf.GradientTape() as tape:
                out = model(inputs(step, "sparse"))
                loss = tf.add_n([tf.reduce_sum(v * v) for v in out.values()])
            assert len(model.trainable_variables) == 2
            gradients = tape.gradient(loss, model.trainable_variables)
            keras_optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        results.append({t.name: tf.convert_to_tensor(v).numpy()
                        for t, v in layer.embedding_tables.items()})
    for name in results[0]:
        np.testing.assert_allclose(results[1][name], results[0][name], rtol=1e-5, atol=1e-6)
