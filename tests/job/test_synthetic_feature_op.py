"""TfeSyntheticFeature: the synthetic log's batches equal, bit for bit, the same draws written as
stock TensorFlow ops (the composition below, which the op replaced), and bad tables fail with
an error naming the feature."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.feature_inputs import cpu_rules
from tf_embedding.job.data import input_ops, synthetic
from tf_embedding.job.data.spec import DataSpec, FeatureSpec, TableSpec

pytestmark = pytest.mark.unit

SPEC = DataSpec(
    tables=(TableSpec("big", 300_000, "sum", zipf_alpha=1.05, head_size=100),
            TableSpec("mid", 5000, "mean", zipf_alpha=1.2, head_size=50),
            TableSpec("small", 24, "sqrtn", zipf_alpha=0.3, head_size=24)),
    features=(FeatureSpec("single", "big"),
              FeatureSpec("history", "big", max_ids=20, effect_scale=0.5),
              FeatureSpec("weighted_mean", "mid", weighted=True, max_ids=8),
              FeatureSpec("mean", "mid", max_ids=3),
              FeatureSpec("weighted_sqrtn", "small", weighted=True, max_ids=5),
              FeatureSpec("sqrtn", "small", max_ids=2),
              FeatureSpec("weighted_one", "small", weighted=True),
              # MLPerf's fixed multi-hot sizes, and lengths drawn above 1.
              FeatureSpec("fixed", "mid", min_ids=7, max_ids=7),
              FeatureSpec("from_three", "small", weighted=True, min_ids=3, max_ids=6)),
    num_dense=3)


def _sample(table: synthetic.ZipfTable, count: tf.Tensor, seed: tf.Tensor):
    """Walker's alias method in TF ops: the rows and their effects."""
    scaled = tf.random.stateless_uniform([count], seed, dtype=tf.float64) * table.size
    column = tf.minimum(tf.cast(scaled, tf.int64), table.size - 1)
    keep, alias, effect, alias_effect = tf.unstack(tf.gather(table.columns, column), axis=1)
    kept = scaled - tf.cast(column, tf.float64) < keep
    rank = tf.where(kept, column, tf.cast(alias, tf.int64))
    rows = (rank * table.multiplier + table.offset) % table.size
    return rows, tf.cast(tf.where(kept, effect, alias_effect), tf.float32)


def _combine(weights: tf.RaggedTensor, effects: tf.Tensor, combiner: str) -> tf.Tensor:
    weighted = tf.reduce_sum(weights.with_flat_values(weights.flat_values * effects), axis=1)
    norms = cpu_rules.combiner_norm(combiner, weights,
                                    lambda values: tf.reduce_sum(values, axis=1))
    return weighted if norms is None else tf.math.divide_no_nan(weighted, norms)


def _reference_batch(log: synthetic.SyntheticClickLog, split: int, step: int, batch_size: int):
    """SyntheticClickLog.batch as TF ops."""
    base = tf.constant([log.seed, split], tf.int64)
    step_seed = tf.random.experimental.stateless_fold_in(base, tf.constant(step, tf.int64))

    def stream(i):
        return tf.random.experimental.stateless_fold_in(step_seed, i)

    dense = tf.random.stateless_normal([batch_size, log.spec.num_dense], stream(0))
    # private: needs a public accessor (the log's dense weights and Zipf tables), which this
    # replay of its batch() reads.
    logit = log.spec.label_bias + tf.linalg.matvec(dense, log._beta)
    batch = {"dense": dense, "ids": {}, "weights": {}}
    for j, feature in enumerate(log.spec.features):
        table = log._tables[feature.table]
        if feature.max_ids == feature.min_ids:
            lengths = tf.fill([batch_size], tf.constant(feature.max_ids, tf.int64))
        else:
            lengths = tf.random.stateless_uniform(
                [batch_size], stream(3 * j + 1), minval=feature.min_ids,
                maxval=feature.max_ids + 1, dtype=tf.int64)
        rows, effects = _sample(table, tf.reduce_sum(lengths), stream(3 * j + 2))
        ids = tf.RaggedTensor.from_row_lengths(rows, lengths)
        batch["ids"][feature.name] = ids
        if feature.weighted:
            weights = ids.with_flat_values(tf.random.stateless_uniform(
                [tf.size(rows)], stream(3 * j + 3), minval=synthetic.WEIGHT_RANGE[0],
                maxval=synthetic.WEIGHT_RANGE[1]))
            batch["weights"][feature.name] = weights
        else:
            weights = ids.with_flat_values(tf.ones_like(effects))
        logit += feature.effect_scale * _combine(
            weights, effects, log.spec.table(feature.table).combiner)
    probability = tf.sigmoid(logit)
    click = tf.random.stateless_uniform([batch_size], stream(1 << 20)) < probability
    batch.update(label=tf.cast(click, tf.float32), probability=probability)
    return batch


@pytest.mark.parametrize("seed,split,step,batch_size", [
    (0, synthetic.TRAIN, 0, 1000), (7, synthetic.TEST, 123456, 257), (3, synthetic.TRAIN, 5, 1)])
def test_batches_equal_the_tf_op_composition(seed, split, step, batch_size):
    log = synthetic.SyntheticClickLog(SPEC, seed=seed)
    got = log.batch(split, tf.constant(step), batch_size)
    want = _reference_batch(log, split, step, batch_size)
    for key in ("dense", "label", "probability"):
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)
    for kind in ("ids", "weights"):
        assert sorted(got[kind]) == sorted(want[kind])
        for name, ragged in want[kind].items():
            np.testing.assert_array_equal(got[kind][name].row_splits.numpy(),
                                          ragged.row_splits.numpy(), err_msg=name)
            np.testing.assert_array_equal(got[kind][name].flat_values.numpy(),
                                          ragged.flat_values.numpy(), err_msg=name)


def _call(columns, **overrides):
    arguments = dict(feature_name="clicks", batch_size=8, max_ids=3, weighted=True,
                     combiner="mean", multiplier=1, offset=0, weight_range=(0.2, 1.0))
    arguments.update(overrides)
    return input_ops.synthetic_feature(tf.constant(columns, tf.float64),
                                       tf.constant([[1, 2], [3, 4], [5, 6]], tf.int64), **arguments)


def test_an_alias_entry_that_is_not_a_rank_fails_naming_the_feature():
    # Column 0 is never kept, and its alias is no rank of the 2-row table.
    columns = [[0.0, 7.0, 0.5, 0.5], [0.0, float("nan"), 0.5, 0.5]]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Feature 'clicks': alias table entry [01] holds .*not a rank below 2"):
        _call(columns)


@pytest.mark.parametrize("columns,overrides,message", [
    (np.zeros([4, 3]), {}, r"columns must be \[N, 4\]"),
    (np.zeros([0, 4]), {}, r"columns must be \[N, 4\]"),
    (np.zeros([4, 4]), {"multiplier": 4}, "multiplier 4 and offset 0 must be below"),
    (np.zeros([4, 4]), {"offset": 9}, "multiplier 1 and offset 9 must be below"),
    (np.zeros([4, 4]), {"min_ids": 4}, "min_ids 4 is above max_ids 3"),
])
def test_bad_tables_fail_naming_the_feature(columns, overrides, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match="Feature 'clicks': " + message):
        _call(columns, **overrides)


def test_bad_seeds_fail_naming_the_feature():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Feature 'clicks': seeds must be"):
        input_ops.synthetic_feature(tf.zeros([4, 4], tf.float64), tf.zeros([2, 2], tf.int64),
                                    "clicks", 8, 3, False, "sum", 1, 0, (0.2, 1.0))
