"""tf_embedding.feature_column: the spec's and Parameter classes' validation, EmbeddingFeatures
against stock's DenseFeatures / SequenceFeatures (tf_keras), training against numpy TPU rules,
and the migration to the mid-level API."""

import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tf_embedding
from tf_embedding import feature_column as efc
from tf_embedding import optimizers

from helpers.feature_column import DIM, F, adagrad_spec, columns, initializer, raw_features
from helpers.references import combined_gains, csr, reference_step
from helpers.processes import fresh_process_output
from helpers.tables import table_values

pytestmark = pytest.mark.integration


def test_outputs_equal_stock_dense_features():
    features = raw_features(np.random.default_rng(0))
    ours = efc.EmbeddingFeatures(adagrad_spec())(features)
    stock = tf_keras.layers.DenseFeatures(columns())(features)
    np.testing.assert_allclose(ours.numpy(), stock.numpy(), rtol=1e-6, atol=1e-6)


def test_columns_are_stocks_with_stocks_variable_names():
    layer = tf_keras.layers.DenseFeatures(columns()[:2], name="dense_features")
    layer(raw_features(np.random.default_rng(1)))
    assert sorted(v.name for v in layer.variables) == [
        "dense_features/query_weighted_by_query_weight_embedding/embedding_weights:0",
        "dense_features/watched_embedding/embedding_weights:0"]


