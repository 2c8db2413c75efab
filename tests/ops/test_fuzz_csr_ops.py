"""Malformed inputs thrown at TfeFeaturesToCsr, TfeFeaturesLookup and TfeCsrDedup.

The only acceptable outcomes are a well-formed result or InvalidArgumentError: no crash, no
other error, no out-of-bounds access (run these under an AddressSanitizer build of the op
library to check the last point).
"""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tf_embedding import _loader

from helpers.fuzz_settings import fuzz_settings
from helpers.references import RawFeature, reference_csr

pytestmark = pytest.mark.unit


VOCAB = 8
KINDS = ["dense", "sparse", "ragged"]
INT64_MAX = 2**63 - 1
INT64_MIN = -2**63
FUZZ = fuzz_settings(200)

extreme = st.sampled_from([INT64_MIN, -2**40, 2**31, 2**40, 2**62, INT64_MAX])


@pytest.fixture(scope="module")
def ops():
    return _loader.load_ops()


@st.composite
def well_formed(draw, kind, nnz):
    """(row_info, dense_shape) of a valid sparse or ragged feature with nnz ids."""
    if kind == "ragged":
        cuts = sorted(draw(st.lists(st.integers(0, nnz), max_size=4)))
        return np.array([0] + cuts + [nnz], np.int64), np.zeros([0], np.int64)
    rank = draw(st.integers(2, 3))
    dense_shape = [draw(st.integers(0 if nnz == 0 else 1, 4)) for _ in range(rank)]
    indices = np.array([[draw(st.integers(0, d - 1)) for d in dense_shape] for _ in range(nnz)],
                       np.int64).reshape([nnz, rank])
    return indices, np.array(dense_shape, np.int64)


def _bump(draw, array):
    """One element moved a little, or to an extreme value."""
    if array.size == 0:
        return array
    flat = array.reshape(-1).copy()
    i = draw(st.integers(0, flat.size - 1))
    if flat.dtype == np.float32:
        flat[i] = draw(st.sampled_from([np.nan, np.inf, -1.0, 0.0]))
    elif flat.dtype == np.int32:
        flat[i] = draw(st.sampled_from([-2, -1, VOCAB, VOCAB + 1]))
    else:
        flat[i] = draw(st.one_of(st.integers(-2, 3).map(lambda d: flat[i] + d), extreme))
    return flat.reshape(array.shape)


def _regrow(draw, array):
    """One row (along the first axis) or, for matrices, one column, added or removed."""
    axis = draw(st.sampled_from([0, 1] if array.ndim == 2 else [0]))
    if draw(st.booleans()):
        return np.delete(array, -1, axis=axis) if array.shape[axis] else array
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, 1)
    return np.pad(array, pad)


def _reshape(draw, array):
    return array.reshape(draw(st.sampled_from([[-1], [1, -1], [-1, 1, 1]])))


def _row_info_at_edge(draw, spec):
    """One sparse index or ragged split moved just past what it is checked against."""
    row_info, nnz = spec["row_info"].copy(), spec["ids"].size
    if row_info.size == 0:
        return row_info
    if spec["kind"] == "sparse":
        i = draw(st.integers(0, row_info.shape[0] - 1))
        d = draw(st.integers(0, row_info.shape[1] - 1))
        bound = spec["dense_shape"][d]
        row_info[i, d] = draw(st.sampled_from([-1, bound - 1, bound, bound + 1]))
    else:
        b = draw(st.integers(0, row_info.size - 1))
        previous = row_info[b - 1] if b > 0 else 0
        row_info[b] = draw(st.sampled_from([previous - 1, nnz - 1, nnz, nnz + 1]))
    return row_info


def mutate(draw, spec):
    """Breaks one thing about a well-formed feature."""
    target = draw(st.sampled_from(["ids", "row_info", "row_info", "dense_shape", "weights",
                                   "edge", "edge", "edge", "kind", "msl", "has_weights"]))
    if target == "kind":
        spec["kind"] = draw(st.sampled_from(["dense", "sparse", "ragged", "bogus"]))
    elif target == "msl":
        spec["msl"] = draw(st.sampled_from([-1, 2, 2**40, 2**62]))
    elif target == "has_weights":
        spec["has_weights"] = not spec["has_weights"]
    elif target == "edge":
        if spec["kind"] != "dense":
            spec["row_info"] = _row_info_at_edge(draw, spec)
    else:
        change = draw(st.sampled_from([_bump, _bump, _regrow, _reshape]))
        spec[target] = change(draw, spec[target])


