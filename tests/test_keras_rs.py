"""tf_embedding.keras_rs.DistributedEmbedding against independent references.

Lookups are checked against keras-rs's own CPU `DistributedEmbedding` (one Keras `EmbedReduce`
per table) built over the same configs and table values; training against the numpy TPU
optimizer rules (tests/references.py), each table with its own optimizer as keras-rs translates
it for TPUs; the translation against keras-rs's own `to_tf_tpu_optimizer`.
"""

import os
import sys
import textwrap

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

from keras_helpers import (  # pylint: disable=wrong-import-position
    mirrored_training_step, two_cpu_mirrored_strategy)
from references import combined_gains, reference_step  # pylint: disable=wrong-import-position
from subprocess_helpers import fresh_process_output  # pylint: disable=wrong-import-position

pytestmark = pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1",
                                reason="keras-rs is Keras 3 only")

F = np.float32
BATCH = 4
VOCAB = {"video": 9, "user": 6, "genre": 5}
DIMS = {"video": 4, "user": 2, "genre": 3}


def table(name, combiner="sum", optimizer="sgd", seed=0):
    values = np.random.default_rng(seed).uniform(-1, 1, (VOCAB[name], DIMS[name])).astype(F)
    return keras_rs.layers.TableConfig(
        name=name, vocabulary_size=VOCAB[name], embedding_dim=DIMS[name], combiner=combiner,
        optimizer=optimizer, initializer=keras.initializers.Constant(values))


def feature(name, table_config, input_shape):
    return keras_rs.layers.FeatureConfig(
        name=name, table=table_config, input_shape=input_shape,
        output_shape=(input_shape[0], table_config.embedding_dim))


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


FIT_OPTIMIZERS = {
    "video": lambda: keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.5),
    "user": lambda: keras.optimizers.Ftrl(0.1, l1_regularization_strength=0.01),
    "genre": lambda: keras.optimizers.Adam(0.05),
}
COEFFICIENTS = {"watched": [1.0, -0.5, 0.25, 2.0], "favorited": [0.5, 0.5, -1.0, 1.0],
                "friends": [-1.0, 1.5], "genres": [0.3, -0.7, 1.1]}
TABLE_OF = {"watched": "video", "favorited": "video", "friends": "user", "genres": "genre"}
COMBINER = {"video": "sum", "user": "mean", "genre": "sqrtn"}


def fit_configs():
    tables = {name: table(name, COMBINER[name], make(), seed=index)
              for index, (name, make) in enumerate(FIT_OPTIMIZERS.items())}
    return {name: feature(name, tables[TABLE_OF[name]], (BATCH, 3)) for name in TABLE_OF}


