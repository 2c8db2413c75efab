"""tf_embedding.keras.TPUEmbedding in the Keras of this process (Keras 3, or tf_keras when the
suite runs with TF_USE_LEGACY_KERAS=1, as tools/run_tests.sh does a second time).

Lookups are checked against stock TF's TPUEmbeddingForServing, training against a numpy
transcription of the TPU optimizer rules (tests/references.py) driven by the same data, in a
custom loop, in model.fit and under a 2-replica MirroredStrategy.
"""

import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

from graph_helpers import custom_ops
from keras_helpers import mirrored_training_step, two_cpu_mirrored_strategy
from references import combined_gains, reference_step
from subprocess_helpers import fresh_process_output

F = np.float32
BATCH = 4
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"


def make_feature_config(optimizer=None):
    video = tf_embedding.TableConfig(
        vocabulary_size=9, dim=4, combiner="sum", name="video", optimizer=optimizer,
        initializer=tf.constant_initializer(np.linspace(-1, 1, 36).reshape(9, 4)))
    user = tf_embedding.TableConfig(
        vocabulary_size=5, dim=2, combiner="mean", name="user", optimizer=optimizer,
        initializer=tf.constant_initializer(np.linspace(1, -1, 10).reshape(5, 2)))
    return {"watched": tf_embedding.FeatureConfig(video, name="watched"),
            "favorited": tf_embedding.FeatureConfig(video, name="favorited"),
            "friends": tf_embedding.FeatureConfig(user, name="friends")}


def make_samples(rng, steps):
    """Per step and feature, BATCH samples of (id, weight) pairs."""
    vocab = {"watched": 9, "favorited": 9, "friends": 5}
    return [{name: [[(int(i), float(w)) for i, w in zip(rng.integers(0, v, n),
                                                       rng.uniform(0.5, 2, n))]
                    for n in rng.integers(1, 4, BATCH)]
             for name, v in vocab.items()} for _ in range(steps)]


def ragged(samples, column):
    dtype = tf.float32 if column else tf.int64
    return tf.ragged.constant([[x[column] for x in s] for s in samples], dtype=dtype,
                              row_splits_dtype=tf.int64)


def inputs(step, kind="ragged"):
    """(features, weights): watched weighted, favorited and friends unweighted."""
    features = {name: ragged(samples, 0) for name, samples in step.items()}
    weights = {"watched": ragged(step["watched"], 1), "favorited": None, "friends": None}
    if kind == "sparse":
        features = {name: value.to_sparse() for name, value in features.items()}
        weights["watched"] = weights["watched"].to_sparse()
    return features, weights


def unweighted(step):
    """The samples as the lookup sees them: only `watched` keeps its weights."""
    return {name: [[(i, w if name == "watched" else 1.0) for i, w in s] for s in samples]
            for name, samples in step.items()}


class NumpyModel:
    """The layer's tables and slots in numpy, updated by the TPU rule of `optimizer`."""

    def __init__(self, layer, optimizer):
        self.optimizer = optimizer
        self.tables = {t.name: tf.convert_to_tensor(v).numpy()
                       for t, v in layer.embedding_tables.items()}
        engine_variables = layer._tpu_embedding._variables
        self.slots = {name: [tf.convert_to_tensor(engine_variables[name][slot]).numpy()
                             for slot in optimizer.slot_names()] for name in self.tables}

    @staticmethod
    def table_of(name):
        return "user" if name == "friends" else "video"

    def rows(self, name, samples):
        combiner = "mean" if name == "friends" else "sum"
        return [list(zip([i for i, _ in s], combined_gains([w for _, w in s], combiner)))
                for s in samples]

    def lookup(self, step):
        step = unweighted(step)
        out = {}
        for name, samples in step.items():
            table = self.tables[self.table_of(name)]
            out[name] = np.array([sum(F(g) * table[i] for i, g in row)
                                  for row in self.rows(name, samples)], F)
        return out

    def apply(self, step, activation_gradients, lr):
        step = unweighted(step)
        for table in self.tables:
            names = [n for n in ("watched", "favorited", "friends") if self.table_of(n) == table]
            rows = [row for n in names for row in self.rows(n, step[n])]
            row_splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
            ids = np.array([i for r in rows for i, _ in r], np.int64)
            gains = np.array([g for r in rows for _, g in r], F)
            grads = np.concatenate([activation_gradients[n] for n in names]).astype(F)
            reference_step(self.optimizer, self.tables[table], self.slots[table],
                           [(row_splits, ids, gains, grads)], lr)

    def check(self, layer):
        engine_variables = layer._tpu_embedding._variables
        for name, table in self.tables.items():
            np.testing.assert_allclose(
                tf.convert_to_tensor(engine_variables[name]["parameters"]).numpy(), table,
                rtol=1e-5, atol=1e-6, err_msg=name)
            for slot, expected in zip(self.optimizer.slot_names(), self.slots[name]):
                np.testing.assert_allclose(
                    tf.convert_to_tensor(engine_variables[name][slot]).numpy(), expected,
                    rtol=1e-5, atol=1e-6, err_msg=f"{name}/{slot}")


