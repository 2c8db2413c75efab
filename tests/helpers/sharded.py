"""The sharded TPUEmbedding tests' fixture, shared by the training, checkpoint and XLA tests.

`feature_config` builds, with tf_embedding's or stock's configs, the features of FEATURES over
the tables of TABLES, with fixed initial tables (`initial_table`). `make_strategy` gives one of
STRATEGIES: the default strategy or MirroredStrategy over 2 or 4 logical CPUs (conftest.py), so
tables are split into 1, 2 and 4 row blocks. `variable_values` reads a TPUEmbedding's (or a stock
object's) tables and slots as whole arrays, whatever the block count. `make_samples` draws a batch
of GLOBAL_BATCH samples per step and `to_inputs` turns one into the features' tf inputs of a given
kind.
"""

import dataclasses

import numpy as np
import tensorflow as tf

import tf_embedding

from helpers.tables import table_variables


MAX_SEQUENCE_LENGTH = 3
GLOBAL_BATCH = 8
# Sparse inputs have this many columns; sequences longer than MAX_SEQUENCE_LENGTH are truncated.
MAX_IDS = 5


@dataclasses.dataclass(frozen=True)
class Table:
    vocabulary_size: int
    dim: int
    combiner: str


# Vocabularies not divisible by 2 or 4 give uneven blocks; "tiny" has fewer rows than 4 devices.
TABLES = {
    "video": Table(13, 4, "sum"),
    "user": Table(7, 3, "mean"),
    "query": Table(11, 2, "sqrtn"),
    "tiny": Table(3, 2, "sum"),
}


@dataclasses.dataclass(frozen=True)
class Feature:
    table: str
    # "pooled" / "sequence": sparse or ragged (the run's input kind); "dense": [B, 1];
    # "dense1": [B].
    kind: str
    weighted: bool = False


FEATURES = {
    "age": Feature("user", "dense"),
    "favorited": Feature("video", "pooled"),
    "flag": Feature("tiny", "dense1"),
    "friends": Feature("user", "pooled", weighted=True),
    "history": Feature("query", "sequence"),
    "watched": Feature("video", "pooled", weighted=True),
}

STRATEGIES = {"default": 1, "mirrored2": 2, "mirrored4": 4}


def make_strategy(name: str) -> tf.distribute.Strategy:
    if name == "default":
        return tf.distribute.get_strategy()
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(STRATEGIES[name])])


def initial_table(name: str) -> np.ndarray:
    table = TABLES[name]
    seed = sorted(TABLES).index(name)
    return np.random.default_rng(seed).uniform(
        -1, 1, (table.vocabulary_size, table.dim)).astype(np.float32)


def feature_config(configs=tf_embedding):
    """{name: FeatureConfig} over TABLES, with fixed initial tables. `configs` is tf_embedding
    or stock tf.tpu.experimental.embedding."""
    tables = {name: configs.TableConfig(
        vocabulary_size=t.vocabulary_size, dim=t.dim, combiner=t.combiner, name=name,
        initializer=lambda shape, dtype=None, value=initial_table(name): tf.constant(value))
        for name, t in TABLES.items()}
    return {name: configs.FeatureConfig(
        table=tables[f.table],
        max_sequence_length=MAX_SEQUENCE_LENGTH if f.kind == "sequence" else 0)
        for name, f in FEATURES.items()}


def variable_values(emb) -> dict[str, dict[str, np.ndarray]]:
    return {name: {slot: tf.convert_to_tensor(variable).numpy()
                   for slot, variable in slots.items()}
            for name, slots in table_variables(emb).items()}


# Data: per step, every feature's samples as [(id, weight), ...] lists, and their tf inputs.


def make_samples(num_steps: int, seed: int) -> list[dict[str, list]]:
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(num_steps):
        step = {}
        for name, feature in FEATURES.items():
            vocab = TABLES[feature.table].vocabulary_size
            samples = []
            for _ in range(GLOBAL_BATCH):
                dense = feature.kind.startswith("dense")
                length = 1 if dense else int(rng.integers(0, MAX_IDS + 1))
                ids = rng.integers(0, vocab, length)
                weights = rng.uniform(0.5, 2, length) if feature.weighted else np.ones(length)
                samples.append([(int(i), float(w)) for i, w in zip(ids, weights)])
            step[name] = samples
        steps.append(step)
    return steps


def to_input(feature: Feature, samples: list, kind: str, weights: bool = False):
    """Samples -> a tf input (ids or, with `weights`, their weights) of the feature's kind."""
    column = 1 if weights else 0
    dtype = tf.float32 if weights else tf.int64
    if feature.kind == "dense":
        return tf.constant([[s[0][column]] for s in samples], dtype)
    if feature.kind == "dense1":
        return tf.constant([s[0][column] for s in samples], dtype)
    if kind == "ragged":
        return tf.ragged.constant([[x[column] for x in s] for s in samples], dtype=dtype,
                                  row_splits_dtype=tf.int64)
    indices = [[b, k] for b, s in enumerate(samples) for k in range(len(s))]
    values = [x[column] for s in samples for x in s]
    return tf.SparseTensor(tf.constant(indices, tf.int64, shape=[len(indices), 2]),
                           tf.constant(values, dtype, shape=[len(values)]),
                           [len(samples), MAX_IDS])


def feature_kind(name: str, kind: str) -> str:
    """The input kind of feature `name` in a run of `kind`: "mixed" alternates sparse and
    ragged over the features, so features of one table arrive as different kinds."""
    if kind != "mixed":
        return kind
    id_lists = [n for n in sorted(FEATURES) if not FEATURES[n].kind.startswith("dense")]
    return ("sparse", "ragged")[id_lists.index(name) % 2] if name in id_lists else kind


def to_inputs(step: dict, kind: str, start: int = 0, stop: int = GLOBAL_BATCH):
    """(features, weights) of samples [start, stop) in feature_config's structure."""
    features = {name: to_input(FEATURES[name], step[name][start:stop], feature_kind(name, kind))
                for name in step}
    weights = {name: to_input(FEATURES[name], step[name][start:stop], feature_kind(name, kind),
                              weights=True)
               if FEATURES[name].weighted else None for name in step}
    return features, weights


# Checkpoints: an unbuilt engine under a strategy, random values for it, and their comparison.

ADAGRAD = {"learning_rate": 0.1, "initial_accumulator_value": 0.2}


def sharded(strategy_name: str, optimizer=None, config=None, partition_strategy="div"):
    """An unbuilt TPUEmbedding under the strategy (blocks on its devices)."""
    with make_strategy(strategy_name).scope():
        return tf_embedding.TPUEmbedding(config or feature_config(),
                                         optimizer or tf_embedding.Adagrad(**ADAGRAD),
                                         partition_strategy=partition_strategy)


def randomize(emb, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Gives every table and slot random values (what training would); returns them."""
    emb.build()
    rng = np.random.default_rng(seed)
    for slots in table_variables(emb).values():
        for variable in slots.values():
            variable.assign(rng.uniform(0.1, 1, variable.shape).astype(np.float32))
    return variable_values(emb)


def assert_same_values(actual: dict, expected: dict) -> None:
    assert {t: sorted(s) for t, s in actual.items()} == {t: sorted(s) for t, s in expected.items()}
    for table, slots in expected.items():
        for slot, value in slots.items():
            np.testing.assert_array_equal(actual[table][slot], value, err_msg=f"{table}/{slot}")


# A small engine (one 6x2 table, a pooled and a sequence feature) for the misuse, inference and
# bad-input tests.


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
