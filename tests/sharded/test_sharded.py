"""TPUEmbedding (tf_embedding/sharded/): training against numpy and the TF training loop.

The numpy reference is docs/semantics.md: lookups combine `gain * table[id]` per output row in
TPU output shapes, and each step applies the optimizer (the transcription in references.py) once
per touched row to the gradients summed over every replica's batch.
Runs cover the default strategy and MirroredStrategy over 2 and 4 logical CPUs (conftest.py), so
tables are split into 1, 2 and 4 row blocks.

(Output shapes, misuse, inference batches and bad inputs: the other test_sharded_*.py.)
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

from helpers.sharded import FEATURES, STRATEGIES, TABLES
from helpers.sharded import feature_config, feature_kind, initial_table, make_samples
from helpers.sharded import make_strategy, to_inputs, variable_values
from helpers.sharded_training import OPTIMIZERS, Reference, all_weights, assert_close, distribute
from helpers.sharded_training import local, make_dataset, make_targets, make_training_step
from helpers.sharded_training import split_replicas, squared_loss_step
from helpers.sharded_training import train_and_check

pytestmark = pytest.mark.integration


# Every optimizer under every strategy; the input kind alternates so that both sparse and ragged
# inputs meet every optimizer and every strategy.
TRAINING_CASES = [(optimizer, strategy, ("ragged", "sparse")[(i + j) % 2])
                  for i, optimizer in enumerate(OPTIMIZERS)
                  for j, strategy in enumerate(STRATEGIES)]


@pytest.mark.parametrize("optimizer, strategy, kind", TRAINING_CASES)
def test_training_matches_numpy(optimizer, strategy, kind):
    train_and_check(strategy, kind, OPTIMIZERS[optimizer])


@pytest.mark.parametrize("strategy", ["default", "mirrored2"])
def test_training_with_input_kinds_mixed_in_one_enqueue_matches_numpy(strategy):
    # Dense, sparse and ragged features in one call (tables shared by sparse and ragged
    # features among them), as TF 2.21's enqueue accepts; the numpy reference is the one every
    # single-kind run matches.
    assert {feature_kind(name, "mixed") for name in ("favorited", "watched")} == {
        "sparse", "ragged"}
    train_and_check(strategy, "mixed", OPTIMIZERS["adagrad"])


@pytest.mark.slow
def test_tables_are_the_same_with_one_two_and_four_blocks():
    tables = {}
    for strategy in STRATEGIES:
        emb = train_and_check(strategy, "ragged", OPTIMIZERS["adagrad"], seed=3)
        tables[strategy] = variable_values(emb)
        blocks = [len(list(v)) for v in emb.embedding_tables.values()]
        assert blocks == [min(STRATEGIES[strategy], TABLES[t].vocabulary_size)
                          for t in ("user", "video", "tiny", "query")]
    for strategy in ("mirrored2", "mirrored4"):
        for table in TABLES:
            for slot, value in tables[strategy][table].items():
                assert_close(value, tables["default"][table][slot], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_div_and_mod_give_the_same_trained_values():
    # Both match numpy and, as each touched row gets the same summed gradient in the same order
    # whichever block holds it, the same bits.
    values = {}
    for partition_strategy in ("div", "mod"):
        emb = train_and_check("mirrored4", "ragged", OPTIMIZERS["adagrad"], num_steps=4,
                              seed=5, partition_strategy=partition_strategy)
        values[partition_strategy] = variable_values(emb)
        video = next(table for config, table in emb.embedding_tables.items()
                     if config.name == "video")
        rows = np.arange(TABLES["video"].vocabulary_size)
        # Which rows block 1 holds: 4..6 contiguously (13 = 4 + 3 + 3 + 3), or 1, 5, 9 strided.
        expected_rows = rows[4:7] if partition_strategy == "div" else rows[1::4]
        np.testing.assert_array_equal(list(video)[1].numpy(),
                                      values[partition_strategy]["video"]["parameters"][
                                          expected_rows])
    for table in TABLES:
        for slot, value in values["mod"][table].items():
            np.testing.assert_array_equal(value, values["div"][table][slot],
                                          err_msg=f"{table}/{slot}")


def test_mod_with_partial_traffic_matches_numpy():
    # Each block combines its own lookups: the lookups are grouped by block r % n.
    train_and_check("mirrored2", "sparse", OPTIMIZERS["ftrl"], num_steps=2,
                    partition_strategy="mod", traffic={table: "partial" for table in TABLES})


def test_an_unknown_partition_strategy_is_rejected():
    with pytest.raises(ValueError, match="Invalid partition_strategy 'hash': must be 'div'"):
        tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1),
                                  partition_strategy="hash")


def test_the_engine_is_not_callable_as_tfs_is_not():
    emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1))
    with pytest.raises(TypeError, match="'TPUEmbedding' object is not callable: it looks "
                                        r"features up with enqueue\(\) and dequeue\(\)"):
        emb({})


def test_pipelined_training_in_the_docstring_loop_matches_numpy():
    # Within one tf.function, the next enqueue's lookups run after the previous update.
    train_and_check("mirrored2", "ragged", OPTIMIZERS["adagrad"], pipelined=True)


def test_pipelined_lookups_ahead_of_an_update_are_one_step_stale():
    optimizer = tf_embedding.SGD(0.5)
    emb = tf_embedding.TPUEmbedding(feature_config(), optimizer,
                                    pipeline_execution_with_tensor_core=True)
    step = make_samples(1, seed=5)[0]
    features, weights = to_inputs(step, "ragged")
    before = Reference(optimizer, {}).lookup(step)
    emb.enqueue(features, weights)
    emb.enqueue(features, weights)  # looked up now, before the first batch's update
    first = emb.dequeue()
    emb.apply_gradients(tf.nest.map_structure(tf.ones_like, first))
    second = emb.dequeue()
    emb.apply_gradients(tf.nest.map_structure(tf.ones_like, second))
    for name in FEATURES:
        assert_close(first[name].numpy(), before[name])
        assert_close(second[name].numpy(), before[name])
    assert not np.allclose(variable_values(emb)["video"]["parameters"], initial_table("video"))


def test_stock_docstring_training_and_evaluation_loops_run_unchanged():
    """`training_step` and `evaluation_step` of TF's TPUEmbedding docstring, verbatim but for
    the module (tf_embedding instead of tf.tpu.experimental.embedding), the strategy, and the
    lines marked "Insert ..." there."""
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        embedding = tf_embedding.TPUEmbedding(
            feature_config=feature_config(),
            optimizer=tf_embedding.SGD(0.1))
    num_steps = 2
    steps, targets = make_samples(2 * num_steps, seed=7), make_targets(2 * num_steps, seed=8)
    dataset = make_dataset(steps, targets, "sparse").map(
        lambda features, weights, targets: (features, targets))
    dataset_iterator = distribute(strategy, dataset)

    def model(activations):
        return activations

    @tf.function
    def training_step(dataset_iterator, num_steps):
        def tpu_step(tpu_features):
            with tf.GradientTape() as tape:
                activations = embedding.dequeue()
                tape.watch(activations)
                model_output = model(activations)
                loss = tf.add_n([0.5 * tf.reduce_sum(tf.square(model_output[k] - tpu_features[k]))
                                 for k in sorted(model_output)])

            embedding_gradients = tape.gradient(loss, activations)
            embedding.apply_gradients(embedding_gradients)
            # Insert your model gradient and optimizer application here

        for _ in tf.range(num_steps):
            embedding_features, tpu_features = next(dataset_iterator)
            embedding.enqueue(embedding_features, training=True)
            strategy.run(tpu_step, args=(tpu_features, ))

    @tf.function
    def evaluation_step(dataset_iterator, num_steps):
        def tpu_step(tpu_features):
            activations = embedding.dequeue()
            model_output = model(activations)
            # Insert your evaluation code here.

        for _ in tf.range(num_steps):
            embedding_features, tpu_features = next(dataset_iterator)
            embedding.enqueue(embedding_features, training=False)
            strategy.run(tpu_step, args=(tpu_features, ))

    training_step(dataset_iterator, tf.constant(num_steps))
    # TF writes the global optimizer into the TableConfigs, the keys of embedding_tables.
    optimizer = next(iter(embedding.embedding_tables)).optimizer
    reference = Reference(optimizer, {name: [] for name in TABLES})
    unweighted = [{name: [[(i, 1.0) for i, _ in s] for s in samples]
                   for name, samples in step.items()} for step in steps]
    for step, step_targets in zip(unweighted[:num_steps], targets):
        reference.step(split_replicas(step, 2), split_replicas(step_targets, 2), 0.1)
    values = variable_values(embedding)
    for table in TABLES:
        assert_close(values[table]["parameters"], reference.tables[table], rtol=1e-4, atol=1e-5)

    evaluation_step(dataset_iterator, tf.constant(num_steps))
    # Evaluation updates nothing.
    for table in TABLES:
        assert_close(variable_values(embedding)[table]["parameters"],
                     values[table]["parameters"])


def test_enqueue_and_dequeue_in_different_functions():
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        optimizer = tf_embedding.SGD(0.2)
        emb = tf_embedding.TPUEmbedding(feature_config(), optimizer)
    reference = Reference(optimizer, {name: [] for name in TABLES})
    steps, targets = make_samples(2, seed=11), make_targets(2, seed=12)
    iterator = distribute(strategy, make_dataset(steps, targets, "ragged"))
    step = squared_loss_step(emb)

    @tf.function
    def enqueue(features, weights):
        emb.enqueue(features, weights=all_weights(weights))

    @tf.function
    def run(targets):
        return strategy.run(step, args=(targets,))

    for samples, step_targets in zip(steps, targets):
        features, weights, targets_per_replica = next(iterator)
        enqueue(features, weights)
        actual = local(strategy, run(targets_per_replica))
        expected = reference.step(split_replicas(samples, 2), split_replicas(step_targets, 2), 0.2)
        for replica_actual, replica_expected in zip(actual, expected):
            for name in FEATURES:
                assert_close(replica_actual[name], replica_expected[name], err_msg=name)


# ---------------------------------------------------------------------------------------------
# Against TPUEmbeddingV0 trained by a Keras optimizer, where the math is the same.


def v0_training(strategy, emb, keras_optimizer):
    """One step of TPUEmbeddingV0 + Keras on the same squared loss (CPU output shapes)."""

    def step(features, weights, targets):
        tables = list(emb.embedding_tables.values())
        with tf.GradientTape() as tape:
            activations = emb(features, all_weights(weights))
            loss = tf.add_n([0.5 * tf.reduce_sum(tf.square(
                tf.reshape(activations[name], tf.shape(targets[name])) - targets[name]))
                for name in sorted(activations)])
        keras_optimizer.apply_gradients(zip(tape.gradient(loss, tables), tables))

    @tf.function
    def training_step(iterator):
        strategy.run(step, args=next(iterator))

    return training_step


@pytest.mark.parametrize("keras_optimizer", [
    lambda: tf.keras.optimizers.SGD(0.1),
    lambda: tf.keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.2, epsilon=0.01),
], ids=["sgd", "adagrad"])
def test_same_tables_as_tpu_embedding_v0_with_keras_optimizer(keras_optimizer):
    """The Keras optimizer is translated for TPUEmbedding (Adagrad's epsilon folded into the
    initial accumulator) and applied by Keras to TPUEmbeddingV0's IndexedSlices gradients."""
    strategy = make_strategy("default")
    steps, targets = make_samples(3, seed=21), make_targets(3, seed=22)
    dataset = make_dataset(steps, targets, "ragged")
    with strategy.scope():
        sharded = tf_embedding.TPUEmbedding(feature_config(), keras_optimizer())
        replicated_optimizer = keras_optimizer()
        replicated = tf_embedding.TPUEmbeddingV0(feature_config(), replicated_optimizer)
        replicated.build()
    sharded_step = make_training_step(strategy, sharded)
    replicated_step = v0_training(strategy, replicated, replicated_optimizer)
    sharded_iterator, replicated_iterator = (distribute(strategy, dataset) for _ in range(2))
    for _ in steps:
        sharded_step(sharded_iterator)
        replicated_step(replicated_iterator)
    for config, table in replicated.embedding_tables.items():
        expected = strategy.experimental_local_results(table)[0].numpy()
        actual = tf.convert_to_tensor(sharded.embedding_tables[
            next(c for c in sharded.embedding_tables if c.name == config.name)]).numpy()
        assert_close(actual, expected, rtol=1e-5, atol=1e-6, err_msg=config.name)