def test_sequence_columns_equal_stock_sequence_features_at_max_length():
    ids = tf.feature_column.sequence_categorical_column_with_identity("clicks", 6)
    column = efc.embedding_column(ids, DIM, combiner="sum", max_sequence_length=3,
                                  initializer=initializer(6, 3))
    spec = efc.EmbeddingConfigSpec(feature_columns=[column],
                                   optimization_parameters=efc.AdagradParameters(0.1))
    features = {"clicks": tf.sparse.from_dense(tf.constant([[1, 2, 3], [4, 0, 0]], tf.int64))}
    ours, ours_length = efc.EmbeddingFeatures(spec)(features)
    stock, stock_length = tf_keras.experimental.SequenceFeatures([column])(features)
    np.testing.assert_allclose(ours.numpy(), stock.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(ours_length.numpy(), stock_length.numpy())


class NumpyTables:
    """The spec's tables after the TPU rule, rows summed over columns of a shared table."""

    def __init__(self, layer, optimizer):
        self.optimizer = optimizer
        self.tables = {n: tf.convert_to_tensor(v).numpy()
                       for n, v in layer.embedding_tables.items()}
        # Each slot at its optimizer's initial value (Adagrad: accumulators at 0.1).
        # private: TF's slot protocol (_slot_initializers) gives the slots' initial values.
        self.slots = {n: [initializer(t.shape, tf.float32).numpy()
                          for initializer in optimizer(n)._slot_initializers()]
                      for n, t in self.tables.items()}

    def step(self, layer, features, targets, lr):
        # Row layout of one column: its ids and gains per sample (the conversion's contract).
        batches = {}
        # private: needs a public accessor (the layer's columns, each with its FeatureConfig).
        for feature in layer._columns:
            pair = feature.column.categorical_column.get_sparse_tensors(
                tf.__internal__.feature_column.FeatureTransformationCache(features), None)
            ids, rows = pair.id_tensor.values.numpy(), pair.id_tensor.indices[:, 0].numpy()
            weights = (np.ones(len(ids)) if pair.weight_tensor is None
                       else pair.weight_tensor.values.numpy())
            combiner = feature.config.table.combiner
            samples = [[(int(i), float(w)) for i, w, r in zip(ids, weights, rows) if r == b]
                       for b in range(4)]
            gains = [combined_gains([w for _, w in s], combiner) for s in samples]
            row_splits = np.cumsum([0] + [len(s) for s in samples]).astype(np.int64)
            batches.setdefault(feature.config.table.name, []).append(
                (row_splits, np.array([i for s in samples for i, _ in s], np.int64),
                 np.array([g for gs in gains for g in gs], F),
                 targets[feature.column.name]))
        for name, table_batches in batches.items():
            row_splits, ids, gains, grads = table_batches[0]
            for more in table_batches[1:]:
                row_splits = np.concatenate([row_splits, row_splits[-1] + more[0][1:]])
                ids, gains = np.concatenate([ids, more[1]]), np.concatenate([gains, more[2]])
                grads = np.concatenate([grads, more[3]])
            reference_step(self.optimizer(name), self.tables[name], self.slots[name],
                           [(row_splits, ids, gains, grads.astype(F))], lr)


def train_three_steps_against(reference, layer, rng) -> None:
    """Three steps of a loss linear in the layer's output, whose gradient multiplier is 2: the
    tables after each step equal `reference`'s (NumpyTables) after the same step."""
    names = sorted(c.name for c in columns())

    @tf.function
    def train(features, targets):
        with tf.GradientTape() as tape:
            out = layer(features)
            loss = tf.reduce_sum(out * targets)
        return tape.gradient(loss, layer.trainable_variables)

    for step in range(3):
        features = raw_features(rng)
        targets = rng.uniform(-1, 1, (4, DIM * len(names))).astype(F)
        train(features, targets)
        per_column = {n: 2.0 * targets[:, i * DIM:(i + 1) * DIM] for i, n in enumerate(names)}
        reference.step(layer, features, per_column, 0.1)
        assert int(layer.global_step.numpy()) == step + 1
        for name, table in reference.tables.items():
            np.testing.assert_allclose(
                tf.convert_to_tensor(layer.embedding_tables[name]).numpy(), table,
                rtol=1e-5, atol=1e-6, err_msg=name)


def test_training_applies_the_tpu_rule_with_multiplier_clipping_and_learning_rate_fn():
    spec = efc.EmbeddingConfigSpec(
        feature_columns=columns(), optimization_parameters=efc.AdagradParameters(0.1),
        clipping_limit=0.3, experimental_gradient_multiplier_fn=lambda step: 2.0)
    layer = efc.EmbeddingFeatures(spec)
    rng = np.random.default_rng(4)
    layer(raw_features(rng))
    # private: needs a public accessor (the optimizer each of a layer's tables trains with).
    reference = NumpyTables(layer, lambda name: layer._tpu_embedding._table_config[
        [t.name for t in layer._tpu_embedding._table_config].index(name)].optimizer)
    train_three_steps_against(reference, layer, rng)


# The Parameter classes v1 had beyond SGD, Adagrad, Adam and FTRL, each trained by its fused
# kernel: every element of the rule in play (l1/l2, Nesterov, momentum), with clipping_limit and
# the gradient multiplier.
V1_ONLY_PARAMETERS = {
    "ProximalAdagradParameters": (
        lambda: efc.ProximalAdagradParameters(0.1, initial_accumulator=0.2,
                                              l1_regularization_strength=0.01,
                                              l2_regularization_strength=0.05),
        optimizers.ProximalAdagrad),
    "MomentumParameters": (
        lambda: efc.MomentumParameters(0.1, momentum=0.9, use_nesterov=True),
        optimizers.Momentum),
    "RMSPropParameters": (
        lambda: efc.RMSPropParameters(0.1, rho=0.9, momentum=0.5, epsilon=1e-3),
        optimizers.RMSProp),
}


@pytest.mark.parametrize("name", sorted(V1_ONLY_PARAMETERS))
def test_training_applies_the_tpu_rule_of_each_v1_only_parameter_class(name):
    make_parameters, optimizer_class = V1_ONLY_PARAMETERS[name]
    spec = efc.EmbeddingConfigSpec(
        feature_columns=columns(), optimization_parameters=make_parameters(),
        clipping_limit=0.3, experimental_gradient_multiplier_fn=lambda step: 2.0)
    layer = efc.EmbeddingFeatures(spec)
    rng = np.random.default_rng(7)
    layer(raw_features(rng))
    # private: needs a public accessor (the optimizer each of a layer's tables trains with).
    table_optimizers = {t.name: t.optimizer for t in layer._tpu_embedding._table_config}
    for optimizer in table_optimizers.values():
        assert type(optimizer) is optimizer_class
        assert (optimizer.clip_gradient_min, optimizer.clip_gradient_max) == (-0.3, 0.3)
    reference = NumpyTables(layer, table_optimizers.__getitem__)
    train_three_steps_against(reference, layer, rng)


def test_proximal_yogi_trains_through_the_v1_config_dicts():
    """The estimator accepts ProximalYogiParameters only as a table's own optimizer in the config
    dicts, not as a spec's with feature columns (so not in EmbeddingFeatures): the dict spec's
    mid-level configs train it, with its slots at v1's initial values and clipping_limit."""
    with pytest.raises(ValueError, match="optimization_parameters must be an instance of type"):
        efc.EmbeddingConfigSpec(feature_columns=columns(),
                                optimization_parameters=efc.ProximalYogiParameters())
    parameters = efc.ProximalYogiParameters(
        0.1, beta1=0.8, beta2=0.9, epsilon=0.01, l1_regularization_strength=0.001,
        l2_regularization_strength=0.1, initial_accumulator_value=0.01)
    table = efc.TableConfig(10, DIM, initializer=initializer(10, 8), combiner="sum",
                            optimization_parameters=parameters)
    spec = efc.EmbeddingConfigSpec(
        feature_to_config_dict={"watched": efc.FeatureConfig("video"),
                                "favorited": efc.FeatureConfig("video")},
        table_to_config_dict={"video": table}, clipping_limit=0.3)
    mid = tf_embedding.TPUEmbedding(efc.mid_level_configs(spec), optimizer=None)
    mid.build()
    [config] = mid.embedding_tables
    optimizer = config.optimizer
    assert type(optimizer) is optimizers.ProximalYogi
    assert (optimizer.clip_gradient_min, optimizer.clip_gradient_max) == (-0.3, 0.3)
    slots = mid.table_variables()["video"]
    np.testing.assert_array_equal(tf.convert_to_tensor(slots["v"]).numpy(),
                                  np.full((10, DIM), 0.01, F))
    np.testing.assert_array_equal(tf.convert_to_tensor(slots["m"]).numpy(),
                                  np.zeros((10, DIM), F))
    expected = tf.convert_to_tensor(slots["parameters"]).numpy()
    expected_slots = [np.full((10, DIM), 0.01, F), np.zeros((10, DIM), F)]
    rng = np.random.default_rng(8)
    for _ in range(3):
        id_lists = {key: [list(rng.integers(0, 10, rng.integers(1, 4))) for _ in range(4)]
                    for key in ("favorited", "watched")}
        features = {key: tf.ragged.constant(ids, tf.int64).to_sparse()
                    for key, ids in id_lists.items()}
        targets = {key: rng.uniform(-1, 1, (4, DIM)).astype(F) for key in id_lists}
        mid.enqueue(features)
        with tf.GradientTape() as tape:
            activations = mid.dequeue()
            tape.watch(activations)
            loss = tf.add_n([tf.reduce_sum(activations[k] * targets[k]) for k in targets])
        mid.apply_gradients(tape.gradient(loss, activations))
        # Both features' lookups (gain 1, sum combiner) feed the one table's update.
        batches = [(*csr([[(int(i), 1.0) for i in row] for row in id_lists[key]]), targets[key])
                   for key in sorted(id_lists)]
        reference_step(optimizer, expected, expected_slots, batches, 0.1)
        np.testing.assert_allclose(tf.convert_to_tensor(slots["parameters"]).numpy(), expected,
                                   rtol=1e-5, atol=1e-6)
    for name, value in zip(["v", "m"], expected_slots):
        np.testing.assert_allclose(tf.convert_to_tensor(slots[name]).numpy(), value,
                                   rtol=1e-5, atol=1e-6, err_msg=name)


def test_learning_rate_fn_reads_the_global_step():
    watched = tf.feature_column.categorical_column_with_identity("watched", 10)
    column = efc.embedding_column(watched, DIM, combiner="sum", initializer=initializer(10, 0),
                                  learning_rate_fn=lambda step: 0.5 / tf.cast(step + 1,
                                                                              tf.float32))
    layer = efc.EmbeddingFeatures(efc.EmbeddingConfigSpec(
        feature_columns=[column],
        optimization_parameters=efc.StochasticGradientDescentParameters(0.1)))
    features = {"watched": tf.sparse.from_dense(tf.constant([[1], [2], [1], [3]], tf.int64))}
    layer(features)
    table = tf.convert_to_tensor(layer.embedding_tables["tbl_watched"]).numpy()
    for step in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(features))
        tape.gradient(loss, layer.trainable_variables)
        table[[1, 2, 3]] -= (0.5 / (step + 1)) * np.array([[2.0], [1.0], [1.0]], F)
    np.testing.assert_allclose(tf.convert_to_tensor(layer.embedding_tables["tbl_watched"]),
                               table, rtol=1e-6)


