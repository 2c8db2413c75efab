"""The serving lookup's faster pooled formulations against TF's own (`safe_embedding_lookup_sparse`,
`embedding_lookup` of a ragged batch): the cases where they apply, and those they leave to TF's."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import pooled_lookup

pytestmark = pytest.mark.unit

COMBINERS = ["sum", "mean", "sqrtn"]
VOCABULARY_SIZE = 50
DIM = 8


@pytest.fixture(name="table")
def fixture_table():
    rng = np.random.default_rng(7)
    return tf.Variable(rng.normal(size=[VOCABULARY_SIZE, DIM]).astype(np.float32))


def random_sparse(rng, rows, max_length, negative=0.0, shuffled=False):
    """A [rows, max_length] SparseTensor with rows of random lengths (some empty)."""
    indices, values = [], []
    for row in range(rows):
        length = int(rng.integers(0, max_length + 1))
        for position in range(length):
            indices.append([row, position])
            values.append(-1 if rng.random() < negative else int(rng.integers(VOCABULARY_SIZE)))
    indices = np.array(indices, np.int64).reshape(-1, 2)
    values = np.array(values, np.int64)
    if shuffled:
        order = rng.permutation(len(values))
        indices, values = indices[order], values[order]
    return tf.SparseTensor(indices, values, [rows, max_length])


def stock(table, sparse, combiner, weights=None):
    return tf.nn.safe_embedding_lookup_sparse(table, sparse, sparse_weights=weights,
                                              combiner=combiner)


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("negative, shuffled", [(0.0, False), (0.2, False), (0.0, True)])
def test_segment_lookup_is_bit_identical_to_stock(table, combiner, negative, shuffled):
    """In row order the single segment reduction applies; negative ids and rows out of order
    take TF's formulation. Either way the bits are TF's."""
    rng = np.random.default_rng(1)
    for rows in [0, 1, 5, 33]:
        sparse = random_sparse(rng, rows, 6, negative, shuffled)
        expected = stock(table, sparse, combiner)
        for lookup in [pooled_lookup.segment_lookup, tf.function(pooled_lookup.segment_lookup)]:
            actual = lookup(table, VOCABULARY_SIZE, sparse, None, combiner,
                            lambda s=sparse: stock(table, s, combiner))
            np.testing.assert_array_equal(actual, expected)


def test_segment_lookup_leaves_ids_outside_the_table_to_stock(table):
    """TF's own error, not the segment reduction's."""
    sparse = tf.sparse.from_dense(tf.constant([[3, VOCABULARY_SIZE]], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1\] = 50 is not in"):
        pooled_lookup.segment_lookup(table, VOCABULARY_SIZE, sparse, None, "sum",
                                     lambda: stock(table, sparse, "sum"))


def compiled(table, sparse, combiner, weights=None, table_name="video"):
    return pooled_lookup.compiled_sparse_lookup(
        table, table_name, VOCABULARY_SIZE, combiner, sparse, weights,
        fallback=lambda: stock(table, sparse, combiner, weights))


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("weighted", [False, True])
def test_compiled_lookup_matches_stock(table, combiner, weighted):
    """Pruned ids and weights, empty rows and every combiner, up to the order of additions."""
    rng = np.random.default_rng(2)
    for rows in [0, 1, 7, 64]:
        sparse = random_sparse(rng, rows, 9, negative=0.15)
        weights = None
        if weighted:
            # Some weights <= 0: "mean" and "sqrtn" prune those lookups, "sum" keeps them.
            weights = tf.SparseTensor(sparse.indices, rng.uniform(
                -0.5, 2.0, size=sparse.values.shape).astype(np.float32), sparse.dense_shape)
        np.testing.assert_allclose(compiled(table, sparse, combiner, weights),
                                   stock(table, sparse, combiner, weights),
                                   rtol=1e-5, atol=1e-6)


def test_compiled_lookup_places_lookups_in_any_order(table):
    """The grid takes each lookup at its index, so rows out of order pool as in order."""
    sparse = random_sparse(np.random.default_rng(3), 20, 5, shuffled=True)
    np.testing.assert_allclose(compiled(table, sparse, "mean"), stock(table, sparse, "mean"),
                               rtol=1e-5, atol=1e-6)


def test_lookups_sharing_an_index_are_stocks(table):
    """TF sums two lookups at one index; a grid cell would keep one, so TF's formulation runs."""
    sparse = tf.SparseTensor([[0, 0], [0, 0], [1, 1]], tf.constant([3, 4, 5], tf.int64), [2, 2])
    np.testing.assert_array_equal(compiled(table, sparse, "sum"), stock(table, sparse, "sum"))
    np.testing.assert_array_equal(compiled(table, sparse, "sum")[0], table[3] + table[4])


def test_compiled_lookup_leaves_mostly_padding_batches_to_stock(table):
    """One row of 200 lookups and 63 of one: a 64 x 256 grid would be 80 times the lookups."""
    lengths = [200] + [1] * 63
    indices = [[row, position] for row, length in enumerate(lengths)
               for position in range(length)]
    ids = np.random.default_rng(4).integers(VOCABULARY_SIZE, size=len(indices))
    sparse = tf.SparseTensor(indices, ids, [64, 200])
    np.testing.assert_array_equal(compiled(table, sparse, "sum"), stock(table, sparse, "sum"))


