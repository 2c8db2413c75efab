"""A synthetic click log with a planted model, so the best achievable AUC is known.

Each table's ids follow a Zipf law over its vocabulary (rank r drawn with probability
proportional to (r + 1)**-alpha, ranks scattered over rows by a fixed bijection so that hot
ids are not all small numbers), drawn by Walker's alias method: one uniform number and one
read of the table's alias row per id. Every row has a planted effect; the click logit is

    label_bias + sum over features of scale * combine(weights, effects of the ids)
               + dense . beta

with the table's combiner, so an embedding model can represent it exactly. Labels are drawn
from the logistic of that logit; the probability itself travels with the batch so that the
Bayes AUC (the AUC of the true probabilities) can be measured on the same examples.

Batch k of a split is a pure function of (seed, split, k): stateless random streams, no state.
Each feature of a batch is one op (`TfeSyntheticFeature`: lengths, ids, weights and the
feature's share of the logit, drawn as TF's stateless random ops would draw them), where the
same draws as TF ops cost about as much CPU as a training step's embedding work.
"""

import math
import zlib

import numpy as np
import tensorflow as tf

from tf_embedding import dynamic_vocabulary
from tf_embedding.job.data import common, input_ops
from tf_embedding.job.data.spec import DataSpec, TableSpec

TRAIN = 0
TEST = 1
_DENSE_SCALE = 0.5
# A weighted feature's weights are uniform in this range.
WEIGHT_RANGE = (0.2, 1.0)


class ZipfTable:
    """Sampling and planted effects of one table, drawn from the run's seed and its name."""

    def __init__(self, table: TableSpec, seed: int):
        rng = np.random.default_rng([seed, zlib.crc32(table.name.encode())])
        size = table.vocabulary_size
        ranks = np.arange(size, dtype=np.float64)
        probability = (ranks + 1.0) ** -table.zipf_alpha
        probability /= probability.sum()
        self.size = size
        self.multiplier = _coprime_multiplier(size, rng)
        self.offset = int(rng.integers(size))
        # Effects shrink with rank; the scale makes one lookup's effect have unit variance
        # under the Zipf law, so FeatureSpec.effect_scale is the feature's share of the logit.
        spread = 1.0 / np.sqrt(1.0 + ranks / table.head_size)
        spread /= math.sqrt(float(np.sum(probability * spread ** 2)))
        effects = (rng.standard_normal(size) * spread).astype(np.float32)
        keep, alias = alias_table(probability)
        # Per column of the alias table, in one row (one memory read per id): the chance of
        # keeping the column's own rank, the alias's rank, and both ranks' effects.
        self.columns = tf.constant(np.stack([keep, alias, effects, effects[alias]], axis=1))