def test_mid_level_configs_train_the_mid_level_api_identically():
    # 'mod' reaches both engines; the layer's one block and the mid-level object's three
    # strided blocks train the same values.
    spec = adagrad_spec(partition_strategy="mod")
    layer = efc.EmbeddingFeatures(spec)
    assert efc.mid_level_options(spec) == {"partition_strategy": "mod",
                                           "profile_data_directory": None}
    # private: needs a public accessor (the options a layer gave its engine).
    assert {state.layout.partition_strategy
            for state in layer._tpu_embedding.engine.tables} == {"mod"}
    config = efc.mid_level_configs(spec)
    assert sorted(config) == ["left", "query", "right", "watched"]
    assert config["left"].table is config["right"].table
    assert config["left"].table.name == "tbl_left_right_shared_embedding"
    assert config["query"].table.name == "tbl_query_weighted_by_query_weight"
    mid = tf_embedding.TPUEmbedding(config, optimizer=None, table_devices=["/cpu:0"] * 3,
                                    **efc.mid_level_options(spec))
    rng = np.random.default_rng(5)
    features = raw_features(rng)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(features) ** 2)
    tape.gradient(loss, layer.trainable_variables)
    transformed = tf.__internal__.feature_column.FeatureTransformationCache(features)
    ids, weights = {}, {}
    for key, column in zip(sorted(config), sorted(columns(), key=lambda c: c.name)):
        pair = column.categorical_column.get_sparse_tensors(transformed, None)
        ids[config_key(column)] = pair.id_tensor
        weights[config_key(column)] = pair.weight_tensor
    mid.enqueue({k: ids[k] for k in config}, {k: weights[k] for k in config})
    with tf.GradientTape() as tape:
        activations = mid.dequeue()
        tape.watch(activations)
        loss = tf.add_n([tf.reduce_sum(a ** 2) for a in activations.values()])
    mid.apply_gradients(tape.gradient(loss, activations))
    for table, variable in mid.embedding_tables.items():
        assert [block.shape[0] for block in variable] == [
            len(range(block, table.vocabulary_size, 3)) for block in range(3)]
        np.testing.assert_allclose(tf.convert_to_tensor(variable).numpy(),
                                   tf.convert_to_tensor(layer.embedding_tables[table.name]),
                                   rtol=1e-6, atol=1e-7, err_msg=table.name)


