"""tf_embedding.keras_rs.DistributedEmbedding against independent references.

Lookups are checked against keras-rs's own CPU `DistributedEmbedding` (one Keras `EmbedReduce`
per table) built over the same configs and table values; training against the numpy TPU
optimizer rules (tests/helpers/references.py), each table with its own optimizer as keras-rs
translates it for TPUs; the translation against keras-rs's own `to_tf_tpu_optimizer`. Saving:
tests/keras_rs_layer/test_keras_rs_saving.py.
"""

import os
import sys

import pytest

if sys.version_info < (3, 11):
    pytest.skip("keras-rs needs Python 3.11 or newer", allow_module_level=True)

import keras  # pylint: disable=wrong-import-position
import keras_rs  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position
from keras_rs.src.layers.embedding.tensorflow import (  # pylint: disable=wrong-import-position
    config_conversion)

import tf_embedding  # pylint: disable=wrong-import-position
from tf_embedding import keras_rs as embedding_rs  # pylint: disable=wrong-import-position

from helpers.keras_loops import (  # pylint: disable=wrong-import-position
    mirrored_training_step, two_cpu_mirrored_strategy)
from helpers.keras_rs_models import (  # pylint: disable=wrong-import-position
    BATCH, F, NumpyTraining, SumModel, built_model, feature, fit_dataset, fit_samples, replay,
    table)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1",
                                 reason="keras-rs is Keras 3 only")]


def nested_configs(combiner, optimizers=None):
    """Two tables shared by four features in a nested structure."""
    optimizers = optimizers or {}
    video = table("video", combiner, optimizers.get("video", "sgd"), seed=1)
    user = table("user", combiner, optimizers.get("user", "sgd"), seed=2)
    return {"watched": feature("watched", video, (BATCH, 3)),
            "context": [feature("favorited", video, (BATCH, 3)),
                        {"friends": feature("friends", user, (BATCH, 3))}]}


def ids_of(kind, rng, vocab):
    """BATCH rows of 0 to 3 ids (3 for dense), as a Tensor, SparseTensor or RaggedTensor,
    with weights of the same kind (some negative; rows may be empty)."""
    if kind == "dense":
        return (tf.constant(rng.integers(0, vocab, (BATCH, 3))),
                tf.constant(rng.uniform(-0.5, 2, (BATCH, 3)).astype(F)))
    lengths = [3, 0, 1, 2]
    ids = tf.RaggedTensor.from_row_lengths(rng.integers(0, vocab, sum(lengths)), lengths)
    weights = ids.with_values(tf.constant(rng.uniform(-0.5, 2, sum(lengths)).astype(F)))
    if kind == "sparse":
        # Column gaps (positions 0 and 2 of a row), as a SparseTensor may have them.
        spread = lambda r: tf.SparseTensor(
            tf.stack([r.value_rowids(), 2 * (tf.range(tf.size(r.values), dtype=tf.int64)
                                             - tf.gather(r.row_splits, r.value_rowids()))], 1),
            r.values, [BATCH, 6])
        return spread(ids), spread(weights)
    return ids, weights


def nested_inputs(kind, seed):
    rng = np.random.default_rng(seed)
    pairs = {"watched": ids_of(kind, rng, 9), "favorited": ids_of(kind, rng, 9),
             "friends": ids_of(kind, rng, 6)}
    pack = lambda i: {"watched": pairs["watched"][i],
                      "context": [pairs["favorited"][i], {"friends": pairs["friends"][i]}]}
    return pack(0), pack(1)


