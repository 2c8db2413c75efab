"""tf_embedding.keras.TPUEmbedding's surface and misuse (cloned configs, TFRS's messages, the Keras
optimizer translation), and its exports scored without tf_embedding.
"""

import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

from helpers.keras_layer import BATCH, NumpyModel, SumModel
from helpers.keras_layer import inputs, make_feature_config, make_samples
from helpers.processes import fresh_process_output

pytestmark = pytest.mark.integration


F = np.float32
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"


# ---------------------------------------------------------------------------------------------
# Surface and misuse.


def test_user_configs_are_cloned_not_mutated():
    table = tf_embedding.TableConfig(vocabulary_size=4, dim=2)
    config = {"f": tf_embedding.FeatureConfig(table)}
    layer = embedding_keras.TPUEmbedding(config, "sgd")
    assert table.name is None and table.optimizer is None
    assert list(layer.embedding_tables) == [table]


@pytest.mark.parametrize("optimizer, message", [
    ("rmsprop", "Unknown optimizer name 'rmsprop'. Please use one of 'sgd','adagrad', 'adam', "
                "or 'ftrl'"),
    (3, "Unknown optimizer type <class 'int'>"),
])
def test_bad_optimizer_arguments_raise_tfrs_messages(optimizer, message):
    with pytest.raises(ValueError, match=message):
        embedding_keras.TPUEmbedding(make_feature_config(), optimizer)


def test_translate_keras_optimizer_copies_hyperparameters_and_follows_the_learning_rate():
    keras_optimizer = tf.keras.optimizers.Adam(learning_rate=0.25, beta_1=0.8, epsilon=1e-3)
    translated = embedding_keras.translate_keras_optimizer(keras_optimizer)
    assert isinstance(translated, tf_embedding.Adam)
    assert (translated.beta_1, translated.beta_2, translated.epsilon) == (0.8, 0.999, 1e-3)
    assert translated.lazy_adam and translated.sum_inside_sqrt  # the TPU rule
    assert float(translated.learning_rate_tensor()) == 0.25
    keras_optimizer.learning_rate.assign(0.5)
    assert float(translated.learning_rate_tensor()) == 0.5


@pytest.mark.parametrize("make, message", [
    (lambda: tf.keras.optimizers.RMSprop(), "Keras optimizer RMSprop is unsupported for TPU "
                                            "Embedding."),
    (lambda: tf_embedding.SGD(), "SGD is an unsupported optimizer class. Please pass a Keras "
                                 "optimizer."),
    (lambda: tf.keras.optimizers.SGD(momentum=0.9), "Optimizer parameter momentum is "
                                                    "unsupported for TPU embeddings"),
    (lambda: tf.keras.optimizers.Adagrad(epsilon=0.1), "Optimizer parameter epsilon is "
                                                       "unsupported"),
    (lambda: tf.keras.optimizers.Adam(clipnorm=1.0), "Optimizer parameter clipnorm is "
                                                     "unsupported"),
])
def test_translate_keras_optimizer_rejects_what_the_tpu_rule_cannot_express(make, message):
    with pytest.raises(ValueError, match=message):
        embedding_keras.translate_keras_optimizer(make())


def test_called_under_another_strategy_raises_tfrs_message():
    layer = embedding_keras.TPUEmbedding(make_feature_config(), "sgd")
    features, weights = inputs(make_samples(np.random.default_rng(6), 1)[0])
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        with pytest.raises(RuntimeError, match="Layer is created under strategy .* but is "
                                               "being called under strategy .* Please use "
                                               "strategy.run when calling this layer."):
            layer(features, weights)


