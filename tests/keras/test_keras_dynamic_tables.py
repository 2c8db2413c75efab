"""tf_embedding.keras.TPUEmbedding with a dynamic table (Keras 3 and tf_keras): `model.fit`
trains it as a fixed table trained on the keys renumbered (no admission filter, no eviction,
rows starting alike), as two MirroredStrategy replicas do in a custom loop, only training
lookups count, `model.save` / `load_model` carry the index,
and `model.export` serves the keys with stock ops.
"""

import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras
from helpers.keras_loops import mirrored_training_step, two_cpu_mirrored_strategy
from helpers.processes import fresh_process_output

pytestmark = pytest.mark.integration

DIM = 4
# Keys from a wide id space, two batches of 4 samples of 3 ids.
KEYS = np.array([[10**15, 7, 2**62], [7, 7, 3], [5 * 10**12, 3, 10**15], [1, 2, 3],
                 [2**62, 1, 9], [9, 9, 9], [10**15, 4, 4], [6, 5 * 10**12, 1]], np.int64)
LABELS = np.linspace(-1, 1, 8).astype(np.float32).reshape(8, 1)


def _model(table):
    layer = embedding_keras.TPUEmbedding(
        {"clicked": tf_embedding.FeatureConfig(table, name="clicked")},
        tf_embedding.Adagrad(0.1))
    ids = tf.keras.Input(shape=(3,), dtype="int64", name="clicked", batch_size=4)
    looked_up = layer({"clicked": ids})["clicked"]
    output = tf.keras.layers.Dense(
        1, kernel_initializer=tf.keras.initializers.Constant(0.3))(
            tf.keras.layers.Flatten()(looked_up))
    model = tf.keras.Model(ids, output)
    model.compile(tf.keras.optimizers.SGD(0.1), "mse")
    return model, layer


class Scorer(tf.keras.Model):
    """`_model`'s scorer as a subclassed model, which `strategy.run` builds on its first call."""

    def __init__(self, table):
        super().__init__()
        self.embedding = embedding_keras.TPUEmbedding(
            {"clicked": tf_embedding.FeatureConfig(table, name="clicked")},
            tf_embedding.Adagrad(0.1))
        self.flatten = tf.keras.layers.Flatten()
        self.dense = tf.keras.layers.Dense(
            1, kernel_initializer=tf.keras.initializers.Constant(0.3))

    def call(self, ids):
        return self.dense(self.flatten(self.embedding({"clicked": ids})["clicked"]))


def _table(vocabulary_size, dynamic=None):
    return tf_embedding.TableConfig(vocabulary_size=vocabulary_size, dim=DIM, name="items",
                                    initializer=tf.constant_initializer(0.25), dynamic=dynamic)


def _check_renumbered(fixed_layer, dynamic_layer, rows, unique_keys):
    """Each key's row and slot of the dynamic table (`rows`: {key: its row}) equal its rank's of
    the fixed table of the keys renumbered (`unique_keys`, ascending)."""
    fixed_values = fixed_layer.table_variables()["items"]
    dynamic_values = dynamic_layer.table_variables()["items"]
    for name in ("parameters", "accumulators"):
        for rank, key in enumerate(unique_keys):
            np.testing.assert_allclose(
                tf.convert_to_tensor(dynamic_values[name]).numpy()[rows[int(key)]],
                tf.convert_to_tensor(fixed_values[name]).numpy()[rank], rtol=1e-6, atol=1e-7,
                err_msg=f"{name} of key {key}")


def _fit(model, keys):
    model.fit(keys, LABELS, batch_size=4, epochs=2, shuffle=False, verbose=0)


def _dynamic_rows(layer, directory):
    """{key: its row} of the layer's dynamic table, from its index in a checkpoint."""
    path = tf.train.Checkpoint(layer=layer).save(str(directory / "rows"))
    records = tf.train.load_variable(
        path, "layer/_tpu_embedding/items..dynamic/index/.ATTRIBUTES/row_records")
    return {int(key): row for row, key in enumerate(records[:, 0]) if key >= 0}


