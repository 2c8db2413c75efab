"""TPUEmbedding (tf_embedding/sharded/): training against numpy, the TF training loop, and misuse.

The numpy reference is docs/semantics.md: lookups combine `gain * table[id]` per output row in
TPU output shapes, and each step applies the optimizer (the transcription in references.py) once
per touched row to the gradients summed over every replica's batch.
Runs cover the default strategy and MirroredStrategy over 2 and 4 logical CPUs (conftest.py), so
tables are split into 1, 2 and 4 row blocks.
"""

import logging
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import sharded_variable

import tf_embedding

from graph_helpers import custom_op_counts, custom_ops
from references import combined_gains, reference_step
from sharded_helpers import FEATURES, GLOBAL_BATCH, MAX_SEQUENCE_LENGTH, STRATEGIES, TABLES
from sharded_helpers import feature_config, feature_kind, initial_table, make_samples
from sharded_helpers import make_strategy, to_inputs, variable_values

F = np.float32
def output_shape(name: str, batch: int) -> tuple[int, ...]:
    feature = FEATURES[name]
    dim = TABLES[feature.table].dim
    return (batch, MAX_SEQUENCE_LENGTH, dim) if feature.kind == "sequence" else (batch, dim)


def make_targets(num_steps: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{name: rng.uniform(-1, 1, output_shape(name, GLOBAL_BATCH)).astype(F)
             for name in FEATURES} for _ in range(num_steps)]


# ---------------------------------------------------------------------------------------------
# numpy reference.


def reference_rows(name: str, samples: list) -> list[list[tuple[int, float]]]:
    """Output rows of one feature as [(id, gain), ...], in TPU output order."""
    feature = FEATURES[name]
    if feature.kind == "sequence":
        return [[(sample[p][0], 1.0)] if p < len(sample) else []
                for sample in samples for p in range(MAX_SEQUENCE_LENGTH)]
    combiner = TABLES[feature.table].combiner
    return [list(zip((i for i, _ in sample), combined_gains([w for _, w in sample], combiner)))
            for sample in samples]


class Reference:
    """Tables and slots in numpy, trained step by step as docs/semantics.md says."""

    def __init__(self, optimizer, slot_values: dict[str, list[np.ndarray]]):
        self.optimizer = optimizer
        self.tables = {name: initial_table(name) for name in TABLES}
        self.slots = slot_values

    def lookup(self, samples: dict[str, list]) -> dict[str, np.ndarray]:
        activations = {}
        for name, feature_samples in samples.items():
            table = self.tables[FEATURES[name].table]
            rows = np.array([sum((F(g) * table[i] for i, g in row), np.zeros(table.shape[1], F))
                             for row in reference_rows(name, feature_samples)], F)
            activations[name] = rows.reshape(output_shape(name, len(feature_samples)))
        return activations

    def step(self, replica_samples: list[dict], replica_targets: list[dict], lr: float
             ) -> list[dict[str, np.ndarray]]:
        """Looks up every replica's batch, then applies loss 0.5 * |activations - targets|^2."""
        activations = [self.lookup(samples) for samples in replica_samples]
        for table in TABLES:
            batches = []
            for samples, targets, acts in zip(replica_samples, replica_targets, activations):
                names = [n for n in sorted(FEATURES) if FEATURES[n].table == table]
                rows = [row for n in names for row in reference_rows(n, samples[n])]
                dim = TABLES[table].dim
                grads = np.concatenate([(acts[n] - targets[n]).reshape(-1, dim) for n in names])
                row_splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
                ids = np.array([i for r in rows for i, _ in r], np.int64)
                gains = np.array([g for r in rows for _, g in r], F)
                batches.append((row_splits, ids, gains, grads.astype(F)))
            reference_step(self.optimizer, self.tables[table], self.slots[table], batches, lr)
        return activations


def split_replicas(step: dict, replicas: int) -> list[dict]:
    size = GLOBAL_BATCH // replicas
    return [{name: samples[r * size:(r + 1) * size] for name, samples in step.items()}
            for r in range(replicas)]


def assert_close(actual, expected, rtol=2e-5, atol=2e-6, err_msg=""):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=err_msg)


# ---------------------------------------------------------------------------------------------
# The training loop of TF's TPUEmbedding docstring, with a squared loss.