@keras.saving.register_keras_serializable(package="tf_embedding_tests")
class SumModel(keras.Model):
    """y = sum over features of act_f . c_f + bias: the activation gradients of a squared loss
    are known in closed form, and the bias is what the model's own optimizer trains."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding_rs.DistributedEmbedding(fit_configs())
        self.bias = self.add_weight(shape=(), initializer="zeros", name="bias")

    def call(self, inputs):
        features, weights = inputs
        activations = self.embedding(features, weights)
        return tf.add_n([tf.reduce_sum(activations[n] * tf.constant(c), axis=1)
                         for n, c in COEFFICIENTS.items()])[:, None] + self.bias

    def get_build_config(self):
        return None  # the layer makes its tables when its weights are loaded


def fit_samples(seed, steps, ragged):
    """(features, weights, labels) of `steps` batches; `watched` ragged if `ragged`."""
    rng = np.random.default_rng(seed)
    rows = steps * BATCH
    features = {n: rng.integers(0, VOCAB[TABLE_OF[n]], (rows, 3)) for n in TABLE_OF}
    weights = {n: rng.uniform(0.5, 2, (rows, 3)).astype(F) for n in TABLE_OF}
    lengths = rng.integers(0, 4, rows)
    if ragged:
        features["watched"] = [list(rng.integers(0, 9, k)) for k in lengths]
        weights["watched"] = [list(rng.uniform(0.5, 2, k).astype(F)) for k in lengths]
    return features, weights, rng.uniform(-1, 1, (rows, 1)).astype(F)


def as_tensors(features, weights, start, stop):
    convert = lambda v, dtype: (tf.ragged.constant(v[start:stop], dtype) if isinstance(v, list)
                                else tf.constant(v[start:stop], dtype))
    return ({n: convert(v, tf.int64) for n, v in features.items()},
            {n: convert(v, tf.float32) for n, v in weights.items()})


def fit_dataset(samples, batch=BATCH):
    features, weights, labels = samples
    all_features, all_weights = as_tensors(features, weights, 0, len(labels))
    return tf.data.Dataset.from_tensor_slices(
        ((all_features, all_weights), labels)).batch(batch)


class NumpyTraining:
    """The layer's tables and slots in numpy, trained by numpy's TPU rules per table."""

    def __init__(self, layer):
        self.optimizers = {name: embedding_rs.table_optimizer(make())
                           for name, make in FIT_OPTIMIZERS.items()}
        self.tables, self.slots = {}, {}
        for name, variables in layer._tpu_embedding._variables.items():
            value = lambda v: tf.convert_to_tensor(v).numpy().copy()
            self.tables[name] = value(variables["parameters"])
            self.slots[name] = [value(variables[slot])
                                for slot in self.optimizers[name]._slot_names()]
        self.bias = F(0)

    @staticmethod
    def rows(features, weights, name, start, stop):
        combiner = COMBINER[TABLE_OF[name]]
        return [list(zip(ids, combined_gains([F(w) for w in ws], combiner)))
                for ids, ws in zip(features[name][start:stop], weights[name][start:stop])]

    def step(self, samples, start, stop, model_lr):
        features, weights, labels = samples
        rows = {n: self.rows(features, weights, n, start, stop) for n in TABLE_OF}
        activations = {n: np.array([sum((F(g) * self.tables[TABLE_OF[n]][i] for i, g in r),
                                        np.zeros(DIMS[TABLE_OF[n]], F)) for r in rows[n]])
                       for n in TABLE_OF}
        y = sum(activations[n] @ np.array(c, F) for n, c in COEFFICIENTS.items()) + self.bias
        residual = 2 * (y - labels[start:stop, 0]) / (stop - start)
        for name in self.tables:
            batches = []
            for n in sorted(n for n in TABLE_OF if TABLE_OF[n] == name):
                splits = np.cumsum([0] + [len(r) for r in rows[n]])
                ids = np.array([i for r in rows[n] for i, _ in r], np.int64)
                gains = np.array([g for r in rows[n] for _, g in r], F)
                gradients = residual[:, None] * np.array(COEFFICIENTS[n], F)[None, :]
                batches.append((splits, ids, gains, gradients.astype(F)))
            optimizer = self.optimizers[name]
            reference_step(optimizer, self.tables[name], self.slots[name], batches,
                           optimizer.learning_rate)
        self.bias = F(self.bias - model_lr * residual.sum())

    def check(self, model):
        variables = model.embedding._tpu_embedding._variables
        for name, expected in self.tables.items():
            np.testing.assert_allclose(tf.convert_to_tensor(variables[name]["parameters"]),
                                       expected, rtol=2e-5, atol=1e-6, err_msg=name)
            for slot, value in zip(self.optimizers[name]._slot_names(), self.slots[name]):
                np.testing.assert_allclose(tf.convert_to_tensor(variables[name][slot]), value,
                                           rtol=2e-5, atol=1e-6, err_msg=f"{name}/{slot}")
        np.testing.assert_allclose(model.bias.numpy(), self.bias, rtol=1e-5, atol=1e-6)


def built_model(samples):
    model = SumModel()
    model(as_tensors(samples[0], samples[1], 0, BATCH))
    return model


@pytest.mark.parametrize("ragged", [False, True])
def test_model_fit_trains_each_table_with_its_own_optimizer_the_tpu_way(ragged):
    samples = fit_samples(seed=6, steps=3, ragged=ragged)
    model = built_model(samples)
    assert sorted(v.name for v in model.trainable_variables) == ["_gradient_trap_dummy", "bias"]
    reference = NumpyTraining(model.embedding)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(fit_dataset(samples), epochs=1, verbose=0, shuffle=False)
    replay(reference, samples, 3).check(model)


def replay(reference, samples, steps):
    """`reference` after `steps` batches of BATCH rows, the model's SGD at 0.1."""
    for step in range(steps):
        reference.step(samples, step * BATCH, (step + 1) * BATCH, 0.1)
    return reference


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


def test_model_fit_under_mirrored_strategy_trains_the_global_batch():
    strategy = two_cpu_mirrored_strategy()
    samples = fit_samples(seed=8, steps=2, ragged=False)
    with strategy.scope():
        model = SumModel()
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(fit_dataset(samples), epochs=1, verbose=0, shuffle=False)
    replay(NumpyTraining(built_model(samples).embedding), samples, 2).check(model)


# ---------------------------------------------------------------------------------------------
# Saving: checkpoints, Keras' files and SavedModels carry tables and slots.


def engine_values(model):
    return {f"{table}/{name}": tf.convert_to_tensor(variable).numpy()
            for table, variables in model.embedding._tpu_embedding._variables.items()
            for name, variable in variables.items()}


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
    np.testing.assert_equal(engine_values(restored), engine_values(model))
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
    np.testing.assert_equal(engine_values(restored), engine_values(model))
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
    holder = tf.Module()
    holder.embedding = tf.Module()
    holder.embedding._tpu_embedding = serving  # pylint: disable=protected-access
    tf.train.Checkpoint(model=holder).read(path).expect_partial()
    for config, variable in serving.embedding_tables.items():
        np.testing.assert_array_equal(variable.numpy(),
                                      engine_values(model)[f"{config.name}/parameters"])


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
    assert sorted(engine_values(restored)) == sorted(
        f"{t}/{s}" for t, slots in SLOTS.items() for s in ["parameters", *slots])
    np.testing.assert_equal(engine_values(restored), engine_values(model))
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
