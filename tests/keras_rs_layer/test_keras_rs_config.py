"""tf_embedding.keras_rs.DistributedEmbedding's Keras config: tables holding tf_embedding's
optimizers and initializers, and Keras optimizers with schedules, round trip through `.keras`
files loaded in a fresh process (training continues identically), `to_json` and
`clone_model`; the layer's own `optimizer` is kept; what Keras cannot hold is refused, naming
the table."""

import json
import os
import sys
import textwrap

import pytest

if sys.version_info < (3, 11):
    pytest.skip("keras-rs needs Python 3.11 or newer", allow_module_level=True)

import keras  # pylint: disable=wrong-import-position
import keras_rs  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

import tf_embedding  # pylint: disable=wrong-import-position
from tf_embedding import keras_rs as embedding_rs  # pylint: disable=wrong-import-position

from helpers import keras_saving as helpers  # pylint: disable=wrong-import-position
from helpers.processes import fresh_process_output  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1",
                               reason="keras-rs is Keras 3 only"),
              pytest.mark.integration, pytest.mark.slow]
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTH = 3


def as_json(config):
    return json.loads(json.dumps(config))


def tables():
    video = keras_rs.layers.TableConfig(
        name="video", vocabulary_size=9, embedding_dim=4, combiner="sum",
        initializer=tf_embedding.RowIdInitializer(2), optimizer=tf_embedding.Adagrad(0.1))
    user = keras_rs.layers.TableConfig(
        name="user", vocabulary_size=6, embedding_dim=2, combiner="mean",
        optimizer=keras.optimizers.Adagrad(
            keras.optimizers.schedules.ExponentialDecay(0.5, 1, 0.8)))
    return video, user


def model_of(video, user, **layer_kwargs):
    shape = (None, LENGTH)
    configs = {"watched": keras_rs.layers.FeatureConfig("watched", video, shape, (None, 4)),
               "favorited": keras_rs.layers.FeatureConfig("favorited", video, shape, (None, 4)),
               "friends": keras_rs.layers.FeatureConfig("friends", user, shape, (None, 2))}
    ids = {name: keras.Input(shape=(LENGTH,), dtype="int64", name=name) for name in configs}
    activations = embedding_rs.DistributedEmbedding(configs, name="embedding",
                                                    **layer_kwargs)(ids)
    joined = keras.layers.Concatenate()([activations[name] for name in configs])
    model = keras.Model(ids, keras.layers.Dense(1, kernel_initializer="ones")(joined))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def data(seed, rows):
    rng = np.random.default_rng(seed)
    ids = {"watched": rng.integers(0, 9, (rows, LENGTH)),
           "favorited": rng.integers(0, 9, (rows, LENGTH)),
           "friends": rng.integers(0, 6, (rows, LENGTH))}
    return ids, rng.uniform(-1, 1, (rows, 1)).astype(np.float32)


def test_keras_file_round_trips_and_training_continues_identically(tmp_path):
    video, user = tables()
    model = model_of(video, user)
    ids, labels = data(1, 3 * helpers.BATCH)
    first = lambda values, rows: {name: value[rows] for name, value in values.items()}
    model.fit(first(ids, slice(0, 8)), labels[:8], batch_size=helpers.BATCH, verbose=0,
              shuffle=False)
    user.optimizer.iterations.assign(4)  # as the optimizer's own apply_gradients would
    path = str(tmp_path / "model.keras")
    model.save(path)
    batch, batch_labels = first(ids, slice(8, 12)), labels[8:]
    np.savez(str(tmp_path / "batch.npz"), labels=batch_labels, **batch)
    script = textwrap.dedent(f"""
        import sys
        import keras, numpy as np
        import tf_embedding.keras_rs
        model = keras.models.load_model({path!r})
        sys.path.insert(0, {TESTS!r})
        from helpers import keras_saving as helpers
        data = np.load({str(tmp_path / 'batch.npz')!r})
        ids = {{key: data[key] for key in data if key != "labels"}}
        np.savez({str(tmp_path / 'out.npz')!r}, **helpers.one_more_step(model, ids,
                                                                         data["labels"]))
        print("done")
    """)
    assert fresh_process_output(script).split()[-1] == "done"
    original = helpers.one_more_step(model, batch, batch_labels)
    with np.load(str(tmp_path / "out.npz")) as loaded:
        assert sorted(loaded) == sorted(original)
        assert loaded["state/keras_optimizer_0:iterations"] == 4
        for key, value in original.items():
            np.testing.assert_array_equal(loaded[key], value, err_msg=key)


def test_to_json_and_clone_model_rebuild_the_layer_with_fresh_tables():
    video, user = tables()
    model = model_of(video, user)
    ids, labels = data(2, helpers.BATCH)
    model.fit(ids, labels, batch_size=helpers.BATCH, verbose=0)
    for rebuilt in (keras.models.model_from_json(model.to_json()),
                    keras.models.clone_model(model)):
        layer = rebuilt.get_layer("embedding")
        assert type(layer) is embedding_rs.DistributedEmbedding
        assert as_json(layer.get_config()) == as_json(model.get_layer("embedding").get_config())
        state = helpers.engine_state(rebuilt)
        assert sorted(state) == sorted(helpers.engine_state(model))
        np.testing.assert_array_equal(  # fresh: the initializer's rows again
            state["video:parameters"], np.arange(2, 11, dtype=np.float32)[:, None] * np.ones(4))


def test_the_layers_optimizer_for_tables_without_one_is_kept():
    video = keras_rs.layers.TableConfig(name="video", vocabulary_size=9, embedding_dim=4,
                                        optimizer=None)
    user = keras_rs.layers.TableConfig(name="user", vocabulary_size=6, embedding_dim=2,
                                       optimizer=None)
    layer = model_of(video, user, optimizer=tf_embedding.FTRL(0.2)).get_layer("embedding")
    config = layer.get_config()
    assert keras.saving.deserialize_keras_object(config["optimizer"]) == tf_embedding.FTRL(0.2)
    rebuilt = embedding_rs.DistributedEmbedding.from_config(config)  # keras-rs's changes config
    assert as_json(rebuilt.get_config()) == as_json(layer.get_config())


def test_a_value_keras_cannot_hold_is_refused_naming_the_table(tmp_path):
    video, user = tables()
    user.optimizer = keras.optimizers.Adagrad(lambda: 0.1)
    model = model_of(video, user)
    with pytest.raises(ValueError, match="Table 'user': `optimizer`: the Keras optimizer's "
                                         "`learning_rate` is a Python callable"):
        model.save(str(tmp_path / "model.keras"))