def make_dataset(steps: list, targets: list, kind: str) -> tf.data.Dataset:
    """One global batch per step: (features, weights of weighted features, targets)."""
    all_samples = {name: [s for step in steps for s in step[name]] for name in FEATURES}
    features, weights = to_inputs(all_samples, kind, 0, GLOBAL_BATCH * len(steps))
    weights = {name: w for name, w in weights.items() if w is not None}
    all_targets = {name: np.concatenate([t[name] for t in targets]) for name in FEATURES}
    return tf.data.Dataset.from_tensor_slices((features, weights, all_targets)).batch(
        GLOBAL_BATCH, drop_remainder=True)


def distribute(strategy, dataset):
    return iter(strategy.experimental_distribute_dataset(
        dataset, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)))


def squared_loss_step(emb):
    def step(targets):
        with tf.GradientTape() as tape:
            activations = emb.dequeue()
            tape.watch(activations)
            loss = tf.add_n([0.5 * tf.reduce_sum(tf.square(activations[name] - targets[name]))
                             for name in sorted(activations)])
        emb.apply_gradients(tape.gradient(loss, activations))
        return activations

    return step


def all_weights(weights: dict) -> dict:
    return {name: weights.get(name) for name in FEATURES}


def make_training_step(strategy, emb, counter: tf.Variable | None = None):
    step = squared_loss_step(emb)

    @tf.function
    def training_step(iterator):
        features, weights, targets = next(iterator)
        emb.enqueue(features, weights=all_weights(weights), training=True)
        activations = strategy.run(step, args=(targets,))
        if counter is not None:
            counter.assign_add(1.0)
        return activations

    return training_step


def local(strategy, structure) -> list[dict[str, np.ndarray]]:
    """Per-replica numpy values of a structure of per-replica tensors."""
    per_replica = {name: strategy.experimental_local_results(value)
                   for name, value in structure.items()}
    return [{name: values[r].numpy() for name, values in per_replica.items()}
            for r in range(strategy.num_replicas_in_sync)]


def train_and_check(strategy_name: str, kind: str, optimizer_factory, num_steps: int = 3,
                    seed: int = 0, pipelined: bool = False, **options):
    """Trains with the docstring's loop and checks activations and variables against numpy.

    The optimizer's learning rate is a callable of a step counter, so every apply_gradients
    must evaluate it anew. `options` go to TPUEmbedding (table_devices, traffic).
    """
    strategy = make_strategy(strategy_name)
    counter = tf.Variable(0.0)
    optimizer = optimizer_factory(lambda: 0.1 / (1.0 + counter))
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(feature_config(), optimizer,
                                        pipeline_execution_with_tensor_core=pipelined, **options)
    emb.build()
    slots = {name: [variables[slot] for slot in optimizer.slot_names()]
             for name, variables in variable_values(emb).items()}
    reference = Reference(optimizer, slots)
    steps, targets = make_samples(num_steps, seed), make_targets(num_steps, seed + 1)
    iterator = distribute(strategy, make_dataset(steps, targets, kind))
    training_step = make_training_step(strategy, emb, counter)
    replicas = strategy.num_replicas_in_sync
    for step, step_targets in zip(steps, targets):
        lr = 0.1 / (1.0 + counter.numpy())
        actual = local(strategy, training_step(iterator))
        expected = reference.step(split_replicas(step, replicas),
                                  split_replicas(step_targets, replicas), lr)
        for replica_actual, replica_expected in zip(actual, expected):
            for name in FEATURES:
                assert_close(replica_actual[name], replica_expected[name], err_msg=name)
    values = variable_values(emb)
    for table in TABLES:
        assert_close(values[table]["parameters"], reference.tables[table], rtol=1e-4,
                     atol=1e-5, err_msg=table)
        for slot, expected in zip(optimizer.slot_names(), reference.slots[table]):
            assert_close(values[table][slot], expected, rtol=1e-4, atol=1e-5,
                         err_msg=f"{table}/{slot}")
    return emb


