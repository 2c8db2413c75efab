"""tf_embedding.keras.TPUEmbedding in the Keras of this process (Keras 3, or tf_keras when the
suite runs with TF_USE_LEGACY_KERAS=1, as tools/run_tests.sh does a second time).

Lookups are checked against stock TF's TPUEmbeddingForServing, training against a numpy
transcription of the TPU optimizer rules (tests/helpers/references.py) driven by the same data, in a
custom loop, in model.fit and under a 2-replica MirroredStrategy.

(Its surface, misuse and export: test_keras_layer_surface.py; Keras saving:
test_keras_layer_saving.py.)
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

from helpers.graphs import custom_ops
from helpers.keras_layer import BATCH, OPTIMIZERS, NumpyModel, SumModel, expected_after_fit
from helpers.keras_layer import fit_dataset, inputs, make_feature_config, make_samples
from helpers.keras_loops import mirrored_training_step, two_cpu_mirrored_strategy

pytestmark = pytest.mark.integration


F = np.float32
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"


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