OPTIMIZERS = {
    "sgd": lambda: tf_embedding.SGD(0.1),
    "adagrad": lambda: tf_embedding.Adagrad(0.1, initial_accumulator_value=0.5),
    "adagrad_momentum": lambda: tf_embedding.AdagradMomentum(0.1, momentum=0.5),
    "adam": lambda: tf_embedding.Adam(0.05),
    "ftrl": lambda: tf_embedding.FTRL(0.1, l1_regularization_strength=0.01),
}


# ---------------------------------------------------------------------------------------------
# Lookups.


def test_lookups_match_stock_tpu_embedding_for_serving():
    layer = embedding_keras.TPUEmbedding(make_feature_config(), "sgd")
    step = make_samples(np.random.default_rng(0), 1)[0]
    stock = tf.tpu.experimental.embedding
    stock_tables = {t.name: stock.TableConfig(vocabulary_size=t.vocabulary_size, dim=t.dim,
                                              combiner=t.combiner, name=t.name)
                    for t in layer.embedding_tables}
    stock_config = {name: stock.FeatureConfig(stock_tables[f.table.name], name=name)
                    for name, f in make_feature_config().items()}
    stock = stock.TPUEmbeddingForServing(stock_config, optimizer=None)
    stock.build()
    for kind in ("ragged", "sparse"):
        features, weights = inputs(step, kind)
        actual = layer(features, weights)
        for table in stock.embedding_tables:
            ours = [v for t, v in layer.embedding_tables.items() if t.name == table.name][0]
            stock.embedding_tables[table].assign(tf.convert_to_tensor(ours))
        expected = stock(features, weights)
        for name in features:
            np.testing.assert_allclose(actual[name].numpy(), expected[name].numpy(),
                                       rtol=1e-6, atol=1e-6, err_msg=f"{kind} {name}")


def test_forward_pass_looks_up_in_one_op_and_training_converts_in_its_gradient():
    """Without a gradient, each table's features are converted and looked up in one op
    (TfeFeaturesLookup); a training step converts them again in the gradient, for the update.
    Both look up the same bits."""
    layer = embedding_keras.TPUEmbedding(make_feature_config(), "sgd")
    features, _ = inputs(make_samples(np.random.default_rng(1), 1)[0], "sparse")

    @tf.function
    def forward(features):
        return layer(features)

    @tf.function
    def train(features):
        with tf.GradientTape() as tape:
            activations = layer(features)
            loss = tf.add_n([tf.reduce_sum(value) for value in activations.values()])
        tape.gradient(loss, layer.trainable_variables)
        return activations

    assert custom_ops(forward, features) == {"TfeFeaturesLookup"}
    assert {"TfeFeaturesLookup", "TfeFeaturesToCsr", "TfeSparseApplySgd"} <= custom_ops(
        train, features)
    looked_up, trained = forward(features), train(features)
    for name in features:
        np.testing.assert_array_equal(looked_up[name].numpy(), trained[name].numpy())
    # The training step updated the tables.
    assert not np.array_equal(forward(features)["watched"].numpy(), looked_up["watched"].numpy())


def test_dense_and_sequence_inputs_have_tf_cpu_lookup_shapes():
    table = tf_embedding.TableConfig(vocabulary_size=6, dim=3, name="t")
    config = {"dense": tf_embedding.FeatureConfig(table),
              "sequence": tf_embedding.FeatureConfig(table, max_sequence_length=4)}
    layer = embedding_keras.TPUEmbedding(config, "adagrad")
    out = layer({"dense": tf.constant([[1], [2]], tf.int64),
                 "sequence": tf.ragged.constant([[1, 2, 3], [4]], dtype=tf.int64)})
    assert out["dense"].shape == (2, 1, 3)
    assert out["sequence"].shape == (2, 4, 3)
    tables = tf.convert_to_tensor(layer.embedding_tables[table]).numpy()
    np.testing.assert_array_equal(out["sequence"].numpy()[1], [tables[4], *np.zeros((3, 3))])