OPTIMIZERS = {
    "sgd": lambda lr: tf_embedding.SGD(lr, clipvalue=0.5),
    "adagrad": lambda lr: tf_embedding.Adagrad(
        lr, initial_accumulator_value=0.2, weight_decay_factor=0.01,
        multiply_weight_decay_factor_by_learning_rate=True),
    "adagrad_momentum": lambda lr: tf_embedding.AdagradMomentum(
        lr, momentum=0.9, use_nesterov=True, beta2=0.99),
    "adam": lambda lr: tf_embedding.Adam(lr),
    "ftrl": lambda lr: tf_embedding.FTRL(lr, l1_regularization_strength=0.01,
                                         l2_regularization_strength=0.02, beta=0.1),
}

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
    emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.5),
                                    pipeline_execution_with_tensor_core=True)
    step = make_samples(1, seed=5)[0]
    features, weights = to_inputs(step, "ragged")
    before = Reference(emb._table_config[0].optimizer, {}).lookup(step)
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
    reference = Reference(embedding._table_config[0].optimizer, {name: [] for name in TABLES})
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
        emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.2))
    reference = Reference(emb._table_config[0].optimizer, {name: [] for name in TABLES})
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


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_output_shapes_follow_tpu_rules(kind):
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=3, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    config = {
        "dense_2d": tf_embedding.FeatureConfig(table),
        "dense_3d": tf_embedding.FeatureConfig(table),
        "pooled": tf_embedding.FeatureConfig(table),
        "sequence": tf_embedding.FeatureConfig(table, max_sequence_length=2),
        "reshaped": tf_embedding.FeatureConfig(table, output_shape=[2, 2]),
    }
    samples = [[1, 2], [3], [], [4, 5, 6]]
    make = lambda rows: (tf.ragged.constant(rows, dtype=tf.int64) if kind == "ragged"
                         else tf.ragged.constant(rows, dtype=tf.int64).to_sparse())
    emb = tf_embedding.TPUEmbedding(config, tf_embedding.SGD(0.1))
    emb.enqueue({
        "dense_2d": tf.constant([[1], [2], [3], [4]], tf.int64),
        "dense_3d": tf.constant([[[1], [2]], [[3], [4]], [[5], [6]], [[7], [8]]], tf.int64),
        "pooled": make(samples),
        "sequence": make(samples),
        "reshaped": make(samples),
    })
    out = emb.dequeue()
    row = lambda ids: [float(sum(i + 1 for i in ids))] * 3
    np.testing.assert_array_equal(out["dense_2d"], [row([i]) for i in [1, 2, 3, 4]])
    assert out["dense_3d"].shape == (4, 2, 3)
    np.testing.assert_array_equal(out["pooled"], [row(s) for s in samples])
    np.testing.assert_array_equal(out["sequence"], [[row(s[:1]) if s else row([]),
                                                     row(s[1:2]) if len(s) > 1 else row([])]
                                                    for s in samples])
    np.testing.assert_array_equal(out["reshaped"], np.reshape([row(s) for s in samples], [2, 2, 3]))


def test_ragged_output_shape_larger_than_the_batch_is_a_sequence():
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=1, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    emb = tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table, output_shape=[2, 3])},
                                    tf_embedding.SGD(0.1))
    emb.enqueue({"f": tf.ragged.constant([[1, 2, 3, 4], [5]], dtype=tf.int64)})
    np.testing.assert_array_equal(emb.dequeue()["f"][..., 0], [[2, 3, 4], [6, 0, 0]])


@pytest.mark.parametrize("kind", ["ragged", "sparse"])
@pytest.mark.parametrize("given_to", ["FeatureConfig", "build"])
def test_a_sequence_output_shape_from_the_config_or_build_makes_a_sequence(kind, given_to):
    """TF takes a feature's output shape from FeatureConfig, build() or the first enqueue alike:
    [batch, seq] for a rank 2 input without max_sequence_length is a sequence either way (and
    from build(), also for a smaller final batch dequeued with partial=True)."""
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=1, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    feature = tf_embedding.FeatureConfig(
        table, output_shape=[2, 4] if given_to == "FeatureConfig" else None)
    emb = tf_embedding.TPUEmbedding({"f": feature}, tf_embedding.SGD(0.1))
    if given_to == "build":
        emb.build(per_replica_input_shapes={"f": tf.TensorShape([2, 4, 1])})

    def ids(rows):
        ragged = tf.ragged.constant(rows, dtype=tf.int64)
        return ragged if kind == "ragged" else ragged.to_sparse()

    emb.enqueue({"f": ids([[1, 2, 3, 4, 5], [6]])}, training=False)
    np.testing.assert_array_equal(emb.dequeue()["f"][..., 0], [[2, 3, 4, 5], [7, 0, 0, 0]])
    if given_to == "FeatureConfig":
        return  # There TF's rule is prod(output_shape) / batch positions per sample.
    emb.enqueue({"f": ids([[7, 8]])}, training=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="partial=True"):
        emb.dequeue()
    emb.enqueue({"f": ids([[7, 8]])}, training=False)
    np.testing.assert_array_equal(emb.dequeue(partial=True)["f"][..., 0], [[8, 9, 0, 0]])
    # A batch larger than built fits no shape, partial or not.
    emb.enqueue({"f": ids([[1], [2], [3]])}, training=False)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table t: the dequeued batch's rows per feature \['f'\] "
                             r"do not fill their output shapes \[\[2, 4\]\]\. The output shapes "
                             "come from FeatureConfig.output_shape, build"):
        emb.dequeue(partial=True)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("features", [["f"], ["f", "g"]])