def alias_table(probability: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias table of a distribution over n outcomes: (keep, alias), such that drawing
    a column i uniformly, then i with probability keep[i] and alias[i] otherwise, draws outcome
    r with probability[r].

    Vose's construction, vectorized: with scaled masses q = n * probability, each column under
    1 (in order) is topped up from the current column over 1, which, once it falls under 1
    itself, is topped up from the next. In the order of the columns over 1, the current one
    before the k-th column under 1 is the first whose cumulative excess over 1 reaches the
    deficits below 1 of the columns before it; a column over 1 falls under at the first column
    under 1 whose cumulative deficit passes its cumulative excess, and keeps what is left.
    """
    n = len(probability)
    q = probability * n
    small, large = np.flatnonzero(q < 1.0), np.flatnonzero(q >= 1.0)
    keep = np.ones(n)
    alias = np.arange(n, dtype=np.int64)
    if len(small) == 0:
        return keep, alias
    deficits = np.cumsum(1.0 - q[small])  # through each column under 1
    excess = np.cumsum(q[large] - 1.0)
    donor = np.minimum(np.searchsorted(excess, np.concatenate([[0.0], deficits[:-1]])),
                       len(large) - 1)
    keep[small] = q[small]
    alias[small] = large[donor]
    # The columns over 1 that fall under it (all but the last, which rounding leaves at 1).
    spent = np.searchsorted(deficits, excess[:-1], side="right")
    fell = spent < len(small)
    keep[large[:-1][fell]] = np.clip(1.0 + excess[:-1][fell] - deficits[spent[fell]], 0.0, 1.0)
    alias[large[:-1][fell]] = large[1:][fell]
    return keep, alias


# Synthetic keys are below this: 18 decimal digits at most.
_KEYS = 2**59


def synthetic_keys(rows: tf.Tensor, size: int, step: tf.Tensor, renew_every: int) -> tf.Tensor:
    """A dynamic table's synthetic keys: row r's key at batch `step` is
    `mix64(r + size * generation) % 2**59`, where its generation, `(step + phase) //
    renew_every` with a phase of `mix64(r) % renew_every`, advances every `renew_every`
    batches (0: never), the rows at staggered batches. So keys are scattered (over the ints
    of at most 18 digits, which TSV lines hold) and, when renewed, new keys keep arriving as
    old ones stop."""
    rows = tf.cast(rows, tf.int64)
    generation = tf.zeros_like(rows)
    if renew_every:
        phase = tf.math.floormod(tf.bitwise.right_shift(_mix64(rows), 1), renew_every)
        generation = (tf.cast(step, tf.int64) + phase) // renew_every
    return tf.bitwise.bitwise_and(_mix64(rows + size * generation), _KEYS - 1)


def _mix64(values: tf.Tensor) -> tf.Tensor:
    """The index's mixer of keys (`dynamic_vocabulary.KEY_MIXER`) of int64 `values` (as uint64
    bits), a bijection."""
    x = tf.bitcast(values, tf.uint64)
    for shift, multiplier in dynamic_vocabulary.KEY_MIXER:
        x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(shift, tf.uint64)))
        if multiplier is not None:
            x = x * tf.constant(multiplier, tf.uint64)
    return tf.bitcast(x, tf.int64)


def _coprime_multiplier(size: int, rng: np.random.Generator) -> int:
    if size == 1:
        return 1
    while True:
        candidate = int(rng.integers(1, size))
        if math.gcd(candidate, size) == 1:
            return candidate


class SyntheticClickLog:
    """Deterministic batches of the planted click model described by a `DataSpec`."""

    def __init__(self, spec: DataSpec, seed: int = 0):
        self.spec = spec
        self.seed = seed
        self._tables = {t.name: ZipfTable(t, seed) for t in spec.tables}
        rng = np.random.default_rng([seed, 0x5eed])
        self._beta = tf.constant(rng.normal(0.0, _DENSE_SCALE, [spec.num_dense]), tf.float32)

    def batch(self, split: int, step: tf.Tensor, batch_size: int) -> common.Batch:
        """Batch `step` of `split` (TRAIN or TEST)."""
        base = tf.constant([self.seed, split], tf.int64)
        step_seed = tf.random.experimental.stateless_fold_in(base, tf.cast(step, tf.int64))

        def stream(i: int) -> tf.Tensor:
            return tf.random.experimental.stateless_fold_in(step_seed, i)

        dense = tf.random.stateless_normal([batch_size, self.spec.num_dense], stream(0))
        logit = self.spec.label_bias + tf.linalg.matvec(dense, self._beta)
        batch: common.Batch = {"dense": dense, "ids": {}, "weights": {}}
        for j, feature in enumerate(self.spec.features):
            table = self._tables[feature.table]
            drawn = input_ops.synthetic_feature(
                table.columns, tf.stack([stream(3 * j + 1), stream(3 * j + 2), stream(3 * j + 3)]),
                feature.name, batch_size, feature.max_ids, feature.weighted,
                self.spec.table(feature.table).combiner, table.multiplier, table.offset,
                WEIGHT_RANGE, feature.min_ids)
            table_spec = self.spec.table(feature.table)
            rows = drawn.rows if table_spec.dynamic is None else synthetic_keys(
                drawn.rows, table_spec.vocabulary_size, step, table_spec.renew_every)
            # The op's row splits are the lengths' sums: no check needed.
            ids = tf.RaggedTensor.from_row_splits(rows, drawn.row_splits, validate=False)
            batch["ids"][feature.name] = ids
            if feature.weighted:
                batch["weights"][feature.name] = ids.with_flat_values(drawn.weights)
            logit += feature.effect_scale * drawn.contribution
        probability = tf.sigmoid(logit)
        click = tf.random.stateless_uniform([batch_size], stream(1 << 20)) < probability
        batch.update(label=tf.cast(click, tf.float32), probability=probability,
                     malformed=tf.constant(0, tf.int64))
        return batch

    def dataset(self, split: int, batch_size: int, start_step: int = 0,
                num_steps: int | None = None) -> tf.data.Dataset:
        """Batches start_step, start_step + 1, ... (forever when num_steps is None)."""
        steps = tf.data.Dataset.range(start_step, start_step + num_steps) \
            if num_steps is not None else tf.data.Dataset.range(start_step, 2 ** 62)
        batch = tf.autograph.experimental.do_not_convert(
            lambda step: self.batch(split, step, batch_size))
        return steps.map(batch,
                         num_parallel_calls=tf.data.AUTOTUNE,
                         deterministic=True).prefetch(tf.data.AUTOTUNE)

