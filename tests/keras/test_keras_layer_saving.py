"""tf_embedding.keras.TPUEmbedding under Keras saving: save_weights / load_weights and
model.save / load_model carry tables and slots.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

from helpers.keras_layer import BATCH, SumModel
from helpers.keras_layer import fit_dataset, inputs, make_feature_config, make_samples
from helpers.tables import table_values

pytestmark = pytest.mark.integration


F = np.float32


# ---------------------------------------------------------------------------------------------
# Keras saving: save_weights / load_weights and model.save / load_model carry tables and slots.


@tf.keras.utils.register_keras_serializable(package="tf_embedding_tests")
class OwnLayerSumModel(SumModel):
    """SumModel that makes its own layer, so `load_model` can rebuild it from its config."""

    def __init__(self, **kwargs):
        super().__init__(embedding_keras.TPUEmbedding(make_feature_config(),
                                                      tf_embedding.Adagrad(0.1)))
        # Keras passes back what `get_config` gave (name, trainable, dtype).
        self._saving_kwargs = kwargs

    def get_build_config(self):
        # Keras cannot build a model of sparse inputs from their shapes; the layer makes its
        # tables when its weights are loaded.
        return None


def fitted_model(steps, labels):
    model = OwnLayerSumModel()
    model((inputs(steps[0], "sparse")))
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    model.fit(fit_dataset(steps, labels, "sparse"), epochs=1, verbose=0)
    return model


@pytest.mark.parametrize("how", ["weights", "model"])
def test_keras_saving_keeps_tables_and_slots_and_training_continues_identically(tmp_path, how):
    rng = np.random.default_rng(11)
    steps = make_samples(rng, 6)
    labels = rng.uniform(-1, 1, (6 * BATCH, 1)).astype(F)
    model = fitted_model(steps[:3], labels[:3 * BATCH])
    if how == "weights":
        path = str(tmp_path / "model.weights.h5")
        model.save_weights(path)
        restored = OwnLayerSumModel()
        restored((inputs(steps[0], "sparse")))
        restored.load_weights(path)
        restored.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    else:
        path = str(tmp_path / "model.keras")
        model.save(path)
        restored = tf.keras.models.load_model(path)
    assert sorted(table_values(restored.embedding)) == ["user/accumulators", "user/parameters",
                                               "video/accumulators", "video/parameters"]
    np.testing.assert_equal(table_values(restored.embedding), table_values(model.embedding))
    dataset = fit_dataset(steps[3:], labels[3 * BATCH:], "sparse")
    for trained in (model, restored):
        trained.fit(dataset, epochs=1, verbose=0)
    np.testing.assert_equal(table_values(restored.embedding), table_values(model.embedding))


def test_loading_weights_of_other_tables_or_slots_refuses_and_names_them(tmp_path):
    rng = np.random.default_rng(12)
    steps = make_samples(rng, 1)
    model = fitted_model(steps, rng.uniform(-1, 1, (BATCH, 1)).astype(F))
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    other = SumModel(embedding_keras.TPUEmbedding(make_feature_config(), tf_embedding.SGD(0.1)))
    other((inputs(steps[0], "sparse")))
    before = table_values(other.embedding)
    with pytest.raises(ValueError, match="cannot load these weights: it stores its embedding "
                                         "tables and slots by name"):
        other.load_weights(path)
    np.testing.assert_equal(table_values(other.embedding), before)
