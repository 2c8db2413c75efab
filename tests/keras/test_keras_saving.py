"""Keras-native saving of tf_embedding.keras.TPUEmbedding in the Keras of this process (Keras 3,
or tf_keras with TF_USE_LEGACY_KERAS=1): the layer's Keras arguments, `.keras` files of
functional, Sequential and subclassed models loaded in a fresh process (predictions, then one
more training step, equal to the original's), `to_json` / `model_from_json`, `clone_model`,
and the errors for what cannot be saved or loaded."""

import json
import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

from helpers import keras_saving as helpers
from helpers.processes import fresh_process_output

pytestmark = [pytest.mark.integration, pytest.mark.slow]

K = tf.keras
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_layer_takes_keras_layer_arguments():
    layer = embedding_keras.TPUEmbedding(helpers.feature_config(), "sgd", name="emb",
                                         trainable=False, dtype="float32")
    assert layer.name == "emb" and not layer.trainable
    config = layer.get_config()
    assert config["name"] == "emb" and config["trainable"] is False
    assert json.loads(json.dumps(config)) == config


@pytest.mark.parametrize("dtype", ["float64", "mixed_float16"])
def test_a_dtype_other_than_float32_or_mixed_bfloat16_is_refused(dtype):
    with pytest.raises(ValueError, match=f"TPUEmbedding 'emb': dtype policy '{dtype}' .* from "
                                         "the layer's `dtype` argument, is not supported"):
        embedding_keras.TPUEmbedding(helpers.feature_config(), "sgd", name="emb", dtype=dtype)


def keras_schedule_optimizer():
    return K.optimizers.Adagrad(K.optimizers.schedules.ExponentialDecay(0.5, 1, 0.8))


def trained(kind, optimizer_kind, seed):
    """A compiled model of `kind` fitted for two steps, and a third batch (ids, labels).

    "keras schedule": the layer is given its own Keras optimizer with a schedule, whose
    `iterations` (advanced here as its own `apply_gradients` would) the learning rate reads.
    """
    layer_optimizer = (keras_schedule_optimizer() if optimizer_kind == "keras schedule"
                       else tf_embedding.Adam(0.05))
    model = {"functional": lambda: helpers.functional_model(layer_optimizer),
             "sequential": helpers.sequential_model,
             "subclassed": lambda: helpers.subclassed_model(layer_optimizer)}[kind]()
    # The model's own optimizer has state too (Adam's moments, its iterations).
    model.compile(optimizer=K.optimizers.Adam(0.01), loss="mse")
    ids, labels = helpers.batches(kind, seed, 3)
    rows = lambda values, first, last: tf.nest.map_structure(
        lambda value: value[first * helpers.BATCH:last * helpers.BATCH], values)
    model.fit(rows(ids, 0, 2), labels[:2 * helpers.BATCH], batch_size=helpers.BATCH, epochs=1,
              verbose=0, shuffle=False)
    if optimizer_kind == "keras schedule":
        layer_optimizer.iterations.assign(5)
    return model, rows(ids, 2, 3), labels[2 * helpers.BATCH:]