def test_a_batch_that_does_not_fill_the_output_shapes_fails_in_a_function(features, jit_compile):
    """In a tf.function (one table of one feature and one of two), compiled or not, the rows
    check names the table and features and shows the rows: run time when uncompiled, compile
    time under XLA, where the rows are known."""
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=2, combiner="sum", name="t")
    emb = tf_embedding.TPUEmbedding({f: tf_embedding.FeatureConfig(table) for f in features},
                                    tf_embedding.SGD(0.1))
    emb.build(per_replica_batch_size=2)

    # Batches of any size: the rows are known only when the function runs.
    @tf.function(input_signature=[{f: tf.SparseTensorSpec([None, None], tf.int64)
                                   for f in features}], jit_compile=jit_compile)
    def forward(batch):
        emb.enqueue(batch, training=False)
        return emb.dequeue()

    def batch(rows):
        return {f: tf.sparse.from_dense(tf.constant([[1]] * rows, tf.int64)) for f in features}

    outputs = forward(batch(2))
    assert [out.shape for out in outputs.values()] == [(2, 2)] * len(features)
    np.testing.assert_array_equal(np.stack(list(outputs.values())),
                                  np.stack([emb.embedding_tables[table][1]] * 2 * len(features))
                                  .reshape(len(features), 2, 2))
    if not jit_compile:
        # The check, the split and the shapes are one op per table: the dequeue has no
        # assertion, tf.cond (a function call per table and step), split or reshape.
        op_types = {op.type for op in forward.get_concrete_function().graph.get_operations()
                    if op.name.startswith("dequeue/")}
        assert "TfeFeatureOutputs" in op_types
        assert not op_types & {"Assert", "If", "StatelessIf", "SplitV", "Reshape"}
    shapes = ", ".join(["[2]"] * len(features))
    rows = ", ".join(["3"] * len(features))
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
            f"Table t: the dequeued batch's rows per feature {features} do not fill their "
            f"output shapes [{shapes}]; a smaller final batch dequeues with partial=True. The "
            "output shapes come from FeatureConfig.output_shape, build() or the first enqueue, "
            f"and must fit every batch. Rows per feature: [{rows}].")):
        forward(batch(3))


def test_build_with_input_shapes_and_partial_final_batch():
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=2, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    emb = tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table)}, tf_embedding.SGD(1.0))
    emb.build(per_replica_input_shapes={"f": tf.TensorShape([4, None])})
    spec = tf.RaggedTensorSpec([None, None], tf.int64)

    @tf.function(input_signature=[spec])
    def enqueue(ids):
        emb.enqueue({"f": ids})

    @tf.function
    def full():
        activations = emb.dequeue()
        emb.apply_gradients(activations)
        return activations["f"]

    @tf.function
    def partial():
        activations = emb.dequeue(partial=True)
        emb.apply_gradients(activations)
        return activations["f"]

    enqueue(tf.ragged.constant([[1], [2], [3], [4]], dtype=tf.int64))
    assert full().shape == (4, 2)
    enqueue(tf.ragged.constant([[5], [6]], dtype=tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="a smaller final batch dequeues with partial=True"):
        full()
    enqueue(tf.ragged.constant([[5], [6]], dtype=tf.int64))
    assert partial().shape == (2, 2)
    assert partial.get_concrete_function().structured_outputs.shape.as_list() == [None, 2]


def test_tables_are_sharded_on_the_replica_devices_and_not_trainable():
    strategy = make_strategy("mirrored4")
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1))
    tables = {config.name: variable for config, variable in emb.embedding_tables.items()}
    video = tables["video"]
    assert isinstance(video, sharded_variable.ShardedVariable)
    assert [block.shape.as_list() for block in video] == [[4, 4], [3, 4], [3, 4], [3, 4]]
    assert [block.device[-5:] for block in video] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    assert [block.name for block in video] == [f"video_{i}:0" for i in range(4)]
    # Fewer rows than devices: only non-empty blocks exist, as on a TPU.
    assert [block.shape.as_list() for block in tables["tiny"]] == [[1, 2]] * 3
    accumulators = emb._variables["video"]["accumulators"]
    assert [block.name for block in accumulators] == [
        f"video/accumulators_{i}:0" for i in range(4)]
    assert not any(block.trainable for slots in emb._variables.values()
                   for variable in slots.values() for block in variable)
    assert all(not isinstance(block, tf.distribute.DistributedValues)
               for block in video)
    np.testing.assert_array_equal(tf.convert_to_tensor(video), initial_table("video"))


