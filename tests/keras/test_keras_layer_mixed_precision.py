"""The Keras layer under mixed precision (the process's Keras: Keras 3, or tf_keras with
TF_USE_LEGACY_KERAS=1): `mixed_bfloat16`, the TPU's recommended policy, global or the layer's
own, keeps float32 tables and slots, looks up in float32 and returns the activations in bfloat16
(the float32 ones rounded); the update gets float32 activation gradients, so a step trains the
tables as the float32 layer does where the gradients are the same. `mixed_float16` and float16
variables are refused, naming the policy and where it came from."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

from helpers.mixed_precision import (POLICY_SOURCES, assert_mixed_float16_refused,
                                     step_on_unit_gradients)

pytestmark = pytest.mark.unit

K = tf.keras
IDS = {"watched": tf.constant([[1, 2], [3, 1]], tf.int64)}


@pytest.fixture(autouse=True)
def float32_policy_after():
    yield
    K.mixed_precision.set_global_policy("float32")


def _layer(**kwargs):
    table = tf_embedding.TableConfig(
        8, 4, name="video", combiner="sum",
        initializer=tf.constant_initializer(np.linspace(-1, 1, 32).reshape(8, 4)))
    return embedding_keras.TPUEmbedding({"watched": tf_embedding.FeatureConfig(table)},
                                        tf_embedding.Adagrad(0.1), **kwargs)


def _table(layer):
    (table,) = layer.embedding_tables.values()
    return table


def _one_step(layer):
    return step_on_unit_gradients(layer, lambda: layer(IDS)["watched"])


@pytest.mark.parametrize("how", ["global", "argument"])
def test_mixed_bfloat16_looks_up_in_float32_and_trains_as_float32(how):
    reference = _layer()
    expected = _one_step(reference).numpy()
    if how == "global":
        K.mixed_precision.set_global_policy("mixed_bfloat16")
        layer = _layer()
    else:
        layer = _layer(dtype="mixed_bfloat16")
    activations = _one_step(layer)
    assert activations.dtype == tf.bfloat16
    np.testing.assert_array_equal(activations.numpy(),
                                  tf.cast(expected, tf.bfloat16).numpy())
    assert _table(layer).dtype == tf.float32
    np.testing.assert_array_equal(_table(layer).numpy(), _table(reference).numpy())


def test_mixed_bfloat16_model_fits_and_saves(tmp_path):
    K.mixed_precision.set_global_policy("mixed_bfloat16")
    ids = K.Input(shape=(2,), dtype="int64", name="watched")
    activations = _layer(name="embedding")({"watched": ids})["watched"]
    model = K.Model(ids, K.layers.Dense(1, kernel_initializer="ones")(activations))
    model.compile(optimizer=K.optimizers.SGD(0.1), loss="mse")
    before = _table(model.get_layer("embedding")).numpy().copy()
    model.fit(IDS["watched"], tf.ones([2, 1]), epochs=2, verbose=0)
    after = _table(model.get_layer("embedding")).numpy()
    assert not np.array_equal(before, after)
    assert np.isfinite(after).all()
    prediction = model.predict(IDS["watched"], verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = K.models.load_model(path)
    assert loaded.get_layer("embedding").dtype_policy.name == "mixed_bfloat16"
    np.testing.assert_array_equal(_table(loaded.get_layer("embedding")).numpy(), after)
    np.testing.assert_array_equal(loaded.predict(IDS["watched"], verbose=0), prediction)


@pytest.mark.parametrize("how, source", POLICY_SOURCES)
def test_mixed_float16_is_refused_naming_where_it_came_from(how, source):
    assert_mixed_float16_refused(_layer, how, source, "TPUEmbedding")


def test_float16_variables_are_refused():
    with pytest.raises(ValueError, match=r"'float16' \(compute float16, variables float16\).*"
                                         r"tables and slots are float32"):
        _layer(dtype="float16")