# ---------------------------------------------------------------------------------------------
# Lookups: keras-rs's CPU layer over the same configs is the oracle.


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("kind", ["dense", "sparse", "ragged"])
def test_lookups_equal_keras_rs_cpu_path_with_and_without_weights(combiner, kind):
    configs = nested_configs(combiner)
    ours = embedding_rs.DistributedEmbedding(configs)
    oracle = keras_rs.layers.DistributedEmbedding(configs)
    features, weights = nested_inputs(kind, seed=3)
    for given in (None, weights):
        actual, expected = ours(features, given), oracle(features, given)
        tf.nest.assert_same_structure(actual, expected)
        for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
            assert a.shape == e.shape
            np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-6, atol=1e-6)
    tables, oracle_tables = ours.get_embedding_tables(), oracle.get_embedding_tables()
    assert sorted(tables) == sorted(oracle_tables) == ["user", "video"]
    for name, value in tables.items():
        np.testing.assert_array_equal(value.numpy(), np.asarray(oracle_tables[name]))


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_dense_one_id_rows_and_higher_ranks_equal_keras_rs(combiner):
    genre = table("genre", combiner)
    configs = {"one": feature("one", genre, (BATCH,)),
               "deep": keras_rs.layers.FeatureConfig(name="deep", table=genre,
                                                     input_shape=(BATCH, 2, 3),
                                                     output_shape=(BATCH, 2, 3))}
    rng = np.random.default_rng(4)
    features = {"one": tf.constant(rng.integers(0, 5, BATCH), tf.int32),
                "deep": tf.constant(rng.integers(0, 5, (BATCH, 2, 3)))}
    weights = {"one": tf.constant([1.0, 0.0, -2.0, 0.5]),
               "deep": tf.constant(rng.uniform(-1, 2, (BATCH, 2, 3)).astype(F))}
    ours = embedding_rs.DistributedEmbedding(configs)
    oracle = keras_rs.layers.DistributedEmbedding(configs)
    for given in (None, weights):
        actual, expected = ours(features, given), oracle(features, given)
        for name in configs:
            assert actual[name].shape == expected[name].shape
            np.testing.assert_allclose(actual[name].numpy(), expected[name].numpy(),
                                       rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("combiner", ["mean", "sqrtn"])
def test_rows_whose_weights_cancel_give_zeros_as_in_keras_rs(combiner):
    configs = {"a": feature("a", table("genre", combiner), (2, 2))}
    ids = {"a": tf.constant([[1, 2], [3, 4]])}
    weights = {"a": tf.constant([[1.0, -1.0], [0.0, 0.0]])}
    actual = embedding_rs.DistributedEmbedding(configs)(ids, weights)["a"].numpy()
    expected = keras_rs.layers.DistributedEmbedding(configs)(ids, weights)["a"].numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    assert np.all(np.isfinite(actual))


def test_bad_inputs_raise_errors_naming_the_feature():
    configs = nested_configs("mean")
    layer = embedding_rs.DistributedEmbedding(configs)
    features, weights = nested_inputs("ragged", seed=5)
    dense_weights = dict(weights, watched=tf.ones([BATCH, 3]))
    with pytest.raises(TypeError, match="Feature 'watched': weights must be a RaggedTensor"):
        layer(features, dense_weights)
    dense, _ = nested_inputs("dense", seed=5)
    with pytest.raises(ValueError, match="Feature 'watched'.*only the 'sum' combiner"):
        layer(dense, dict(weights, watched=tf.ones([BATCH]),
                          context=[tf.ones([BATCH, 3]), {"friends": tf.ones([BATCH, 3])}]))


# ---------------------------------------------------------------------------------------------
# Configuration: keras-rs's translation and refusals.


TRANSLATED = [
    keras.optimizers.SGD(0.3),
    keras.optimizers.Adagrad(0.2, initial_accumulator_value=0.5),
    keras.optimizers.Adam(0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-5),
    keras.optimizers.Ftrl(0.1, learning_rate_power=-0.25, l1_regularization_strength=0.01,
                          l2_regularization_strength=0.02, beta=0.5,
                          initial_accumulator_value=0.3),
    keras.optimizers.SGD(0.1, weight_decay=0.01, clipvalue=2.0),
    keras.optimizers.AdamW(0.01),  # an Adam subclass: Adam with its weight decay
    keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.5, 1, 0.5)),
    "sgd", "adagrad", "adam", "ftrl",
]


@pytest.mark.parametrize("optimizer", TRANSLATED, ids=lambda o: getattr(o, "name", o))
def test_table_optimizers_translate_as_keras_rs_translates_them_for_tpus(optimizer):
    stock = config_conversion.to_tf_tpu_optimizer(optimizer)
    ours = embedding_rs.table_optimizer(optimizer)
    assert type(ours).__name__ == type(stock).__name__
    for name, value in vars(stock).items():
        if name != "learning_rate":
            assert getattr(ours, name) == value, name
    value = lambda rate: float(rate() if callable(rate) else rate)
    assert value(ours.learning_rate) == pytest.approx(value(stock.learning_rate))