# ---------------------------------------------------------------------------------------------
# Misuse: every error, eagerly and inside tf.function; none of them blocks.


def small_embedding(optimizer=None, pipelined=False):
    table = tf_embedding.TableConfig(vocabulary_size=6, dim=2, combiner="sum", name="t")
    config = {"a": tf_embedding.FeatureConfig(table),
              "b": tf_embedding.FeatureConfig(table, max_sequence_length=2)}
    return tf_embedding.TPUEmbedding(config, optimizer or tf_embedding.SGD(0.1),
                                     pipeline_execution_with_tensor_core=pipelined)


def small_features(kind="ragged"):
    rows = tf.ragged.constant([[0, 1], [5]], dtype=tf.int64)
    return {"a": rows if kind == "ragged" else rows.to_sparse(),
            "b": rows if kind == "ragged" else rows.to_sparse()}


def gradients_like(activations):
    return tf.nest.map_structure(tf.ones_like, activations)


def dequeue_and_apply(emb):
    emb.apply_gradients(gradients_like(emb.dequeue()))


MISUSE = {
    "dequeue_first": (lambda emb: emb.dequeue(),
                      r"dequeue\(\) called on replica 0 with no enqueued batch"),
    "enqueue_twice": (lambda emb: (emb.enqueue(small_features()), emb.enqueue(small_features())),
                      r"enqueue\(\) called while replica 0 already holds 1 enqueued batch"),
    "apply_without_dequeue": (
        lambda emb: (emb.enqueue(small_features()), dequeue_and_apply(emb),
                     emb.apply_gradients({"a": tf.ones([2, 2]), "b": tf.ones([2, 2, 2])})),
        r"apply_gradients\(\) called on replica 0 without activations to update"),
    "apply_after_inference_batch": (
        lambda emb: (emb.enqueue(small_features(), training=False),
                     emb.apply_gradients(gradients_like(emb.dequeue()))),
        r"the last dequeued batch was enqueued with training=False"),
    "dequeue_before_apply": (
        lambda emb: (emb.enqueue(small_features()), emb.dequeue(),
                     emb.enqueue(small_features()), emb.dequeue()),
        r"previous training batch still awaits apply_gradients\(\)"),
}


@pytest.mark.parametrize("case", MISUSE)
def test_misuse_raises_runtime_error_eagerly(case):
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)
    calls, message = MISUSE[case]
    with pytest.raises(RuntimeError, match=message):
        calls(emb)


@pytest.mark.parametrize("case", MISUSE)
def test_misuse_fails_the_step_inside_tf_function(case):
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)
    calls, message = MISUSE[case]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.function(calls)(emb)


