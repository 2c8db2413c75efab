"""tf_embedding.keras_rs.DistributedEmbedding under mixed precision, as the Keras layer
(tests/keras/test_keras_layer_mixed_precision.py): `mixed_bfloat16`, global or the layer's
`dtype`, keeps float32 tables and slots, looks up in float32 and returns the activations in
bfloat16 (the float32 ones rounded; under the global policy keras-rs's own CPU layer returns
bfloat16 as well, which the test compares with); a step trains the tables as the float32 layer
does; fit and .keras saving work; `mixed_float16` is refused naming where it came from."""

import os
import sys

import pytest

if sys.version_info < (3, 11):
    pytest.skip("keras-rs needs Python 3.11 or newer", allow_module_level=True)

import keras  # pylint: disable=wrong-import-position
import keras_rs  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position

from tf_embedding import keras_rs as embedding_rs  # pylint: disable=wrong-import-position

from helpers.keras_rs_models import BATCH, feature, table  # pylint: disable=wrong-import-position
from helpers.mixed_precision import (  # pylint: disable=wrong-import-position
    POLICY_SOURCES, assert_mixed_float16_refused, step_on_unit_gradients)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1",
                                 reason="keras-rs is Keras 3 only")]

IDS = {"watched": tf.constant([[1, 2, 3], [4, 1, 0], [8, 8, 2], [0, 5, 7]], tf.int64)}


@pytest.fixture(autouse=True)
def float32_policy_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _configs():
    return {"watched": feature("watched", table("video", "sum", "sgd", seed=1), (BATCH, 3))}


def _one_step(layer):
    return step_on_unit_gradients(layer, lambda: layer(IDS)["watched"])


def _table(layer):
    (variables,) = layer.table_variables().values()
    return tf.convert_to_tensor(variables["parameters"]).numpy()


@pytest.mark.parametrize("how", ["global", "argument"])
def test_mixed_bfloat16_looks_up_in_float32_and_trains_as_float32(how):
    reference = embedding_rs.DistributedEmbedding(_configs())
    expected = _one_step(reference).numpy()
    if how == "global":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        layer = embedding_rs.DistributedEmbedding(_configs())
    else:
        layer = embedding_rs.DistributedEmbedding(_configs(), dtype="mixed_bfloat16")
    activations = _one_step(layer)
    assert activations.dtype == tf.bfloat16
    np.testing.assert_array_equal(activations.numpy(), tf.cast(expected, tf.bfloat16).numpy())
    assert {v.dtype for v in layer.weights} == {"float32"}
    np.testing.assert_array_equal(_table(layer), _table(reference))


def test_under_the_global_policy_keras_rs_own_layer_returns_the_same_dtype():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    ours = embedding_rs.DistributedEmbedding(_configs())(IDS)["watched"]
    theirs = keras_rs.layers.DistributedEmbedding(_configs())(IDS)["watched"]
    assert ours.dtype == theirs.dtype == tf.bfloat16
    np.testing.assert_allclose(ours.numpy().astype(np.float32),
                               theirs.numpy().astype(np.float32), rtol=2 ** -7, atol=1e-2)


def test_mixed_bfloat16_model_fits_and_saves(tmp_path):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    ids = keras.Input(shape=(3,), batch_size=BATCH, dtype="int64", name="watched")
    layer = embedding_rs.DistributedEmbedding(_configs(), name="embedding")
    activations = layer({"watched": ids})["watched"]
    model = keras.Model(ids, keras.layers.Dense(1, kernel_initializer="ones")(activations))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = _table(layer).copy()
    model.fit(IDS["watched"], tf.ones([BATCH, 1]), batch_size=BATCH, epochs=2, verbose=0)
    after = _table(layer)
    assert not np.array_equal(before, after) and np.isfinite(after).all()
    prediction = model.predict(IDS["watched"], batch_size=BATCH, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("embedding").dtype_policy.name == "mixed_bfloat16"
    np.testing.assert_array_equal(_table(loaded.get_layer("embedding")), after)
    np.testing.assert_array_equal(loaded.predict(IDS["watched"], batch_size=BATCH, verbose=0),
                                  prediction)


@pytest.mark.parametrize("how, source", POLICY_SOURCES)
def test_mixed_float16_is_refused_naming_where_it_came_from(how, source):
    assert_mixed_float16_refused(lambda **kwargs: embedding_rs.DistributedEmbedding(
        _configs(), **kwargs), how, source, "DistributedEmbedding")
