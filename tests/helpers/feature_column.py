"""The feature-column tests' fixture, shared with the lookup-profile tests: four columns (identity,
weighted hashed, two shared) with fixed initial tables, raw features for them, and an Adagrad
EmbeddingConfigSpec over them."""

import numpy as np
import tensorflow as tf

from tf_embedding import feature_column as efc


F = np.float32
DIM = 4


def initializer(rows, seed):
    return tf.constant_initializer(
        np.random.default_rng(seed).uniform(-1, 1, (rows, DIM)).astype(F))


def columns():
    """An identity column (sum), a weighted hashed column (mean) and two shared columns."""
    watched = tf.feature_column.categorical_column_with_identity("watched", 10)
    query = tf.feature_column.weighted_categorical_column(
        tf.feature_column.categorical_column_with_hash_bucket("query", 8), "query_weight")
    left = tf.feature_column.categorical_column_with_vocabulary_list("left", ["a", "b", "c"])
    right = tf.feature_column.categorical_column_with_vocabulary_list("right", ["x", "y", "z"])
    shared = efc.shared_embedding_columns([right, left], DIM, combiner="sum",
                                          initializer=initializer(3, 2))
    return [efc.embedding_column(watched, DIM, combiner="sum", initializer=initializer(10, 0)),
            efc.embedding_column(query, DIM, combiner="mean", initializer=initializer(8, 1)),
            *shared]


def raw_features(rng, batch=4):
    def sparse(values, dtype):
        indices = [[b, k] for b, row in enumerate(values) for k in range(len(row))]
        flat = [v for row in values for v in row]
        return tf.SparseTensor(tf.constant(indices, tf.int64, shape=[len(indices), 2]),
                               tf.constant(flat, dtype), [batch, max(map(len, values))])

    lengths = rng.integers(1, 4, (4, batch))
    return {
        "watched": sparse([list(rng.integers(0, 10, n)) for n in lengths[0]], tf.int64),
        "query": sparse([[f"q{i}" for i in rng.integers(0, 20, n)] for n in lengths[1]],
                        tf.string),
        "query_weight": sparse([list(rng.uniform(0.5, 2, n)) for n in lengths[1]], tf.float32),
        "left": sparse([[str(c) for c in rng.choice(list("abc"), n)] for n in lengths[2]],
                       tf.string),
        "right": sparse([[str(c) for c in rng.choice(list("xyz"), n)] for n in lengths[3]],
                        tf.string),
    }


def adagrad_spec(**kwargs):
    return efc.EmbeddingConfigSpec(feature_columns=columns(),
                                   optimization_parameters=efc.AdagradParameters(0.1),
                                   **kwargs)