@st.composite
def feature(draw, kind=None, broken=None):
    """A well-formed feature of `kind` (any when None), broken in one place when `broken`
    (now and then when None)."""
    kind = kind or draw(st.sampled_from(KINDS))
    nnz = draw(st.integers(0, 6))
    id_dtype = draw(st.sampled_from([np.int32, np.int64]))
    # Mostly valid ids; -1 and VOCAB now and then (pruned or rejected).
    id_values = st.one_of(*[st.integers(0, VOCAB - 1)] * 5, st.integers(-1, VOCAB))
    ids = np.array(draw(st.lists(id_values, min_size=nnz, max_size=nnz)), id_dtype)
    if kind == "dense":
        row_info, dense_shape = np.zeros([0], np.int64), np.array([nnz], np.int64)
    else:
        row_info, dense_shape = draw(well_formed(kind, nnz))
    has_weights = draw(st.booleans())
    # No subnormals: TensorFlow runs kernels with denormals flushed to zero, Python does not.
    finite = st.floats(-2, 2, width=32, allow_subnormal=False)
    weights = np.array(draw(st.lists(finite, min_size=nnz, max_size=nnz)), np.float32)
    msl = 0 if kind == "dense" else draw(st.sampled_from([0, 0, 1, 3]))
    spec = dict(ids=ids, row_info=row_info, dense_shape=dense_shape,
                weights=weights if has_weights else np.zeros([0], np.float32), kind=kind,
                has_weights=has_weights, msl=msl, prune=draw(st.booleans()))
    if broken if broken is not None else draw(st.sampled_from([False] * 3 + [True])):
        mutate(draw, spec)
    return spec


def check_batch(batch, features, combiner):
    """An accepted input must give exactly the reference batch."""
    raw = [RawFeature(f["kind"], f["ids"], f["row_info"], f["dense_shape"],
                      f["weights"] if f["has_weights"] else None, f["msl"], f["prune"])
           for f in features]
    # Gains below the smallest normal float may come out flushed to zero.
    for got, want in zip(batch, reference_csr(raw, combiner)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=np.finfo(np.float32).tiny,
                                   equal_nan=True)
    assert np.all((batch.csr_ids.numpy() >= 0) & (batch.csr_ids.numpy() < VOCAB))


def raw_arguments(features, ids, combiner):
    """The inputs and attrs of TfeFeaturesToCsr (`lookup_arguments`: TfeFeaturesLookup's)."""
    return dict(
        ids=ids,
        row_info=[tf.constant(f["row_info"], tf.int64) for f in features],
        dense_shapes=[tf.constant(f["dense_shape"], tf.int64) for f in features],
        weights=[tf.constant(f["weights"], tf.float32) for f in features],
        input_kinds=[f["kind"] for f in features],
        has_weights=[f["has_weights"] for f in features],
        max_sequence_lengths=[f["msl"] for f in features],
        prune_invalid=[f["prune"] for f in features],
        feature_names=[f"f{i}" for i in range(len(features))],
        combiner=combiner, vocabulary_size=VOCAB, table_name="fuzz")


# The broken feature comes first so that no error in another feature hides it.
@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(data=st.data(), combiner=st.sampled_from(["sum", "mean", "sqrtn"] * 3 + ["max"]),
       extra_ids=st.sampled_from([0] * 10 + [1, -1]))
def test_features_to_csr_never_crashes(ops, kind, data, combiner, extra_ids):
    features = ([data.draw(feature(kind, broken=True))] +
                data.draw(st.lists(feature(), max_size=2)))
    ids = [tf.constant(f["ids"]) for f in features]
    if extra_ids > 0:
        ids.append(ids[0])
    elif extra_ids < 0 and len(ids) > 1:
        ids.pop()
    try:
        batch = ops.tfe_features_to_csr(**raw_arguments(features, ids, combiner))
    except tf.errors.InvalidArgumentError as error:
        assert "Table 'fuzz'" in error.message
        return
    check_batch(batch, features, combiner)