def load_and_step_in_fresh_process(path, kind, ids, labels, tmp_path):
    """Loads `path` in a process that shares nothing with this one (functional and
    Sequential models importing only tf_embedding.keras before `load_model`, without
    custom_objects) and runs `helpers.one_more_step` there."""
    data = str(tmp_path / "batch.npz")
    np.savez(data, labels=labels, **({"ids": ids} if kind == "sequential" else
                                     {f"ids/{name}": value for name, value in ids.items()}))
    results = str(tmp_path / "results.npz")
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import tensorflow as tf
        import tf_embedding.keras
        sys.path.insert(0, {TESTS!r})
        if {kind!r} == "subclassed":
            from helpers import keras_saving  # registers the model class
        model = tf.keras.models.load_model({path!r})
        assert type(model.get_layer("embedding")) is tf_embedding.keras.TPUEmbedding
        from helpers import keras_saving as helpers
        data = np.load({data!r})
        ids = data["ids"] if "ids" in data else {{key.split("/")[1]: data[key]
                                                 for key in data if key.startswith("ids/")}}
        np.savez({results!r}, **helpers.one_more_step(model, ids, data["labels"]))
        print("done")
    """)
    assert fresh_process_output(script).split()[-1] == "done"
    with np.load(results) as loaded:
        return {key: loaded[key] for key in loaded}


CASES = [("functional", "embedding"), ("functional", "keras schedule"),
         ("sequential", "embedding"), ("subclassed", "embedding"),
         ("subclassed", "keras schedule")]


@pytest.mark.parametrize("kind, optimizer_kind", CASES)
def test_keras_file_round_trips_and_training_continues_identically(tmp_path, kind,
                                                                   optimizer_kind):
    model, ids, labels = trained(kind, optimizer_kind, seed=CASES.index((kind, optimizer_kind)))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = load_and_step_in_fresh_process(path, kind, ids, labels, tmp_path)
    original = helpers.one_more_step(model, ids, labels)
    assert sorted(loaded) == sorted(original)
    if optimizer_kind == "keras schedule":
        # The layer's Keras optimizer's step counter came back (the schedule reads it).
        assert loaded["state/keras_optimizer_0:iterations"] == 5
    for key, value in original.items():
        np.testing.assert_array_equal(loaded[key], value, err_msg=key)


def test_to_json_and_model_from_json_rebuild_the_layer_with_its_configs():
    model = helpers.functional_model(tf_embedding.FTRL(0.1, clipvalue=1.0))
    rebuilt = K.models.model_from_json(model.to_json())
    layer, original = rebuilt.get_layer("embedding"), model.get_layer("embedding")
    assert type(layer) is embedding_keras.TPUEmbedding
    assert layer.get_config() == original.get_config()
    assert sorted(helpers.engine_state(rebuilt)) == sorted(helpers.engine_state(model))


def test_clone_model_has_fresh_tables_of_the_same_configs():
    model, _, _ = trained("functional", "embedding", seed=7)
    clone = K.models.clone_model(model)
    clone_layer, layer = clone.get_layer("embedding"), model.get_layer("embedding")
    assert clone_layer is not layer
    assert clone_layer.get_config() == layer.get_config()
    trained_state, fresh_state = helpers.engine_state(model), helpers.engine_state(clone)
    assert sorted(fresh_state) == sorted(trained_state)
    # Fresh tables: the user table holds its initializer's values again, slots their start.
    np.testing.assert_array_equal(fresh_state["user:parameters"],
                                  np.linspace(-1, 1, 12).reshape(6, 2).astype(np.float32))
    assert not np.array_equal(trained_state["user:parameters"], fresh_state["user:parameters"])
    np.testing.assert_array_equal(fresh_state["user:accumulators"], np.full((6, 2), 0.5))


def test_saving_a_value_a_config_cannot_hold_names_table_and_argument(tmp_path):
    features = helpers.feature_config()
    features["friends"].table.optimizer = tf_embedding.Adagrad(lambda: 0.2)
    ids = {name: K.Input(shape=(helpers.LENGTH,), dtype="int64", name=name)
           for name in helpers.VOCAB}
    activations = embedding_keras.TPUEmbedding(features, "sgd")(ids)
    model = K.Model(ids, K.layers.Concatenate()([activations[n] for n in helpers.VOCAB]))
    message = ("Table 'user': `optimizer`: the optimizer's `learning_rate` is a Python "
               "callable")
    with pytest.raises(ValueError, match=message):
        model.save(str(tmp_path / "model.keras"))
    with pytest.raises(ValueError, match=message):
        model.to_json()


@pytest.mark.skipif(LEGACY, reason="tf_keras's optimizers evaluate a callable learning rate "
                                   "once, into a variable; no callable is left to lose")
def test_a_layer_optimizer_with_a_callable_learning_rate_is_named_when_saving():
    layer = embedding_keras.TPUEmbedding(helpers.feature_config(),
                                         K.optimizers.SGD(lambda: 0.1))
    with pytest.raises(ValueError, match="The layer's `optimizer`: the Keras optimizer's "
                                         "`learning_rate` is a Python callable"):
        layer.get_config()


def test_a_keras_file_of_other_tables_is_refused_with_their_names(tmp_path):
    model, _, _ = trained("functional", "embedding", seed=8)
    path = str(tmp_path / "model.keras")
    model.save(path)
    other = helpers.functional_model(tf_embedding.SGD(0.1))  # `video` without slots
    before = helpers.engine_state(other)
    with pytest.raises(ValueError, match=r"Layer 'embedding' cannot load these weights: .* "
                                         r"holds \['video:momenta', 'video:velocities'\]"):
        other.load_weights(path)
    for key, value in helpers.engine_state(other).items():
        np.testing.assert_array_equal(value, before[key])