def test_serving_config_looks_up_the_current_tables_with_another_config():
    config = make_feature_config()
    layer = embedding_keras.TPUEmbedding(config, "sgd")
    video = config["watched"].table
    serving_config = {"clicked": tf_embedding.FeatureConfig(video, max_sequence_length=2)}
    out = layer({"clicked": tf.ragged.constant([[3, 1], [2]], dtype=tf.int64)},
                serving_config=serving_config)
    table = tf.convert_to_tensor(layer.embedding_tables[video]).numpy()
    np.testing.assert_array_equal(out["clicked"].numpy()[0], table[[3, 1]])
    other = tf_embedding.TableConfig(vocabulary_size=2, dim=4, name="other")
    with pytest.raises(ValueError, match="does not match any of the TableConfigs used to "
                                         "configure this layer"):
        layer({"x": tf.constant([0])}, serving_config={"x": tf_embedding.FeatureConfig(other)})


# ---------------------------------------------------------------------------------------------
# Training.


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_custom_loop_trains_tables_with_the_tpu_rule(optimizer):
    embedding_optimizer = OPTIMIZERS[optimizer]()
    layer = embedding_keras.TPUEmbedding(make_feature_config(), embedding_optimizer)
    rng = np.random.default_rng(1)
    steps = make_samples(rng, 3)
    layer(*inputs(steps[0]))
    reference = NumpyModel(layer, embedding_optimizer)

    @tf.function
    def train(features, weights, targets):
        with tf.GradientTape() as tape:
            activations = layer(features, weights)
            loss = tf.add_n([tf.reduce_sum(activations[n] * targets[n]) for n in targets])
        gradients = tape.gradient(loss, layer.trainable_variables)
        return activations, gradients

    for step in steps:
        targets = {n: rng.uniform(-1, 1, (BATCH, 4 if n != "friends" else 2)).astype(F)
                   for n in step}
        expected = reference.lookup(step)
        activations, gradients = train(*inputs(step), targets)
        assert [g.numpy().tolist() for g in gradients] == [[0.0]]
        for name in step:
            np.testing.assert_allclose(activations[name].numpy(), expected[name], rtol=1e-5,
                                       atol=1e-6)
        reference.apply(step, targets, 0.1 if optimizer != "adam" else 0.05)
        reference.check(layer)


def test_tables_are_not_trainable_and_the_helper_is_not_checkpointed(tmp_path):
    layer = embedding_keras.TPUEmbedding(make_feature_config(), "adagrad")
    layer(*inputs(make_samples(np.random.default_rng(2), 1)[0]))
    assert [v.name.split("/")[-1].split(":")[0] for v in layer.trainable_variables] == [
        "tpu_embedding_helper_dummy"]
    path = tf.train.Checkpoint(model=layer).write(str(tmp_path / "ckpt"))
    assert sorted(name for name, _ in tf.train.list_variables(path)) == [
        "_CHECKPOINTABLE_OBJECT_GRAPH",
        "model/_tpu_embedding/user.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
        "model/_tpu_embedding/user/.ATTRIBUTES/VARIABLE_VALUE",
        "model/_tpu_embedding/video.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
        "model/_tpu_embedding/video/.ATTRIBUTES/VARIABLE_VALUE"]


class SumModel(tf.keras.Model):
    """y = sum over features of act_f . coefficients_f: no trainable weight of its own, so the
    activation gradients of a squared loss are known in closed form."""

    def __init__(self, layer):
        super().__init__()
        self.embedding = layer
        self.coefficients = {"watched": tf.constant([1.0, -0.5, 0.25, 2.0]),
                             "favorited": tf.constant([0.5, 0.5, -1.0, 1.0]),
                             "friends": tf.constant([-1.0, 1.5])}

    def call(self, inputs):
        features, weights = inputs
        # Datasets cannot carry None: unweighted features are absent from `weights`.
        activations = self.embedding(features, {n: weights.get(n) for n in features})
        return tf.add_n([tf.reduce_sum(activations[n] * self.coefficients[n], axis=1)
                         for n in self.coefficients])[:, None]


def fit_dataset(steps, labels, kind):
    features, weights = inputs({n: [s for step in steps for s in step[n]] for n in steps[0]},
                               kind)
    weights = {n: w for n, w in weights.items() if w is not None}
    return tf.data.Dataset.from_tensor_slices(((features, weights), labels)).batch(BATCH)


def expected_after_fit(layer, optimizer, steps, labels, model):
    """Replays fit in numpy: MSE loss, gradient 2 (y - label) c_f / B per activation row."""
    reference = NumpyModel(layer, optimizer)
    coefficients = {n: c.numpy() for n, c in model.coefficients.items()}
    for index, step in enumerate(steps):
        activations = reference.lookup(step)
        y = sum(activations[n] @ coefficients[n] for n in coefficients)
        residual = 2 * (y - labels[index * BATCH:(index + 1) * BATCH, 0]) / BATCH
        reference.apply(step, {n: residual[:, None] * coefficients[n][None, :]
                               for n in coefficients}, 0.1)
    return reference