def test_inference_batches_need_no_apply_gradients():
    emb = small_embedding()
    for _ in range(2):
        emb.enqueue(small_features(), training=False)
        emb.dequeue()
    emb.enqueue(small_features())
    dequeue_and_apply(emb)


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
@pytest.mark.parametrize("in_function", [False, True])
def test_raw_inference_batches_are_looked_up_unconverted_with_the_same_bits(in_function, kind):
    """A forward-only batch of rank-2 SparseTensors, or of RaggedTensors, waits unconverted and
    is converted and looked up in one op (TfeFeaturesLookup; for the sequence feature "b" by its
    conversion path): the same activations as a training batch's. A batch mixing the two, or a
    training one, is converted at enqueue time."""
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)

    def forward(features, training):
        emb.enqueue(features, training=training)
        return emb.dequeue()

    step = tf.function(forward) if in_function else forward
    inference = step(small_features(kind), False)
    training = step(small_features(kind), True)
    emb.apply_gradients(gradients_like(training))
    expected = {"a": [[1.0, 1.0], [1.0, 1.0]], "b": [[[1.0, 1.0], [1.0, 1.0]],
                                                       [[1.0, 1.0], [0.0, 0.0]]]}
    for key in expected:
        np.testing.assert_array_equal(inference[key].numpy(), training[key].numpy())
    if in_function:
        mixed = {"a": small_features("sparse")["a"], "b": small_features("ragged")["b"]}
        assert "TfeFeaturesLookup" in custom_ops(step, small_features(kind), False)
        assert "TfeFeaturesToCsr" not in custom_ops(step, small_features(kind), False)
        assert "TfeFeaturesToCsr" in custom_ops(step, mixed, False)
        assert "TfeFeaturesToCsr" in custom_ops(step, small_features(kind), True)
        # A dequeue traced after its enqueue in the same function takes that batch's queue
        # directly: no tf.cond with the raw batches' lookups in the training step.
        assert "TfeFeaturesLookup" not in custom_ops(step, small_features(kind), True)


def test_an_inference_batch_of_several_tables_is_looked_up_in_one_op():
    """Every table's features of a raw inference batch in one TfeFeaturesLookup, whose threads
    share all the tables' rows; each table's activations as the training path gives them."""
    configs = [tf_embedding.TableConfig(vocabulary_size=50 + t, dim=3 + t, combiner=combiner,
                                        name=f"t{t}")
               for t, combiner in enumerate(["sum", "mean", "sqrtn"])]
    features = {f"f{t}": tf_embedding.FeatureConfig(table) for t, table in enumerate(configs)}
    emb = tf_embedding.TPUEmbedding(features, tf_embedding.SGD(0.1))
    emb.build(per_replica_batch_size=4)
    rng = np.random.default_rng(3)
    batch = {name: tf.ragged.constant([rng.integers(0, 50, size=n) for n in (3, 0, 1, 5)],
                                      dtype=tf.int64).to_sparse() for name in features}

    @tf.function
    def step(features, training):
        emb.enqueue(features, training=training)
        return emb.dequeue()

    assert custom_op_counts(step, batch, False)["TfeFeaturesLookup"] == 1
    inference, training = step(batch, False), step(batch, True)
    emb.apply_gradients(gradients_like(training))
    for name in features:
        np.testing.assert_array_equal(inference[name].numpy(), training[name].numpy())


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_a_bad_id_in_a_raw_inference_batch_fails_naming_table_and_feature(kind):
    """The direct lookup of a raw batch rejects an id out of range, and the step fails with the
    conversion's message."""
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)

    @tf.function
    def forward(features):
        emb.enqueue(features, training=False)
        return emb.dequeue()

    rows = tf.ragged.constant([[0, 6], [5]], dtype=tf.int64)
    feature = rows if kind == "ragged" else rows.to_sparse()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 't', feature 'a': id 6 at lookup 1 is out of range for "
                             r"vocabulary size 6"):
        forward({"a": feature, "b": feature})


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_raw_inference_batches_share_the_queue_capacity(kind):
    emb = small_embedding()
    emb.enqueue(small_features(kind), training=False)
    with pytest.raises(RuntimeError, match="already holds 1 enqueued batch"):
        emb.enqueue(small_features(kind))
    with pytest.raises(RuntimeError, match="already holds 1 enqueued batch"):
        emb.enqueue(small_features("sparse" if kind == "ragged" else "ragged"), training=False)
    emb.dequeue()
    emb.enqueue(small_features(kind))
    with pytest.raises(RuntimeError, match="already holds 1 enqueued batch"):
        emb.enqueue(small_features(kind), training=False)
    dequeue_and_apply(emb)
    emb.enqueue(small_features(kind), training=False)
    with pytest.raises(RuntimeError, match="enqueued with training=False"):
        emb.apply_gradients(gradients_like(emb.dequeue()))


def test_pipelining_allows_one_batch_ahead():
    emb = small_embedding(pipelined=True)
    emb.enqueue(small_features())
    emb.enqueue(small_features())
    with pytest.raises(RuntimeError, match="already holds 2 enqueued batch"):
        emb.enqueue(small_features())