REJECTED = [
    (lambda: keras.optimizers.SGD(0.1, momentum=0.9), "Unsupported optimizer option momentum"),
    (lambda: keras.optimizers.SGD(0.1, nesterov=True), "Unsupported optimizer option nesterov"),
    (lambda: keras.optimizers.Adagrad(0.1, epsilon=1e-3), "Unsupported optimizer option epsilon"),
    (lambda: keras.optimizers.Adam(0.1, amsgrad=True), "Unsupported optimizer option amsgrad"),
    (lambda: keras.optimizers.Ftrl(0.1, l2_shrinkage_regularization_strength=0.1),
     "Unsupported optimizer option l2_shrinkage"),
    (lambda: keras.optimizers.Adagrad(0.1, clipnorm=1.0), "Optimizer.clipnorm"),
    (lambda: keras.optimizers.SGD(0.1, global_clipnorm=1.0), "Optimizer.global_clipnorm"),
    (lambda: keras.optimizers.Adam(0.1, use_ema=True), "Optimizer.use_ema"),
    (lambda: keras.optimizers.RMSprop(0.1), "Unsupported optimizer type"),
    (lambda: "rmsprop", "Unknown optimizer name 'rmsprop'"),
    (lambda: tf_embedding.AdagradMomentum(0.1, momentum=0.5), "Unknown optimizer type"),
]


@pytest.mark.parametrize("make, message", REJECTED)
def test_optimizers_keras_rs_rejects_raise_its_value_error_naming_the_table(make, message):
    optimizer = make()
    with pytest.raises(ValueError, match=message):
        config_conversion.to_tf_tpu_optimizer(optimizer)
    with pytest.raises(ValueError, match=f"Table 'video': .*{message}"):
        embedding_rs.DistributedEmbedding(nested_configs("sum", {"video": optimizer}))


def test_called_under_another_strategy_raises():
    layer = embedding_rs.DistributedEmbedding(nested_configs("sum"))
    features, weights = nested_inputs("dense", seed=14)
    layer(features, weights)
    with two_cpu_mirrored_strategy().scope():
        with pytest.raises(RuntimeError, match="created under strategy .* call it inside "
                                               "strategy.run"):
            layer(features, weights)


def test_keras_rs_configuration_errors():
    configs = nested_configs("sum")
    with pytest.raises(ValueError, match="`update_stats` cannot be True"):
        embedding_rs.DistributedEmbedding(configs, update_stats=True)
    with pytest.raises(ValueError, match="Unsupported table stacking"):
        embedding_rs.DistributedEmbedding(configs, table_stacking=[["video", "user"]])
    embedding_rs.DistributedEmbedding(configs, table_stacking=None)
    sparsecore = table("genre")
    sparsecore.placement = "sparsecore"
    with pytest.raises(ValueError, match="not running under a TPU strategy"):
        embedding_rs.DistributedEmbedding({"g": feature("g", sparsecore, (BATCH,))})
    twin = {"a": feature("a", table("genre"), (BATCH,)), "b": feature("b", table("genre"),
                                                                        (BATCH,))}
    with pytest.raises(ValueError, match="Two different TableConfigs are named 'genre'"):
        embedding_rs.DistributedEmbedding(twin)


# ---------------------------------------------------------------------------------------------
# Training: each table by its own optimizer, the TPU rule, in model.fit and custom loops.


@pytest.mark.parametrize("ragged", [False, True])
def test_model_fit_trains_each_table_with_its_own_optimizer_the_tpu_way(ragged):
    samples = fit_samples(seed=6, steps=3, ragged=ragged)
    model = built_model(samples)
    assert sorted(v.name for v in model.trainable_variables) == ["_gradient_trap_dummy", "bias"]
    reference = NumpyTraining(model.embedding)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(fit_dataset(samples), epochs=1, verbose=0, shuffle=False)
    replay(reference, samples, 3).check(model)


def test_custom_loop_under_mirrored_strategy_sums_gradients_over_the_global_batch():
    strategy = two_cpu_mirrored_strategy()
    samples = fit_samples(seed=7, steps=2, ragged=True)
    with strategy.scope():
        model = SumModel()
        optimizer = keras.optimizers.SGD(0.1)
    iterator = iter(strategy.experimental_distribute_dataset(
        fit_dataset(samples), options=tf.distribute.InputOptions(
            experimental_fetch_to_device=False)))
    training_step = mirrored_training_step(strategy, model, optimizer, BATCH)
    for _ in range(2):
        training_step(iterator)
    # The same constant initial tables, built outside the strategy.
    replay(NumpyTraining(built_model(samples).embedding), samples, 2).check(model)


@pytest.mark.slow
def test_model_fit_under_mirrored_strategy_trains_the_global_batch():
    strategy = two_cpu_mirrored_strategy()
    samples = fit_samples(seed=8, steps=2, ragged=False)
    with strategy.scope():
        model = SumModel()
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(fit_dataset(samples), epochs=1, verbose=0, shuffle=False)
    replay(NumpyTraining(built_model(samples).embedding), samples, 2).check(model)
