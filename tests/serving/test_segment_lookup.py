"""The default serving lookup's segment reductions (`pooled_lookup.segment_lookup`,
`ragged_segment_lookup`, chosen by `for_serving._pooled`) against stock TF's
`TPUEmbeddingForServing`, for every pooled kind (sparse, ragged), weighted or not, and every
combiner; and the batches they leave to TF's formulation."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import config
from tf_embedding import pooled_lookup
from tf_embedding.for_serving import TPUEmbeddingForServing

pytestmark = pytest.mark.unit

stock = tf.tpu.experimental.embedding

COMBINERS = ["sum", "mean", "sqrtn"]
VOCABULARY_SIZE = 50
DIM = 8


def random_ragged(rng, rows, max_length):
    """A [rows, None] batch of rows of random lengths (some empty) and positive weights."""
    lengths = rng.integers(0, max_length + 1, size=rows)
    ids = rng.integers(VOCABULARY_SIZE, size=lengths.sum())
    weights = rng.uniform(0.1, 2.0, size=ids.shape).astype(np.float32)
    return (tf.RaggedTensor.from_row_lengths(ids, lengths),
            tf.RaggedTensor.from_row_lengths(weights, lengths))


def pair(combiner, table_values):
    """Our and stock's serving objects of one feature on a table holding `table_values`."""

    def feature(module):
        table = module.TableConfig(vocabulary_size=VOCABULARY_SIZE, dim=DIM, combiner=combiner,
                                   name="video")
        return module.FeatureConfig(table=table)

    ours = TPUEmbeddingForServing(feature(config), None)
    theirs = stock.TPUEmbeddingForServing(feature(stock), None)
    for embedding in (ours, theirs):
        embedding.build()
        next(iter(embedding.embedding_tables.values())).assign(table_values)
    return ours, theirs


@pytest.fixture(name="table_values")
def fixture_table_values():
    return np.random.default_rng(7).normal(size=[VOCABULARY_SIZE, DIM]).astype(np.float32)


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("kind", ["sparse", "ragged"])
@pytest.mark.parametrize("weighted", [False, True])
def test_pooled_lookups_match_stock_serving(table_values, combiner, kind, weighted):
    """Empty rows, empty batches, eagerly and traced with an unknown batch size."""
    ours, theirs = pair(combiner, table_values)
    rng = np.random.default_rng(11)
    for rows in [0, 1, 6, 40]:
        ids, weights = random_ragged(rng, rows, 7)
        if kind == "sparse":
            ids, weights = ids.to_sparse(), weights.to_sparse()
        weights = weights if weighted else None
        expected = theirs(ids, weights)
        traced = tf.function(lambda i, w: ours(i, w), reduce_retracing=True)
        for actual in [ours(ids, weights), traced(ids, weights)]:
            np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("combiner", ["mean", "sqrtn"])
def test_weights_stock_prunes_take_stocks_formulation(table_values, combiner):
    """TF drops lookups of weight <= 0 for "mean" and "sqrtn" (and of negative ids)."""
    ours, theirs = pair(combiner, table_values)
    ids = tf.sparse.from_dense(tf.constant([[1, 2, 3], [4, 5, 6]], tf.int64))
    weights = tf.SparseTensor(ids.indices, [1.0, -2.0, 0.5, 0.0, 1.5, 2.0], ids.dense_shape)
    np.testing.assert_array_equal(ours(ids, weights), theirs(ids, weights))
    with_negative = tf.SparseTensor(ids.indices, [1, -2, 3, 4, 5, 6], ids.dense_shape)
    np.testing.assert_array_equal(ours(with_negative, None), theirs(with_negative, None))


def test_sum_keeps_negative_weights(table_values):
    ours, theirs = pair("sum", table_values)
    ids = tf.sparse.from_dense(tf.constant([[1, 2], [3, 4]], tf.int64))
    weights = tf.SparseTensor(ids.indices, [1.0, -2.0, 0.0, 3.0], ids.dense_shape)
    np.testing.assert_allclose(ours(ids, weights), theirs(ids, weights), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours(ids, weights)[0], table_values[1] - 2 * table_values[2],
                               rtol=1e-6)


@pytest.mark.parametrize("bad_id", [-1, VOCABULARY_SIZE])
def test_ragged_ids_outside_the_table_fail_as_stocks(table_values, bad_id):
    """TF prunes nothing of a ragged batch: its gather's error, from TF's formulation."""
    table = tf.Variable(table_values)
    ragged = tf.ragged.constant([[1, bad_id], [2]], dtype=tf.int64)

    def stock_lookup():
        return tf.reduce_sum(tf.nn.embedding_lookup(table, ragged), axis=1)

    with pytest.raises(tf.errors.InvalidArgumentError) as expected:
        stock_lookup()
    with pytest.raises(tf.errors.InvalidArgumentError) as actual:
        pooled_lookup.ragged_segment_lookup(table, VOCABULARY_SIZE, ragged, None, "sum",
                                            stock_lookup)
    assert f"= {bad_id} is not in [0, {VOCABULARY_SIZE})" in str(actual.value)
    assert str(actual.value) == str(expected.value)


def test_unweighted_sparse_is_bit_identical_and_ragged_within_an_ulp(table_values):
    """The unweighted sparse reduction is TF's own op; the others sum in another order."""
    rng = np.random.default_rng(3)
    ids, weights = random_ragged(rng, 64, 20)
    ours, theirs = pair("sum", table_values)
    np.testing.assert_array_equal(ours(ids.to_sparse()), theirs(ids.to_sparse()))
    for args in [(ids, None), (ids, weights), (ids.to_sparse(), weights.to_sparse())]:
        np.testing.assert_allclose(ours(*args), theirs(*args), rtol=1e-6, atol=1e-6)
