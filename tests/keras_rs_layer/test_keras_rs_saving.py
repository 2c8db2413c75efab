"""tf_embedding.keras_rs.DistributedEmbedding's saving: `tf.train.Checkpoint` (keys, round trip,
restore into stock `TPUEmbeddingForServing`), Keras' `.weights.h5` and `.keras` files (training
continues identically), and SavedModels scored in a process that imports neither tf_embedding
nor keras-rs; and the ImportError without keras-rs."""

import os
import sys
import textwrap

import pytest

if sys.version_info < (3, 11):
    pytest.skip("keras-rs needs Python 3.11 or newer", allow_module_level=True)

import keras  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position

from tf_embedding import keras_rs as embedding_rs  # pylint: disable=wrong-import-position

from helpers.keras_rs_models import (  # pylint: disable=wrong-import-position
    BATCH, COMBINER, DIMS, F, TABLE_OF, VOCAB, as_tensors, built_model, feature, fit_dataset,
    fit_samples, table)
from helpers.checkpoints import layer_engine_holder  # pylint: disable=wrong-import-position
from helpers.processes import fresh_process_output  # pylint: disable=wrong-import-position
from helpers.tables import table_values  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1",
                                 reason="keras-rs is Keras 3 only")]


def fitted(samples, steps):
    model = built_model(samples)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    features, weights, labels = samples
    model.fit(fit_dataset((features, weights, labels[:steps * BATCH])).take(steps), epochs=1,
              verbose=0, shuffle=False)
    return model


