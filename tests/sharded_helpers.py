"""The sharded TPUEmbedding tests' fixture, shared by the training and the checkpoint tests.

`feature_config` builds, with tf_embedding's or stock's configs, the features of FEATURES over
the tables of TABLES, with fixed initial tables (`initial_table`). `make_strategy` gives one of
STRATEGIES: the default strategy or MirroredStrategy over 2 or 4 logical CPUs (conftest.py), so
tables are split into 1, 2 and 4 row blocks. `variable_values` reads a TPUEmbedding's tables and
slots as whole arrays, whatever the block count.
"""

import dataclasses

import numpy as np
import tensorflow as tf

import tf_embedding

MAX_SEQUENCE_LENGTH = 3


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
            for name, slots in emb._variables.items()}