@pytest.mark.parametrize("parameters, slots", [
    (efc.ProximalAdagradParameters(0.1), {"ProximalAdagrad": "accumulators"}),
    (efc.MomentumParameters(0.1, 0.9), {"Momentum": "momenta"}),
    (efc.RMSPropParameters(0.1, 0.9, 0.0, 1e-3), {"RMSProp/ms": "ms", "RMSProp/mom": "mom"}),
])
def test_checkpoint_name_map_names_tf1_slots_of_the_v1_only_optimizers(parameters, slots):
    spec = efc.EmbeddingConfigSpec(feature_columns=columns()[:1],
                                   optimization_parameters=parameters)
    mapping = efc.checkpoint_name_map(spec)
    variable = "dense_features/watched_embedding/embedding_weights"
    assert mapping == {variable: "tbl_watched",
                       **{f"{variable}/{suffix}": f"tbl_watched/{slot}"
                          for suffix, slot in slots.items()}}


def config_key(column):
    return column.get_feature_key_name()


def test_checkpoint_name_map_moves_a_dense_features_run_to_the_mid_level_api():
    cols = columns()[:2]
    stock = tf_keras.layers.DenseFeatures(cols, name="dense_features")
    features = raw_features(np.random.default_rng(6))
    stock(features)
    for variable in stock.variables:  # trained values, not the initializers'
        variable.assign(variable * 2.0 + 0.5)
    expected = stock(features).numpy()
    spec = efc.EmbeddingConfigSpec(feature_columns=cols,
                                   optimization_parameters=efc.AdagradParameters(0.1))
    mapping = efc.checkpoint_name_map(spec)
    assert mapping["dense_features/watched_embedding/embedding_weights/Adagrad"] == (
        "tbl_watched/accumulators")
    config = efc.mid_level_configs(spec)
    serving = tf_embedding.TPUEmbeddingForServing(config, optimizer=None)
    for variable in stock.variables:
        [table] = [v for t, v in serving.embedding_tables.items()
                   if t.name == mapping[variable.name.split(":")[0]]]
        table.assign(variable)
    transformed = tf.__internal__.feature_column.FeatureTransformationCache(features)
    pairs = {c.get_feature_key_name(): c.categorical_column.get_sparse_tensors(transformed, None)
             for c in cols}
    out = serving({k: p.id_tensor for k, p in pairs.items()},
                  {k: p.weight_tensor for k, p in pairs.items()})
    # DenseFeatures concatenates in column-name order: query_weighted..., watched.
    np.testing.assert_allclose(np.concatenate([out["query"], out["watched"]], axis=1), expected,
                               rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Validation.


SPEC_ERRORS = [
    (dict(), ValueError, "Exactly one of `feature_columns` and the pair `feature_to_config_dict` "
                         "and `table_to_config_dict` must be be specified."),
    (dict(feature_columns=[], feature_to_config_dict={}, table_to_config_dict={}), ValueError,
     "Exactly one of"),
    (dict(feature_columns=[], partition_strategy="hash"), ValueError,
     'Invalid partition_strategy hash. Must be one of "mod" or "div".'),
    (dict(feature_columns=[tf.feature_column.categorical_column_with_identity("a", 3)]),
     TypeError, "All feature columns must be supported types in"),
    (dict(feature_columns=[]), ValueError, "optimization_parameters must be an instance of type"),
    (dict(feature_to_config_dict={"f": "x"}, table_to_config_dict={}), TypeError,
     "Config for feature f must be of type `FeatureConfig`."),
    (dict(feature_to_config_dict={"f": efc.FeatureConfig("t")}, table_to_config_dict={}),
     ValueError, "Feature f refers to table t which is not in the table_to_config_dict."),
    (dict(feature_to_config_dict={"f": efc.FeatureConfig("t")}, table_to_config_dict={"t": 1}),
     TypeError, "Config for table t must be of type `TableConfig`."),
]


@pytest.mark.parametrize("kwargs, error, message", SPEC_ERRORS)
def test_spec_validation(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        efc.EmbeddingConfigSpec(**kwargs)


# The v1 classes check their arguments with the v2 optimizer's checks and messages (each
# optimizer's checks are stated once), plus v1's own (FTRL's learning_rate_power).
PARAMETER_ERRORS = [
    (lambda: efc.AdagradParameters(0.1, initial_accumulator=0),
     "Argument `initial_accumulator_value` must be a positive float. Received: 0"),
    (lambda: efc.AdamParameters(0.1, beta1=1.0),
     "Argument `beta_1` must be >= 0 and < 1. Received: 1.0."),
    (lambda: efc.AdamParameters(0.1, beta2=-0.1),
     "Argument `beta_2` must be >= 0 and < 1. Received: -0.1."),
    (lambda: efc.AdamParameters(0.1, epsilon=0), "epsilon must be positive; got 0."),
    (lambda: efc.AdamParameters(0.1, lazy_adam=False, use_gradient_accumulation=False),
     "gradient accumulation must be used. Set `use_gradient_accumulation` to True."),
    (lambda: efc.FtrlParameters(0.1, learning_rate_power=0.5),
     "learning_rate_power must be less than or equal to 0. got 0.5."),
    (lambda: efc.FtrlParameters(0.1, initial_accumulator_value=-1),
     "Argument `initial_accumulator_value` must be >= 0. Received: -1."),
    (lambda: efc.ProximalAdagradParameters(0.1, l1_regularization_strength=-1),
     "Argument `l1_regularization_strength` must be >= 0. Received: -1."),
    (lambda: efc.AdagradParameters(0.1, use_gradient_accumulation=False, clip_gradient_max=1),
     "When using gradient clipping limits, gradient accumulation must be enabled."),
    (lambda: efc.TableConfig(0, 4), "Invalid vocabulary_size 0."),
    (lambda: efc.TableConfig(4, 0), "Invalid dimension 0."),
    (lambda: efc.TableConfig(4, 2, combiner="max"), "Invalid combiner max"),
    (lambda: efc.TableConfig(4, 2, learning_rate=0.1, learning_rate_fn=abs),
     "At most one of learning_rate and learning_rate_fn can be None"),
    (lambda: efc.FeatureConfig("t", max_sequence_length=-1), "Invalid max_sequence_length -1."),
]


@pytest.mark.parametrize("make, message", PARAMETER_ERRORS)
def test_parameter_and_v1_config_validation(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        make()


def test_v1_defaults_map_onto_the_v2_optimizers():
    adam = efc.AdamParameters(0.1).embedding_optimizer()
    assert (adam.beta_1, adam.beta_2, adam.epsilon) == (0.9, 0.999, 1e-08)
    ftrl = efc.FtrlParameters(0.1, initial_accumulator_value=0.0).embedding_optimizer()
    assert ftrl.allow_zero_accumulator
    sgd = efc.StochasticGradientDescentParameters(0.1, clip_gradient_min=-1.0)
    assert sgd.use_gradient_accumulation
    assert sgd.embedding_optimizer().clip_gradient_min == -1.0
    clipped = efc.AdagradParameters(0.1).embedding_optimizer(clip_limit=0.5)
    assert (clipped.clip_gradient_min, clipped.clip_gradient_max) == (-0.5, 0.5)


def test_v1_only_parameter_classes_map_onto_their_fused_optimizers():
    proximal = efc.ProximalAdagradParameters(0.2, initial_accumulator=0.3,
                                             l1_regularization_strength=0.1,
                                             clip_gradient_max=2.0).embedding_optimizer()
    assert type(proximal) is optimizers.ProximalAdagrad
    assert (proximal.learning_rate, proximal.initial_accumulator_value,
            proximal.l1_regularization_strength, proximal.clip_gradient_max) == (0.2, 0.3, 0.1,
                                                                                  2.0)
    momentum = efc.MomentumParameters(0.2, 0.9, use_nesterov=True).embedding_optimizer()
    assert (type(momentum), momentum.momentum, momentum.use_nesterov) == (
        optimizers.Momentum, 0.9, True)
    rms = efc.RMSPropParameters(0.2, 0.8, 0.5, 1e-3, weight_decay_factor=0.1).embedding_optimizer()
    assert (type(rms), rms.rho, rms.momentum, rms.epsilon, rms.weight_decay_factor) == (
        optimizers.RMSProp, 0.8, 0.5, 1e-3, 0.1)
    yogi = efc.ProximalYogiParameters().embedding_optimizer(learning_rate=0.5)
    assert type(yogi) is optimizers.ProximalYogi
    assert (yogi.learning_rate, yogi.beta1, yogi.beta2, yogi.epsilon,
            yogi.initial_accumulator_value) == (0.5, 0.9, 0.999, 1e-3, 1e-6)
    for parameters in (efc.ProximalAdagradParameters(0.1), efc.MomentumParameters(0.1, 0.9),
                       efc.RMSPropParameters(0.1, 0.9, 0.0, 1e-3), efc.ProximalYogiParameters()):
        # A Parameter class can no longer lack an optimizer: the base method is abstract.
        assert isinstance(parameters.embedding_optimizer(), optimizers._Optimizer)


class ColumnsModel(tf.keras.Model):
    def __init__(self, spec):
        super().__init__()
        self.columns = efc.EmbeddingFeatures(spec)

    def call(self, features):
        return self.columns(features)


def test_keras_weights_keep_tables_slots_and_global_step(tmp_path):
    """save_weights / load_weights carry what Keras does not see, and training goes on alike."""
    rng = np.random.default_rng(5)
    batches = [raw_features(rng) for _ in range(3)]
    models = [ColumnsModel(adagrad_spec()), ColumnsModel(adagrad_spec())]

    def train(model, features):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(features) ** 2)
        tape.gradient(loss, model.trainable_variables)

    def state(model):
        return {**table_values(model.columns), "global_step": model.columns.global_step.numpy()}

    for features in batches[:2]:
        train(models[0], features)
    path = str(tmp_path / "columns.weights.h5")
    models[0].save_weights(path)
    models[1](batches[0])
    models[1].load_weights(path)
    np.testing.assert_equal(state(models[1]), state(models[0]))
    assert state(models[1])["global_step"] == 2
    for model in models:
        train(model, batches[2])
    np.testing.assert_equal(state(models[1]), state(models[0]))


@pytest.mark.slow
def test_saved_model_of_a_keras_model_scores_the_same_without_tf_embedding(tmp_path):
    """Saving traces stock lookups (and survives Keras 3's float32 default signature); the
    model's own signature scores in a process that never imports tf_embedding."""
    features = raw_features(np.random.default_rng(6))
    model = ColumnsModel(adagrad_spec())
    expected = model(features).numpy()
    spec = {key: tf.SparseTensorSpec([None, None], value.dtype) for key, value in features.items()}
    model.serve = tf.function(model.call, input_signature=[spec])
    tf.saved_model.save(model, str(tmp_path / "export"))
    parts = {key: (value.indices.numpy().tolist(), value.values.numpy().tolist(),
                   value.dense_shape.numpy().tolist(), value.dtype.name)
             for key, value in features.items()}
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({str(tmp_path / 'export')!r})
        features = {{key: tf.SparseTensor(np.array(i, np.int64).reshape(-1, 2),
                                          tf.constant(v, getattr(tf, d)), s)
                     for key, (i, v, s, d) in {parts!r}.items()}}
        print(loaded.serve(features).numpy().ravel().tolist())
        assert not any(m.startswith("tf_embedding") for m in sys.modules)
    """)
    printed = fresh_process_output(script).strip().splitlines()[-1]
    np.testing.assert_allclose(np.array(eval(printed), F),  # pylint: disable=eval-used
                               expected.ravel(),
                               rtol=1e-6, atol=1e-6)