def continue_both(model, restored, samples, start_step):
    """One more fit step of both models on the same batch: training goes on identically."""
    batch = fit_dataset(samples).skip(start_step).take(1)
    restored.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    for trained in (model, restored):
        trained.fit(batch, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_equal(table_values(restored.embedding), table_values(model.embedding))
    np.testing.assert_equal(restored.bias.numpy(), model.bias.numpy())


SLOTS = {"video": ["accumulators"], "user": ["accumulators", "linears"],
         "genre": ["momenta", "velocities"]}


def test_checkpoint_round_trip_holds_tables_and_slots_under_tpu_embedding(tmp_path):
    samples = fit_samples(seed=9, steps=3, ragged=True)
    model = fitted(samples, 2)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    keys = sorted(name for name, _ in tf.train.list_variables(path))
    expected = [f"model/embedding/_tpu_embedding/{t}{'.S' + s if s else ''}/.ATTRIBUTES/"
                "VARIABLE_VALUE" for t, slots in SLOTS.items() for s in [None, *slots]]
    assert set(expected) <= set(keys)
    assert not [k for k in keys if "_gradient_trap_dummy" in k]
    restored = built_model(samples)
    tf.train.Checkpoint(model=restored).read(path).assert_existing_objects_matched()
    np.testing.assert_equal(table_values(restored.embedding), table_values(model.embedding))
    continue_both(model, restored, samples, 2)


def test_checkpoint_restores_into_stock_tpu_embedding_for_serving_by_table_name(tmp_path):
    samples = fit_samples(seed=10, steps=1, ragged=False)
    model = fitted(samples, 1)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    stock = tf.tpu.experimental.embedding
    tables = {name: stock.TableConfig(VOCAB[name], DIMS[name], name=name,
                                      combiner=COMBINER[name]) for name in VOCAB}
    serving = stock.TPUEmbeddingForServing(
        {n: stock.FeatureConfig(tables[TABLE_OF[n]], name=n) for n in TABLE_OF}, stock.SGD())
    serving.build()
    holder = layer_engine_holder(serving)
    tf.train.Checkpoint(model=holder).read(path).expect_partial()
    for config, variable in serving.embedding_tables.items():
        np.testing.assert_array_equal(variable.numpy(),
                                      table_values(model.embedding)[f"{config.name}/parameters"])


@pytest.mark.parametrize("how", ["weights", "model"])
def test_keras_saving_keeps_tables_and_slots_and_training_continues_identically(tmp_path, how):
    samples = fit_samples(seed=11, steps=3, ragged=True)
    model = fitted(samples, 2)
    if how == "weights":
        path = str(tmp_path / "model.weights.h5")
        model.save_weights(path)
        restored = built_model(samples)
        restored.load_weights(path)
    else:
        path = str(tmp_path / "model.keras")
        model.save(path)
        restored = keras.models.load_model(path)
    assert sorted(table_values(restored.embedding)) == sorted(
        f"{t}/{s}" for t, slots in SLOTS.items() for s in ["parameters", *slots])
    np.testing.assert_equal(table_values(restored.embedding), table_values(model.embedding))
    continue_both(model, restored, samples, 2)


def functional_model():
    """Dense ids and weights in, one score out: Keras can rebuild it from its config."""
    configs = {n: feature(n, table(TABLE_OF[n], COMBINER[TABLE_OF[n]], seed=index),
                          (None, 3))
               for index, n in enumerate(("favorited", "friends"))}
    ids = {n: keras.Input(shape=(3,), dtype="int64", name=n) for n in configs}
    weights = {n: keras.Input(shape=(3,), dtype="float32", name=f"{n}_weights")
               for n in configs}
    activations = embedding_rs.DistributedEmbedding(configs, name="embedding")(ids, weights)
    joined = keras.layers.Concatenate()([activations[n] for n in configs])
    return keras.Model({"ids": ids, "weights": weights}, keras.layers.Dense(1)(joined))


def functional_inputs(seed):
    rng = np.random.default_rng(seed)
    return {"ids": {"favorited": rng.integers(0, 9, (5, 3)), "friends": rng.integers(0, 6, (5, 3))},
            "weights": {n: rng.uniform(0.5, 2, (5, 3)).astype(F) for n in ("favorited", "friends")}}


def test_functional_model_round_trips_through_its_keras_config(tmp_path):
    model = functional_model()
    data = functional_inputs(12)
    expected = model(data).numpy()
    model.save(str(tmp_path / "model.keras"))
    restored = keras.models.load_model(str(tmp_path / "model.keras"))
    layer = restored.get_layer("embedding")
    assert type(layer) is embedding_rs.DistributedEmbedding
    assert layer.get_config()["table_stacking"] == "auto"
    np.testing.assert_allclose(restored(data).numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_saved_model_uses_stock_ops_and_scores_the_same_without_tf_embedding(tmp_path):
    model = functional_model()
    data = functional_inputs(13)
    expected = model(data).numpy().ravel()
    model.export(str(tmp_path / "export"), verbose=False)
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({str(tmp_path / 'export')!r})
        data = {({k: {n: v.tolist() for n, v in d.items()} for k, d in data.items()})!r}
        ids = {{n: tf.constant(v, tf.int64) for n, v in data["ids"].items()}}
        weights = {{n: tf.constant(v, tf.float32) for n, v in data["weights"].items()}}
        print(np.asarray(loaded.serve({{"ids": ids, "weights": weights}})).ravel().tolist())
        assert not any(m.startswith(("tf_embedding", "keras_rs")) for m in sys.modules)
    """)
    printed = fresh_process_output(script).strip().splitlines()[-1]
    np.testing.assert_allclose(np.array(eval(printed), F), expected,  # pylint: disable=eval-used
                               rtol=1e-6, atol=1e-6)


def test_missing_keras_rs_raises_an_import_error_naming_the_extra():
    script = textwrap.dedent("""
        import sys
        sys.modules["keras_rs"] = None  # as if keras-rs were not installed
        try:
            import tf_embedding.keras_rs
        except ImportError as error:
            print(str(error).replace(" ", "_"))
    """)
    printed = fresh_process_output(script).strip().splitlines()[-1]
    assert "tf_embedding[keras-rs]" in printed and "--no-deps" in printed


@pytest.mark.slow
def test_subclassed_model_saved_itself_scores_ragged_inputs_without_tf_embedding(tmp_path):
    """tf.saved_model.save of the model itself: Keras 3 also traces its default signature (float
    inputs in tracked containers of the build shapes), which the layer survives."""
    samples = fit_samples(seed=15, steps=1, ragged=True)
    model = built_model(samples)
    features, weights = as_tensors(samples[0], samples[1], 0, BATCH)
    expected = model((features, weights)).numpy().ravel()
    spec = lambda dtype, n: (tf.RaggedTensorSpec([None, None], dtype, row_splits_dtype=tf.int64)
                             if n == "watched" else tf.TensorSpec([None, 3], dtype))
    model.serve = tf.function(lambda inputs: model(inputs), input_signature=[(
        {n: spec(tf.int64, n) for n in TABLE_OF}, {n: spec(tf.float32, n) for n in TABLE_OF})])
    tf.saved_model.save(model, str(tmp_path / "export"))
    columns = lambda values: {n: v if isinstance(v, list) else v.tolist()
                              for n, v in values.items()}
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({str(tmp_path / 'export')!r})
        convert = lambda v, dtype: (tf.ragged.constant(v, dtype, row_splits_dtype=tf.int64)
                                    if isinstance(v[-1], list) and {{len(r) for r in v}} != {{3}}
                                    else tf.constant(v, dtype))
        features = {{n: convert(v, tf.int64) for n, v in {columns(samples[0])!r}.items()}}
        weights = {{n: convert(v, tf.float32) for n, v in {columns(samples[1])!r}.items()}}
        print(np.asarray(loaded.serve((features, weights))).ravel().tolist())
        assert not any(m.startswith(("tf_embedding", "keras_rs")) for m in sys.modules)
    """)
    printed = fresh_process_output(script).strip().splitlines()[-1]
    np.testing.assert_allclose(np.array(eval(printed), F), expected,  # pylint: disable=eval-used
                               rtol=1e-6, atol=1e-6)