def test_fit_trains_as_a_fixed_table_of_the_keys_renumbered(tmp_path):
    unique_keys, renumbered = np.unique(KEYS, return_inverse=True)
    fixed, fixed_layer = _model(_table(len(unique_keys)))
    _fit(fixed, renumbered.reshape(KEYS.shape).astype(np.int64))
    dynamic, dynamic_layer = _model(_table(16, tf_embedding.DynamicVocabulary()))
    _fit(dynamic, KEYS)

    np.testing.assert_allclose(dynamic.predict(KEYS, batch_size=4, verbose=0),
                               fixed.predict(renumbered.reshape(KEYS.shape), batch_size=4,
                                             verbose=0), rtol=1e-6, atol=1e-6)
    rows = _dynamic_rows(dynamic_layer, tmp_path)
    assert sorted(rows) == sorted(int(key) for key in unique_keys)
    _check_renumbered(fixed_layer, dynamic_layer, rows, unique_keys)
    statistics = dynamic_layer.dynamic_statistics()["items"]
    assert statistics["step"] == 4 and statistics["occupied"] == len(unique_keys)


def test_mirrored_replicas_count_the_global_batch_once(tmp_path):
    """Two replicas, each with half of every batch (a custom loop: strategy.run, the tape, the
    model's optimizer), train the dynamic table as the fixed table of the keys renumbered,
    and the index counts one step per global batch."""
    strategy = two_cpu_mirrored_strategy()
    unique_keys, renumbered = np.unique(KEYS, return_inverse=True)
    models = {}
    for kind, table, keys in (
            ("fixed", _table(len(unique_keys)), renumbered.reshape(KEYS.shape)),
            ("dynamic", _table(16, tf_embedding.DynamicVocabulary()), KEYS)):
        with strategy.scope():
            model = Scorer(table)
            step = mirrored_training_step(strategy, model, tf.keras.optimizers.SGD(0.1), 4,
                                          training=True)
        dataset = tf.data.Dataset.from_tensor_slices((keys.astype(np.int64), LABELS)).batch(4)
        for _ in range(2):
            iterator = iter(strategy.experimental_distribute_dataset(dataset))
            for _ in range(2):
                step(iterator)
        models[kind] = model
    dynamic_layer = models["dynamic"].embedding
    statistics = dynamic_layer.dynamic_statistics()["items"]
    assert statistics["step"] == 4 and statistics["occupied"] == len(unique_keys)
    rows = _dynamic_rows(dynamic_layer, tmp_path)
    _check_renumbered(models["fixed"].embedding, dynamic_layer, rows, unique_keys)


def test_only_training_lookups_count_and_saving_carries_the_index(tmp_path):
    model, layer = _model(_table(16, tf_embedding.DynamicVocabulary(admit_after=2)))
    model.predict(KEYS, batch_size=4, verbose=0)
    assert layer.dynamic_statistics()["items"]["step"] == 0
    _fit(model, KEYS)
    statistics = layer.dynamic_statistics()["items"]
    assert statistics["step"] == 4 and statistics["occupied"] == len(np.unique(KEYS))
    predictions = model.predict(KEYS, batch_size=4, verbose=0)
    assert layer.dynamic_statistics()["items"] == statistics
    # A key seen once is not admitted: it reads zeros.
    np.testing.assert_array_equal(
        layer({"clicked": tf.constant([[123456789] * 3] * 4, tf.int64)})["clicked"], 0.0)

    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = tf.keras.models.load_model(path)
    loaded_layer = loaded.get_layer(layer.name)
    assert loaded_layer.dynamic_statistics() == layer.dynamic_statistics()
    np.testing.assert_array_equal(loaded.predict(KEYS, batch_size=4, verbose=0), predictions)


@pytest.mark.slow
def test_an_export_serves_the_keys_without_tf_embedding(tmp_path):
    """`model.export` holds the keys trained so far in a stock hash table: the SavedModel
    scores as `predict` does (an unknown key: a zero row) where tf_embedding is not installed."""
    model, _ = _model(_table(16, tf_embedding.DynamicVocabulary()))
    _fit(model, KEYS)
    keys = np.concatenate([KEYS[:3], [[2**61, 8, 10**15]]]).astype(np.int64)
    expected = model.predict(keys, batch_size=4, verbose=0).ravel()
    model.export(str(tmp_path / "export"))
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({str(tmp_path / 'export')!r})
        out = loaded.signatures["serving_default"](tf.constant({keys.tolist()!r}, tf.int64))
        print(np.asarray(list(out.values())[0]).ravel().tolist())
        assert not any(m.startswith("tf_embedding") for m in sys.modules)
    """)
    printed = fresh_process_output(script).strip().splitlines()[-1]
    np.testing.assert_allclose(eval(printed), expected, rtol=1e-6, atol=1e-6)  # pylint: disable=eval-used
