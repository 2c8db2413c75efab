"""The key index of dynamic tables (TfeDynamicIndex, TfeDynamicLookup, export / import) against
a plain-Python replay of its rules (tests/helpers/dynamic_index_model.py)."""

import itertools

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from helpers.dynamic_index_model import IndexModel, Options, mix_key
from helpers.fuzz_settings import fuzz_settings
from tf_embedding import dynamic_index_ops as ops

pytestmark = pytest.mark.unit

_names = itertools.count()


def make_index(options: Options, table: str = "items") -> tf.Tensor:
    return ops.dynamic_index(
        table, options.block_rows, options.strided, options.admit_after,
        options.evict_after_steps, options.evict_every_steps, options.refuse_when_full,
        options.candidate_capacity, options.pool_rows, shared_name=f"test_index_{next(_names)}")


def lookup(index, keys, training):
    result = ops.dynamic_lookup(index, tf.constant(keys, tf.int64), training, "items")
    return (result.rows.numpy().tolist(), result.admitted_rows.numpy().tolist(),
            result.admitted_pool_rows.numpy().tolist())


def assert_same_state(index, model):
    state = ops.dynamic_index_export(index)
    rows, candidates, stats = model.state()
    np.testing.assert_array_equal(state.row_records.numpy(), rows)
    np.testing.assert_array_equal(state.candidate_records.numpy(), candidates)
    np.testing.assert_array_equal(state.stats.numpy(), stats)