def test_a_dense_shape_far_beyond_the_lookups_is_stocks(table):
    """A grid as wide as dense_shape[1] would be almost all padding, and its bucketed size,
    5 x 7 * 2**58, would wrap in int64: TF's formulation runs."""
    width = 6 * 2**58 + 1
    sparse = tf.SparseTensor([[0, 3], [3, width - 1]], tf.constant([4, 7], tf.int64), [5, width])
    np.testing.assert_array_equal(compiled(table, sparse, "sum"), stock(table, sparse, "sum"))


def test_padding_adds_nothing_even_to_an_infinite_row():
    """Padding cells add 0 x row 0, so a table whose row 0 is not finite is left to TF's
    formulation: other rows must not turn into NaN."""
    values = np.ones([VOCABULARY_SIZE, DIM], np.float32)
    values[0] = np.inf
    table = tf.constant(values)
    sparse = tf.sparse.from_dense(tf.constant([[3, 4, 5], [2, 0, 0]], tf.int64))
    np.testing.assert_array_equal(compiled(table, sparse, "sum"), [[3.0] * DIM, [1.0] * DIM])


def test_ids_outside_the_table_name_it(table):
    sparse = tf.sparse.from_dense(tf.constant([[3, VOCABULARY_SIZE + 2]], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'video': ids must be in \[0, 50\); got an id of 52"):
        compiled(table, sparse, "sum")


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("weighted", [False, True])
def test_compiled_ragged_lookup_matches_numpy(table, combiner, weighted):
    """Ragged rows of random lengths (some empty), against the pooling written out in numpy."""
    rng = np.random.default_rng(6)
    lengths = rng.integers(0, 7, size=21)
    ids = rng.integers(VOCABULARY_SIZE, size=lengths.sum())
    ragged = tf.RaggedTensor.from_row_lengths(ids, lengths)
    weights = rng.uniform(0.1, 2.0, size=ids.shape).astype(np.float32) if weighted else None
    actual = pooled_lookup.compiled_ragged_lookup(
        table, "video", VOCABULARY_SIZE, combiner, ragged,
        None if weights is None else tf.RaggedTensor.from_row_lengths(weights, lengths),
        fallback=lambda: tf.fill([len(lengths), DIM], np.nan))
    values = table.numpy()
    cell_weights = np.ones(ids.shape, np.float32) if weights is None else weights
    expected = np.zeros([len(lengths), DIM], np.float32)
    for row, end in enumerate(np.cumsum(lengths)):
        cells = slice(end - lengths[row], end)
        if lengths[row]:
            norm = {"sum": 1.0, "mean": cell_weights[cells].sum(),
                    "sqrtn": np.sqrt((cell_weights[cells] ** 2).sum())}[combiner]
            expected[row] = (values[ids[cells]] * cell_weights[cells, None]).sum(0) / norm
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_an_index_outside_the_dense_shape_fails(table):
    """Not a valid SparseTensor: the grid has no cell for it (docs/api_differences.md)."""
    sparse = tf.SparseTensor([[0, 5]], tf.constant([3], tf.int64), [2, 2])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Indices are not valid \(out of bounds\)"):
        compiled(table, sparse, "sum")


def test_ragged_ids_are_not_pruned(table):
    """A negative id of a ragged batch fails as TF's ragged lookup's gather does."""
    ragged = tf.ragged.constant([[1, -1], [2]], dtype=tf.int64)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'video': ids must be in \[0, 50\); got ids from -1 to 2"):
        pooled_lookup.compiled_ragged_lookup(table, "video", VOCABULARY_SIZE, "sum", ragged,
                                             None, fallback=lambda: tf.zeros([2, DIM]))


def test_batches_of_one_bucket_compile_once(table):
    """Grids have bucketed shapes: batches of 29 to 32 rows of 19 to 20 lookups share one
    (eagerly, the compiled function is traced, and compiled, once per grid shape)."""
    rng = np.random.default_rng(5)
    # private: the test is about the compiled grid function's traces.
    grid = pooled_lookup._compiled_grid_lookup  # pylint: disable=protected-access

    def look_up(rows, length):
        sparse = tf.SparseTensor([[row, position] for row in range(rows)
                                  for position in range(length)],
                                 rng.integers(VOCABULARY_SIZE, size=rows * length), [rows, 20])
        np.testing.assert_allclose(compiled(table, sparse, "sum"), stock(table, sparse, "sum"),
                                   rtol=1e-5, atol=1e-6)

    look_up(30, 20)
    traced = grid.experimental_get_tracing_count()
    for rows, length in [(29, 20), (32, 19), (31, 20)]:
        look_up(rows, length)
    assert grid.experimental_get_tracing_count() == traced
    look_up(33, 20)
    assert grid.experimental_get_tracing_count() == traced + 1


@pytest.mark.parametrize("size, bucket", [
    (0, 1), (1, 1), (7, 7), (8, 8), (9, 10), (10, 10), (17, 20), (20, 20), (21, 24), (33, 40),
    (4096, 4096), (4097, 5120), (2**40, 2**40), (2**40 + 1, 5 * 2**38), (2**53 + 2, 5 * 2**51)])
def test_bucket_rounds_up_to_a_quarter_of_a_power_of_two(size, bucket):
    # private: the test is about the bucketing rule itself.
    bucket_of = pooled_lookup._bucket  # pylint: disable=protected-access
    assert bucket_of(tf.constant(size, tf.int64)).numpy() == bucket
