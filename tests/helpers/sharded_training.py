"""The sharded TPUEmbedding tests' training loop and its numpy reference, shared by the training,
traffic and parameter-server tests (and tests/cluster/ps_chief.py).

The numpy reference is docs/semantics.md: lookups combine `gain * table[id]` per output row in
TPU output shapes, and each step applies the optimizer (the transcription in references.py) once
per touched row to the gradients summed over every replica's batch.
"""

import numpy as np
import tensorflow as tf

import tf_embedding

from helpers.references import combined_gains, reference_step
from helpers.sharded import FEATURES, GLOBAL_BATCH, MAX_SEQUENCE_LENGTH, TABLES
from helpers.sharded import feature_config, initial_table, make_samples, make_strategy
from helpers.sharded import to_inputs, variable_values


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