@pytest.mark.parametrize("in_function", [False, True])
def test_misuse_under_mirrored_strategy_fails_without_hanging(in_function):
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()
    emb.build(per_replica_batch_size=2)

    def dequeue_on_every_replica():
        strategy.run(emb.dequeue)

    run = tf.function(dequeue_on_every_replica) if in_function else dequeue_on_every_replica
    error = tf.errors.InvalidArgumentError if in_function else RuntimeError
    with pytest.raises(error, match=r"dequeue\(\) called on replica \d with no enqueued batch"):
        run()
    emb.enqueue(small_features())
    run()
    emb.enqueue(small_features())
    with pytest.raises(error, match=r"dequeue\(\) of a training batch on replica \d while the "
                                    r"previous training batch still awaits apply_gradients"):
        run()


def test_dequeue_and_apply_gradients_need_a_replica_context():
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()
    emb.enqueue(small_features())
    with pytest.raises(RuntimeError, match=r"dequeue\(\) must be called in a replica context: "
                                           r"inside strategy.run\(\) of the MirroredStrategy"):
        emb.dequeue()
    with pytest.raises(RuntimeError, match=r"apply_gradients\(\) must be called in a replica"):
        emb.apply_gradients({"a": tf.ones([2, 2]), "b": tf.ones([2, 2, 2])})
    other = make_strategy("mirrored4")
    with pytest.raises(RuntimeError, match=r"dequeue\(\) called under another strategy "
                                           r"\(MirroredStrategy\) than the one this "
                                           r"TPUEmbedding was created under"):
        other.run(emb.dequeue)


def test_unbuilt_object_and_unsupported_strategy():
    emb = small_embedding()
    with pytest.raises(RuntimeError, match="dequeue called on unbuilt TPUEmbedding object"):
        emb.dequeue()
    with pytest.raises(RuntimeError, match="apply_gradients called on unbuilt TPUEmbedding"):
        emb.apply_gradients({"a": None, "b": None})
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        with pytest.raises(RuntimeError, match="default strategy, tf.distribute.MirroredStrategy "
                                               "or tf.distribute.ParameterServerStrategy, but "
                                               "was created under OneDeviceStrategy"):
            small_embedding()


def test_enqueue_to_one_replica_by_device():
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()
    emb.enqueue(small_features(), device=strategy.extended.worker_devices[1])
    with pytest.raises(RuntimeError, match="replica 0 with no enqueued batch"):
        strategy.run(emb.dequeue)
    with pytest.raises(ValueError, match="Device /cpu:3 passed to enqueue is not a replica "
                                         "device"):
        emb.enqueue(small_features(), device="/cpu:3")


def test_enqueue_inside_strategy_run_feeds_the_running_replica():
    strategy = make_strategy("mirrored2")
    with strategy.scope():
        emb = small_embedding()

    @tf.function
    def step():
        def replica_step():
            emb.enqueue(small_features())
            dequeue_and_apply(emb)
        strategy.run(replica_step)

    step()
    step()


BAD_FEATURES = [
    ({"a": tf.constant([[0], [1]], tf.int64)}, ValueError, "don't have the same nested"),
    ({"a": [[0], [1]], "b": small_features()["b"]}, ValueError, "don't have the same nested"),
    ({"a": tf.Variable([[0]]), "b": small_features()["b"]}, ValueError,
     "Input a is of unknown type .*Variable"),
    ({"a": tf.constant([[0, 1]], tf.int64), "b": small_features()["b"]}, ValueError,
     "Input a: Rank 2 or above dense tensor should have last dimension as 1"),
    ({"a": tf.constant(0, tf.int64), "b": small_features()["b"]}, ValueError,
     "Only rank 1 and above dense tensor is supported"),
    ({"a": tf.SparseTensor([[0]], tf.constant([1], tf.int64), [3]),
      "b": small_features("sparse")["b"]}, ValueError,
     "Only rank 2 and above sparse tensor is supported, find rank 1 sparse tensor for input a"),
    ({"a": tf.ragged.constant([[[0]]], dtype=tf.int64), "b": small_features()["b"]}, ValueError,
     "Only rank 2 ragged tensor is supported, find rank 3 ragged tensor for input a"),
    ({"a": tf.ragged.constant([[0], [1], [2]], dtype=tf.int64), "b": small_features()["b"]},
     ValueError, r"Inconsistent shape founded for input feature a, Output shape is set to be "
                 r"\(2,\), But got incoming output shape \(3,\)"),
]


@pytest.mark.parametrize("features, error, message", BAD_FEATURES)
def test_enqueue_rejects_features_not_matching_feature_config(features, error, message):
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)
    with pytest.raises(error, match=message):
        emb.enqueue(features)