def lookup_arguments(tables_arguments, table):
    """TfeFeaturesLookup's arguments for tables of `tables_arguments` (each TfeFeaturesToCsr's
    arguments of one table's features), all read from the variable `table`."""
    table_attrs = {"table_name": "table_names", "combiner": "combiners",
                   "vocabulary_size": "vocabulary_sizes"}
    feature_keys = [key for key in tables_arguments[0] if key not in table_attrs]
    arguments = {key: [value for one in tables_arguments for value in one[key]]
                 for key in feature_keys}
    arguments.update({plural: [one[key] for one in tables_arguments]
                      for key, plural in table_attrs.items()})
    return dict(arguments, tables=[table.handle] * len(tables_arguments),
                table_feature_counts=[len(one["ids"]) for one in tables_arguments])


# The messages of the conversion's checks of its attrs (ParseFeatureSpecs).
ATTR_ERRORS = ("unknown input kind", "max_sequence_length must be >= 0",
               "but its input is dense")


def kernel_message(error: tf.errors.InvalidArgumentError) -> str:
    """The kernel's message, without the names of the op and its function around it."""
    return error.message.split("}} ")[-1].split(" [Op:")[0]


@pytest.fixture(scope="module")
def fuzz_table():
    return tf.Variable(np.random.default_rng(0).normal(size=[VOCAB, 3]).astype(np.float32))


# Sparse, ragged or dense features first, so that the direct path (pooled rank-2 sparse, ragged
# or dense features without weights, all of them) is reached often. Several tables read the same
# variable, which the op locks once.
@FUZZ
@given(data=st.data(), num_tables=st.integers(1, 3))
def test_features_lookup_is_conversion_then_lookup(ops, fuzz_table, data, num_tables):
    """TfeFeaturesLookup of several tables: the error of the first table whose TfeFeaturesToCsr
    fails, or each table's batch looked up, bit for bit."""
    direct_kinds = ["sparse", "ragged", "dense"]
    tables_arguments, batches, errors = [], [], []
    for t in range(num_tables):
        broken = data.draw(st.booleans())
        features = (
            [data.draw(feature(data.draw(st.sampled_from(direct_kinds)), broken=broken))] +
            data.draw(st.lists(feature(data.draw(st.sampled_from(direct_kinds * 2 + KINDS))),
                               max_size=2)))
        combiner = data.draw(st.sampled_from(["sum", "mean", "sqrtn"]))
        arguments = raw_arguments(features, [tf.constant(f["ids"]) for f in features], combiner)
        arguments["table_name"] = f"fuzz{t}"
        tables_arguments.append(arguments)
        try:
            batches.append(ops.tfe_features_to_csr(**arguments))
        except tf.errors.InvalidArgumentError as raised:
            errors.append(raised)
    # Bad attrs fail when the kernel is built, before any table's data is read.
    attr_errors = [e for e in errors if any(text in e.message for text in ATTR_ERRORS)]
    error = (attr_errors or errors or [None])[0]
    if error is not None:
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            ops.tfe_features_lookup(**lookup_arguments(tables_arguments, fuzz_table))
        assert kernel_message(raised.value) == kernel_message(error)
        return
    activations, row_counts = ops.tfe_features_lookup(
        **lookup_arguments(tables_arguments, fuzz_table))
    for batch, table_activations, table_row_counts in zip(batches, activations, row_counts):
        expected = ops.tfe_embedding_lookup(table=fuzz_table.handle, row_splits=batch.row_splits,
                                            ids=batch.csr_ids, gains=batch.gains)
        np.testing.assert_array_equal(table_activations.numpy(), expected.numpy())
        np.testing.assert_array_equal(table_row_counts.numpy(),
                                      batch.feature_row_counts.numpy())


@FUZZ
@given(ids=st.one_of(st.lists(st.one_of(st.integers(-2, 6), extreme), max_size=40),
                     st.lists(st.integers(0, 2**20), max_size=40)),
       num_shards=st.sampled_from([1, 2, 3, 4, 7, 0, -1, 2**31, 2**62]),
       matrix=st.booleans())
def test_dedup_never_crashes(ops, ids, num_shards, matrix):
    ids = np.array(ids, np.int64)
    shaped = ids.reshape([1, -1]) if matrix else ids
    try:
        unique, inverse, shard_splits = (
            t.numpy() for t in ops.tfe_csr_dedup(tf.constant(shaped), num_shards=num_shards))
    except tf.errors.InvalidArgumentError:
        return
    keys = [(u % num_shards, u) for u in unique.tolist()]
    assert keys == sorted(set(keys))
    np.testing.assert_array_equal(unique[inverse], ids)
    counts = np.bincount(unique % num_shards, minlength=num_shards)
    np.testing.assert_array_equal(shard_splits, np.concatenate([[0], np.cumsum(counts)]))