def churn_stream(seed, steps, batch, universe):
    """Batches of Zipf-like keys whose popular set drifts, with repeats inside a batch."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        ranks = np.minimum(rng.zipf(1.3, batch), universe) - 1
        yield ((ranks + 7 * step) % universe * 1_000_003 + (1 << 40)).astype(np.int64)


OPTIONS = [
    Options([16]),
    Options([8, 8], admit_after=2, candidate_capacity=12),
    Options([5, 4, 4, 4], strided=True, admit_after=3, candidate_capacity=6, pool_rows=7),
    Options([6, 6], evict_after_steps=3, evict_every_steps=2, candidate_capacity=40,
            admit_after=2),
    Options([4, 4, 4, 4], refuse_when_full=True, candidate_capacity=8),
    Options([3, 3], strided=True, evict_after_steps=1, pool_rows=1000),
]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_matches_replay_on_churn(options):
    index, model = make_index(options), IndexModel(options)
    for step, keys in enumerate(churn_stream(len(options.block_rows), 30, 24, 60)):
        training = step % 5 != 4  # every fifth batch an evaluation batch
        assert lookup(index, keys, training) == model.lookup(keys, training), step
        assert_same_state(index, model)
        # The stats alone are the export's.
        np.testing.assert_array_equal(ops.dynamic_index_stats(index),
                                      ops.dynamic_index_export(index).stats)
    stats = ops.dynamic_index_export(index).stats.numpy()
    assert stats[3] > stats[1] or stats[5] > 0  # the stream filled the blocks


def test_evaluation_changes_nothing():
    options = Options([4, 4], admit_after=2, candidate_capacity=8)
    index = make_index(options)
    lookup(index, [1, 2, 3, 3], True)
    before = [t.numpy() for t in ops.dynamic_index_export(index)]
    rows, admitted, _ = lookup(index, [1, 2, 3, 9, 9, 9], False)
    assert admitted == [] and rows[2] >= 0 and rows[0] == rows[1] == rows[3] == -1
    for a, b in zip(before, ops.dynamic_index_export(index)):
        np.testing.assert_array_equal(a, b.numpy())


def test_admitted_rows_start_at_their_pool_row():
    options = Options([8], pool_rows=5)
    rows, admitted, pool = lookup(make_index(options), [30, 10, 20, 10], True)
    assert sorted(admitted) == [0, 1, 2] and rows[1] == rows[3]
    assert pool == [mix_key(key) % 5 for key in (10, 20, 30)]  # ascending keys take slots in order
    assert rows[1] == 0 and rows[2] == 1 and rows[0] == 2


def test_export_import_round_trip_continues_identically():
    options = Options([6, 6], admit_after=2, evict_after_steps=4, candidate_capacity=10)
    stream = list(churn_stream(3, 20, 16, 40))
    first = make_index(options)
    for keys in stream[:10]:
        lookup(first, keys, True)
    second = make_index(options)
    ops.dynamic_index_import(second, ops.dynamic_index_export(first), "items")
    for keys in stream[10:]:
        assert lookup(first, keys, True) == lookup(second, keys, True)


def test_import_of_another_layout_fails_and_changes_nothing():
    two = make_index(Options([8, 8]))
    lookup(two, list(range(100, 112)), True)
    four = make_index(Options([4, 4, 4, 4]))
    lookup(four, [5], True)
    before = [t.numpy() for t in ops.dynamic_index_export(four)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'items'.*another block layout"):
        ops.dynamic_index_import(four, ops.dynamic_index_export(two), "items")
    for a, b in zip(before, ops.dynamic_index_export(four)):
        np.testing.assert_array_equal(a, b.numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="holds 16 rows, the table 8"):
        ops.dynamic_index_import(make_index(Options([8])), ops.dynamic_index_export(two), "items")


def test_bad_keys_and_options_are_named():
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table 'items': id -3 at lookup 1 is negative"):
        lookup(make_index(Options([4])), [1, -3], True)
    for options, message in [(Options([4], admit_after=0), "admit_after must be >= 1"),
                             (Options([0]), "each block of a dynamic table holds 1 to"),
                             (Options([4], evict_every_steps=0), "evict_every_steps"),
                             (Options([4], candidate_capacity=-1), "candidate_capacity"),
                             (Options([4], pool_rows=0), "pool_rows")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"Table 'items': {message}"):
            make_index(options)


def test_works_inside_tf_function():
    options = Options([4, 4], admit_after=2)
    index, model = make_index(options), IndexModel(options)

    @tf.function
    def step(keys):
        return ops.dynamic_lookup(index, keys, tf.constant(True), "items").rows

    for keys in ([1, 2, 2], [1, 3, 5], [1, 2, 9]):
        assert step(tf.constant(keys, tf.int64)).numpy().tolist() == model.lookup(keys, True)[0]


@fuzz_settings(40)
@hypothesis.given(
    block_rows=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    strided=st.booleans(), admit_after=st.integers(1, 3),
    evict_after_steps=st.integers(0, 3), evict_every_steps=st.integers(1, 2),
    refuse_when_full=st.booleans(), candidate_capacity=st.integers(0, 6),
    batches=st.lists(st.tuples(st.lists(st.integers(0, 20), max_size=12), st.booleans()),
                     max_size=12))
def test_property_matches_replay(block_rows, strided, admit_after, evict_after_steps,
                                 evict_every_steps, refuse_when_full, candidate_capacity,
                                 batches):
    if strided and len(set(block_rows)) > 1:
        block_rows = [block_rows[0]] * len(block_rows)  # a 'mod' layout's blocks are even
    options = Options(block_rows, strided, admit_after, evict_after_steps, evict_every_steps,
                      refuse_when_full, candidate_capacity, pool_rows=3)
    index, model = make_index(options), IndexModel(options)
    for keys, training in batches:
        assert lookup(index, keys, training) == model.lookup(keys, training)
    assert_same_state(index, model)


def test_invalid_imports_are_named_and_change_nothing():
    index = make_index(Options([4], candidate_capacity=1))
    lookup(index, [3], True)
    good = ops.dynamic_index_export(index)
    row_of_3 = int(np.flatnonzero(good.row_records.numpy()[:, 0] == 3)[0])
    twice = good.row_records.numpy().copy()
    twice[(row_of_3 + 1) % 4] = twice[row_of_3]
    cases = [
        (good._replace(stats=tf.zeros([5], tf.int64)), "stats must have shape \\[6\\]"),
        (good._replace(row_records=tf.zeros([4, 2], tf.int64)), "row_records must have shape"),
        (good._replace(row_records=tf.constant(twice)), "key 3 is in two rows"),
        (good._replace(candidate_records=tf.constant([[7, 0, 1]], tf.int64)),
         "candidate record \\(key 7, count 0, last step 1\\) is not valid at step 1"),
        (good._replace(candidate_records=tf.constant([[7, 1, 1], [9, 1, 1]], tf.int64)),
         "more candidates for block 0 than its 1"),
    ]
    for state, message in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"Table 'items': .*{message}"):
            ops.dynamic_index_import(index, state, "items")
        for a, b in zip(good, ops.dynamic_index_export(index)):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


@hypothesis.given(st.lists(st.lists(st.integers(-1, 9), max_size=4), max_size=6))
@fuzz_settings(60)
def test_dropping_missing_lookups_matches_numpy(samples):
    """TfeDropMissingLookups against numpy: each row keeps its lookups of rows >= 0, in order,
    with their gains."""
    row_splits = np.cumsum([0] + [len(sample) for sample in samples]).astype(np.int64)
    rows = np.array([row for sample in samples for row in sample], np.int64)
    gains = np.arange(len(rows), dtype=np.float32) + 0.5
    kept = rows >= 0
    splits, kept_rows, kept_gains = ops.drop_missing_lookups(
        tf.constant(row_splits), tf.constant(rows), tf.constant(gains), "items")
    np.testing.assert_array_equal(splits, np.concatenate([[0], np.cumsum(kept)])[row_splits])
    np.testing.assert_array_equal(kept_rows, rows[kept])
    np.testing.assert_array_equal(kept_gains, gains[kept])


@pytest.mark.parametrize("row_splits, gains, message", [
    ([0, 2, 2], [1.0, 1.0, 1.0], "row_splits"),
    ([0, 1, 3], [1.0, 1.0], "2 gains for 3 rows"),
    ([0, 2, 1, 3], [1.0, 1.0, 1.0], "row_splits"),
])
def test_dropping_missing_lookups_names_the_table_of_a_bad_batch(row_splits, gains, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"Table 'items'.*{message}"):
        ops.drop_missing_lookups(tf.constant(row_splits, tf.int64),
                                 tf.constant([3, -1, 4], tf.int64), tf.constant(gains), "items")