BAD_WEIGHTS = [
    ({"a": tf.ones([2, 1])}, ValueError, "don't have the same nested"),
    ({"a": tf.ones([2, 1]), "b": None}, ValueError,
     "Weight specified for dense input a, which is not allowed"),
    ({"a": tf.ones([2]), "b": None}, ValueError,
     "Weight for a is type .*EagerTensor.* which does not match type input which is "
     "RaggedTensor."),
    ({"a": None, "b": tf.ragged.constant([[1.0, 1.0], [1.0]])}, ValueError,
     "Weight specified for b, but this is a sequence feature."),
]


@pytest.mark.parametrize("weights, error, message", BAD_WEIGHTS)
def test_enqueue_rejects_weights_not_matching_feature_config(weights, error, message):
    emb = small_embedding()
    features = small_features()
    if "Weight specified for dense" in message:
        features = {"a": tf.constant([[0], [1]], tf.int64), "b": features["b"]}
    with pytest.raises(error, match=message):
        emb.enqueue(features, weights)


def test_build_without_shapes_takes_them_from_the_first_enqueue():
    # TF on a TPU raises at build() here; see docs/api_differences.md for why this does not.
    emb = small_embedding()
    emb.build()
    with pytest.raises(ValueError, match="Input Feature a has output shape set as <unknown> "
                                         "which is not fully defined"):
        emb.dequeue()
    emb.enqueue(small_features())
    activations = emb.dequeue()
    assert activations["a"].shape == (2, 2)
    assert activations["b"].shape == (2, 2, 2)


def test_enqueue_needs_defined_output_shapes():
    emb = small_embedding()

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)])
    def enqueue(ids):
        emb.enqueue({"a": ids, "b": ids})

    with pytest.raises(ValueError, match=r"Input Feature a has output shape set as \(None,\) "
                                         "which is not fully defined"):
        enqueue(tf.ragged.constant([[1]], dtype=tf.int64))


BAD_GRADIENTS = [
    ({"a": tf.ones([2, 2])}, ValueError, "don't have the same nested"),
    ({"a": np.ones([2, 2], F), "b": tf.ones([2, 2, 2])}, ValueError,
     "found non-tensor type: <class 'numpy.ndarray'> at path a."),
    ({"a": tf.ones([2, 3]), "b": tf.ones([2, 2, 2])}, ValueError,
     r"Found gradient of shape \(2, 3\) at path a. Expected shape \[2, 2\]."),
    ({"a": tf.ones([3, 2]), "b": tf.ones([2, 2, 2])}, ValueError,
     r"Found gradient of shape \(3, 2\) at path a."),
]


@pytest.mark.parametrize("gradients, error, message", BAD_GRADIENTS)
def test_apply_gradients_rejects_gradients_not_matching_feature_config(gradients, error, message):
    emb = small_embedding()
    emb.enqueue(small_features())
    emb.dequeue()
    with pytest.raises(error, match=message):
        emb.apply_gradients(gradients)


def test_missing_gradient_is_zero_and_warned_once(caplog):
    emb = small_embedding(tf_embedding.Adam(0.1))
    before = tf.convert_to_tensor(emb.embedding_tables[emb._table_config[0]]).numpy()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            emb.enqueue(small_features())
            activations = emb.dequeue()
            emb.apply_gradients({"a": None, "b": tf.zeros_like(activations["b"])})
    warnings = [r.getMessage() for r in caplog.records if "No gradient passed" in r.getMessage()]
    assert warnings == ["No gradient passed for feature a, sending zero gradient. This may not "
                        "be correct behavior for certain optimizers like Adam."]
    # Zero gradients leave Adam's rows unchanged (the moments stay zero).
    np.testing.assert_array_equal(
        tf.convert_to_tensor(emb.embedding_tables[emb._table_config[0]]), before)


def test_apply_gradients_without_optimizer():
    table = tf_embedding.TableConfig(vocabulary_size=4, dim=2, name="t")
    emb = tf_embedding.TPUEmbedding({"a": tf_embedding.FeatureConfig(table)}, None)
    emb.build()
    assert list(emb._variables["t"]) == ["parameters"]
    emb.enqueue({"a": tf.constant([1, 2], tf.int64)})
    activations = emb.dequeue()
    with pytest.raises(ValueError, match="Table t has no optimizer"):
        emb.apply_gradients(activations)