def test_feature_errors_name_the_feature():
    layer = embedding_keras.TPUEmbedding(make_feature_config(), "sgd")
    features, _ = inputs(make_samples(np.random.default_rng(7), 1)[0])
    with pytest.raises(ValueError, match="Weight specified for favorited, but input is dense"):
        layer(dict(features, favorited=tf.constant([1, 2, 3, 4], tf.int64)),
              {"watched": None, "favorited": tf.ones([4]), "friends": None})
    bad = dict(features, friends=tf.ragged.constant([[7], [1], [1], [1]], dtype=tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="user"):
        layer(bad)


# ---------------------------------------------------------------------------------------------
# Export.


@pytest.mark.slow
@pytest.mark.parametrize("saved", ["model", "module"])
def test_saved_model_uses_stock_ops_and_scores_the_same_without_tf_embedding(tmp_path, saved):
    """The subclassed model itself, or a tf.Module holding it, saved with its own signature:
    Keras 3 also traces its default signature with float32 dense inputs, which the layer
    survives."""
    layer = embedding_keras.TPUEmbedding(make_feature_config(), "adagrad")
    model = SumModel(layer)
    step = make_samples(np.random.default_rng(8), 1)[0]
    features, weights = inputs(step, "sparse")
    expected = model((features, weights)).numpy()
    spec = {n: tf.SparseTensorSpec([None, None], tf.int64) for n in features}

    @tf.function(input_signature=[spec, tf.SparseTensorSpec([None, None], tf.float32)])
    def serve(features, watched_weights):
        return model((features, {"watched": watched_weights, "favorited": None,
                                 "friends": None}))

    holder = model if saved == "model" else tf.Module()
    holder.model_serve = serve
    if saved == "module":
        holder.model = model
    tf.saved_model.save(holder, str(tmp_path / "export"))
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({str(tmp_path / 'export')!r})
        def sparse(indices, values, shape, dtype):
            return tf.SparseTensor(np.array(indices, np.int64).reshape(-1, 2),
                                   np.array(values, dtype), shape)
        features = {{n: sparse(*v, np.int64) for n, v in {_sparse_parts(features)!r}.items()}}
        weights = sparse(*{_sparse_parts(weights)["watched"]!r}, np.float32)
        print(loaded.model_serve(features, weights).numpy().ravel().tolist())
        assert not any(m.startswith("tf_embedding") for m in sys.modules)
    """)
    printed = fresh_process_output(script).strip().splitlines()[-1]
    scores = np.array(eval(printed), F)  # pylint: disable=eval-used
    np.testing.assert_allclose(scores, expected.ravel(), rtol=1e-6, atol=1e-6)


def _sparse_parts(structure):
    return {n: (v.indices.numpy().tolist(), v.values.numpy().tolist(),
                v.dense_shape.numpy().tolist())
            for n, v in structure.items() if v is not None}


@pytest.mark.slow
def test_functional_model_export_loads_and_scores_without_tf_embedding(tmp_path):
    # Keras' own export (Keras 3's model.export; tf_keras's) of a functional model over dense
    # id inputs: the serving function is traced for the SavedModel, so it holds stock ops only.
    table = tf_embedding.TableConfig(vocabulary_size=7, dim=3, name="t")
    layer = embedding_keras.TPUEmbedding({"a": tf_embedding.FeatureConfig(table),
                                          "b": tf_embedding.FeatureConfig(table)}, "sgd")
    ids = {n: tf.keras.Input(shape=(1,), dtype="int64", name=n) for n in ("a", "b")}
    activations = layer(ids)
    flat = tf.keras.layers.Concatenate()([tf.keras.layers.Flatten()(activations[n])
                                          for n in ("a", "b")])
    model = tf.keras.Model(ids, tf.keras.layers.Dense(1)(flat))
    features = {"a": np.array([[1], [6]], np.int64), "b": np.array([[0], [3]], np.int64)}
    expected = model(features).numpy().ravel()
    model.export(str(tmp_path / "export"))
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({str(tmp_path / 'export')!r})
        serve = loaded.signatures["serving_default"]
        out = serve(**{{n: tf.constant(v, tf.int64) for n, v in {(
            {n: v.tolist() for n, v in features.items()})!r}.items()}})
        print(np.asarray(list(out.values())[0]).ravel().tolist())
        assert not any(m.startswith("tf_embedding") for m in sys.modules)
    """)
    printed = fresh_process_output(script).strip().splitlines()[-1]
    scores = np.array(eval(printed), F)  # pylint: disable=eval-used
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-6)


def test_keras_schedule_of_a_translated_optimizer_follows_its_iterations():
    # The seed's dynamic learning rate: a Keras schedule, advanced by the Keras optimizer's
    # apply_gradients (here the one that also trains the rest of the model).
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=1,
                                                              decay_rate=0.5)
    keras_optimizer = tf.keras.optimizers.SGD(schedule)
    layer = embedding_keras.TPUEmbedding(make_feature_config(), keras_optimizer)
    model = SumModel(layer)
    rng = np.random.default_rng(10)
    steps = make_samples(rng, 3)
    model(inputs(steps[0]))
    reference = NumpyModel(layer, tf_embedding.SGD(0.5))
    for index, step in enumerate(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(inputs(step)))
        gradients = tape.gradient(loss, model.trainable_variables)
        keras_optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        coefficients = {n: c.numpy() for n, c in model.coefficients.items()}
        reference.apply(step, {n: np.tile(c, (BATCH, 1)) for n, c in coefficients.items()},
                        0.5 * 0.5 ** index)
        reference.check(layer)


@pytest.mark.skipif(LEGACY,
                    reason="the Keras 3 refusal; tests/keras/test_tfrs_layer.py runs the mode")
def test_model_optimizer_mode_explains_that_it_needs_tf_keras():
    with pytest.raises(ValueError, match="needs tf_keras"):
        embedding_keras.TPUEmbedding(make_feature_config(), "sgd",
                                     tables_trained_by="model_optimizer")
