"""The synthetic log's Zipf sampler: the alias table holds exactly the distribution it was
built from, and the ids drawn through it follow that distribution."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job.data import input_ops, synthetic
from tf_embedding.job.data.spec import TableSpec

pytestmark = pytest.mark.unit


def _zipf(size: int, alpha: float) -> np.ndarray:
    probability = (np.arange(size) + 1.0) ** -alpha
    return probability / probability.sum()


def _implied(keep: np.ndarray, alias: np.ndarray) -> np.ndarray:
    """The distribution an alias table draws: a column's kept share plus what aliases give it."""
    implied = keep.copy()
    np.add.at(implied, alias, 1.0 - keep)
    return implied / len(keep)


@pytest.mark.parametrize("probability", [
    _zipf(200_000, 1.05), _zipf(24, 0.3), _zipf(1000, 3.0), _zipf(1, 1.0), np.full(5, 0.2),
    np.random.default_rng(0).random(1000) ** 8], ids=["zipf-200k", "zipf-24", "steep",
                                                       "one", "uniform", "random"])
def test_the_alias_table_holds_the_distribution(probability):
    probability = probability / probability.sum()
    keep, alias = synthetic.alias_table(probability)
    assert np.all((keep >= 0) & (keep <= 1)) and np.all((alias >= 0) & (alias < len(keep)))
    # float64 sums over up to 200,000 columns.
    np.testing.assert_allclose(_implied(keep, alias), probability, rtol=1e-9, atol=1e-15)


def test_drawn_ids_follow_the_zipf_law_and_carry_their_effects():
    spec = TableSpec("hour", 24, zipf_alpha=0.8)
    table = synthetic.ZipfTable(spec, seed=5)
    draws = 400_000
    # One id per sample, summed: each sample's contribution is its id's effect.
    drawn = input_ops.synthetic_feature(table.columns, tf.constant([[1, 2], [3, 4], [5, 6]]),
                                        "hour", draws, 1, False, "sum", table.multiplier,
                                        table.offset, (0.2, 1.0))
    rows, effects = drawn.rows.numpy(), drawn.contribution.numpy()
    # Row of rank r: the table's fixed bijection.
    rank_of_row = {(r * table.multiplier + table.offset) % 24: r for r in range(24)}
    counts = np.bincount([rank_of_row[row] for row in rows], minlength=24)
    expected = _zipf(24, 0.8) * draws
    # Within 5 binomial standard deviations per rank.
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected)), (counts, expected)
    # Every draw of a row carries that row's one effect.
    by_row = {}
    for row, effect in zip(rows, effects):
        assert by_row.setdefault(row, effect) == effect