# jit_compile=True compiles the whole step, the fused ops through their XLA kernels (to a few
# ulp of the TF-runtime kernels, within the reference's tolerance). Keras 3's "auto" compiles
# models whose layers all support XLA, as this one does, on machines with an accelerator; on a
# CPU-only machine it never compiles. tf_keras has no "auto".
FIT_CASES = [("sparse", False), ("ragged", False), ("sparse", True), ("ragged", True)] + (
    [] if LEGACY else [("sparse", "auto")])


@pytest.mark.parametrize("kind, jit_compile", FIT_CASES)
def test_model_fit_trains_tables_with_the_tpu_rule(kind, jit_compile):
    optimizer = tf_embedding.Adagrad(0.1)
    layer = embedding_keras.TPUEmbedding(make_feature_config(), optimizer)
    model = SumModel(layer)
    rng = np.random.default_rng(3)
    steps = make_samples(rng, 3)
    labels = rng.uniform(-1, 1, (3 * BATCH, 1)).astype(F)
    model((inputs(steps[0], kind)))
    reference = expected_after_fit(layer, optimizer, steps, labels, model)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", jit_compile=jit_compile)
    model.fit(fit_dataset(steps, labels, kind), epochs=1, verbose=0)
    assert LEGACY or layer.supports_jit  # (a Keras 3 attribute)
    if jit_compile is True:
        assert model.jit_compile
    reference.check(layer)


def test_mirrored_strategy_custom_loop_sums_gradients_over_the_global_batch():
    # The seed's loop: strategy.run, tape.gradient over model.trainable_variables and the
    # model's optimizer. (Keras 3's fit cannot distribute sparse or ragged inputs.)
    strategy = two_cpu_mirrored_strategy()
    optimizer = tf_embedding.Adagrad(0.1)
    with strategy.scope():
        layer = embedding_keras.TPUEmbedding(make_feature_config(), optimizer)
        model = SumModel(layer)
        keras_optimizer = tf.keras.optimizers.SGD(0.1)
    rng = np.random.default_rng(5)
    steps = make_samples(rng, 2)
    labels = rng.uniform(-1, 1, (2 * BATCH, 1)).astype(F)
    iterator = iter(strategy.experimental_distribute_dataset(
        fit_dataset(steps, labels, "ragged"),
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False)))
    training_step = mirrored_training_step(strategy, model, keras_optimizer, BATCH)
    for _ in steps:
        training_step(iterator)
    # Two row blocks per table, one per replica device.
    assert [len(list(v)) for v in layer.embedding_tables.values()] == [2, 2]
    single = embedding_keras.TPUEmbedding(make_feature_config(), tf_embedding.Adagrad(0.1))
    single_model = SumModel(single)
    single_model((inputs(steps[0], "ragged")))
    expected_after_fit(single, optimizer, steps, labels, single_model).check(layer)


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
    return {n: (v.indices.numpy().tolist(), v.values.numpy().tolist(), v.dense_shape.numpy().tolist())
            for n, v in structure.items() if v is not None}


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
        out = serve(**{{n: tf.constant(v, tf.int64) for n, v in {({n: v.tolist() for n, v in features.items()})!r}.items()}})
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


@pytest.mark.skipif(LEGACY, reason="the Keras 3 refusal; tests/test_tfrs_layer.py runs the mode")
def test_model_optimizer_mode_explains_that_it_needs_tf_keras():
    with pytest.raises(ValueError, match="needs tf_keras"):
        embedding_keras.TPUEmbedding(make_feature_config(), "sgd",
                                     tables_trained_by="model_optimizer")


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


def engine_values(model):
    return {f"{table}/{name}": tf.convert_to_tensor(variable).numpy()
            for table, variables in model.embedding._tpu_embedding._variables.items()
            for name, variable in variables.items()}


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
    assert sorted(engine_values(restored)) == ["user/accumulators", "user/parameters",
                                               "video/accumulators", "video/parameters"]
    np.testing.assert_equal(engine_values(restored), engine_values(model))
    dataset = fit_dataset(steps[3:], labels[3 * BATCH:], "sparse")
    for trained in (model, restored):
        trained.fit(dataset, epochs=1, verbose=0)
    np.testing.assert_equal(engine_values(restored), engine_values(model))


def test_loading_weights_of_other_tables_or_slots_refuses_and_names_them(tmp_path):
    rng = np.random.default_rng(12)
    steps = make_samples(rng, 1)
    model = fitted_model(steps, rng.uniform(-1, 1, (BATCH, 1)).astype(F))
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    other = SumModel(embedding_keras.TPUEmbedding(make_feature_config(), tf_embedding.SGD(0.1)))
    other((inputs(steps[0], "sparse")))
    before = engine_values(other)
    with pytest.raises(ValueError, match="cannot load these weights: it stores its embedding "
                                         "tables and slots by name"):
        other.load_weights(path)
    np.testing.assert_equal(engine_values(other), before)