# ---------------------------------------------------------------------------------------------
# Lookups: shapes, quantization, placement.


def test_quantization_is_applied_to_rows_before_combining():
    table = tf_embedding.TableConfig(
        vocabulary_size=8, dim=2, combiner="mean", name="t",
        initializer=lambda shape, dtype=None: tf.reshape(tf.range(16, dtype=tf.float32),
                                                         shape) / 10.0,
        quantization_config=tf_embedding.QuantizationConfig(num_buckets=4, lower=0.0, upper=0.9))
    emb = tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table)}, tf_embedding.SGD(1.0))
    emb.enqueue({"f": tf.ragged.constant([[1, 6], [7]], dtype=tf.int64)})
    activations = emb.dequeue()["f"]
    # Rows 1 = (0.2, 0.3) -> (0.3, 0.3); 6 = (1.2, 1.3) -> (0.9, 0.9); 7 -> (0.9, 0.9).
    np.testing.assert_allclose(activations, [[0.6, 0.6], [0.9, 0.9]], rtol=1e-6)
    # The gradient reaches the rows unquantized (straight through), averaged by the combiner.
    emb.apply_gradients({"f": tf.ones([2, 2])})
    np.testing.assert_allclose(emb.embedding_tables[table][1].numpy(), [0.2 - 0.5, 0.3 - 0.5],
                               rtol=1e-6)
