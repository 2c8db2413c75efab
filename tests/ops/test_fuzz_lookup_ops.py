"""Malformed inputs thrown at TfeEmbeddingLookup(Dense), TfeEmbeddingGradient, TfeFeatureOutputs
and the TfeSparseApply* ops.

The only acceptable outcomes are a result or InvalidArgumentError: no crash, no other error, no
out-of-bounds access (tools/asan_fuzz.sh runs this file against an AddressSanitizer build).
Inputs start from a well-formed CSR batch and are then broken in one of several ways, so that
both the checks and the code behind them get exercised.
"""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tf_embedding import _loader
from tf_embedding import optimizers as opt

from helpers.fuzz_settings import fuzz_settings
from helpers.references import reference_lookup

pytestmark = pytest.mark.unit


INT64_MAX = 2**63 - 1
INT64_MIN = -2**63
FUZZ = fuzz_settings(70)

small = st.integers(-2, 8)
extreme = st.sampled_from([INT64_MIN, -2**40, -1, 2**31, 2**40, 2**62, INT64_MAX])
values = st.one_of(small, small, small, extreme)
MUTATIONS = ("none", "none", "row_split", "drop_split", "add_split", "id", "gains_length",
             "ids_rank", "row_splits_rank", "gains_rank")


@pytest.fixture(scope="module")
def lib():
    return _loader.load_ops()


@st.composite
def batches(draw, vocab=6):
    """(row_splits, ids, gains), well formed for `vocab` unless a mutation breaks it."""
    rows = draw(st.lists(st.lists(st.integers(0, vocab - 1), max_size=4), max_size=5))
    row_splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    ids = np.array([i for r in rows for i in r], np.int64)
    gains = np.array(draw(st.lists(st.floats(-2, 2, width=32), min_size=len(ids),
                                   max_size=len(ids))), np.float32)
    mutation = draw(st.sampled_from(MUTATIONS))
    if mutation == "row_split":
        row_splits[draw(st.integers(0, len(row_splits) - 1))] = draw(values)
    elif mutation == "drop_split":
        row_splits = row_splits[:-1]
    elif mutation == "add_split":
        row_splits = np.append(row_splits, np.int64(draw(values)))
    elif mutation == "id" and len(ids):
        ids[draw(st.integers(0, len(ids) - 1))] = draw(values)
    elif mutation == "gains_length":
        gains = np.resize(gains, draw(st.integers(0, len(gains) + 2)))
    elif mutation == "ids_rank":
        ids = ids.reshape([1, -1])
    elif mutation == "row_splits_rank":
        row_splits = row_splits.reshape([-1, 1])
    elif mutation == "gains_rank":
        gains = np.float32(1.0)
    return row_splits, ids, gains


def gradient_rows(batch):
    """Rows an activation gradient needs for `batch` (0 when row_splits is broken)."""
    return max(batch[0].size - 1, 0)


@st.composite
def gradient_batches(draw, dim):
    """N in [1, 3] batches with activation gradients, sometimes of the wrong shape."""
    result = []
    for _ in range(draw(st.integers(1, 3))):
        batch = draw(batches())
        shape = [gradient_rows(batch), dim]
        kind = draw(st.sampled_from(["ok", "ok", "ok", "rows", "dim", "rank"]))
        if kind == "rows":
            shape[0] += draw(st.sampled_from([-1, 1]))
        elif kind == "dim":
            shape[1] += 1
        elif kind == "rank":
            shape = shape[:1]
        result.append((*batch, np.ones([max(n, 0) for n in shape], np.float32)))
    return result


def expect_result_or_invalid_argument(fn):
    try:
        return fn()
    except tf.errors.InvalidArgumentError:
        return None


@FUZZ
@given(batch=batches(), vocab=st.integers(0, 8), dim=st.integers(0, 4),
       table_kind=st.sampled_from(["variable", "variable", "dense", "int_variable", "rank1",
                                   "rank3_dense"]))
def test_lookup(lib, batch, vocab, dim, table_kind):
    table = np.random.default_rng(0).normal(size=[vocab, dim]).astype(np.float32)
    if table_kind == "dense":
        out = expect_result_or_invalid_argument(
            lambda: lib.tfe_embedding_lookup_dense(table, *batch))
    elif table_kind == "rank3_dense":
        out = expect_result_or_invalid_argument(
            lambda: lib.tfe_embedding_lookup_dense(table[..., None], *batch))
    else:
        value = {"variable": table, "int_variable": table.astype(np.int32),
                 "rank1": table.reshape([-1])}[table_kind]
        variable = tf.Variable(value)
        out = expect_result_or_invalid_argument(
            lambda: lib.tfe_embedding_lookup(variable.handle, *batch))
    if out is not None:
        np.testing.assert_allclose(out, reference_lookup(table, *batch), rtol=1e-5, atol=1e-5)


@FUZZ
@given(dim=st.integers(1, 3),
       shapes=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=3), min_size=1,
                       max_size=3),
       partial=st.booleans(), data=st.data(),
       mutation=st.sampled_from(["none", "none", "count", "drop_count", "add_count", "rows",
                                 "rank1", "rank3"]))
def test_feature_outputs(lib, dim, shapes, partial, data, mutation):
    """Row counts that fit the output shapes (each feature's rows in its shape), or broken in
    one way (InvalidArgumentError, or a result that still fits)."""
    output_shapes = [shape + [dim] for shape in shapes]
    sample_rows = [int(np.prod(shape[1:])) for shape in shapes]
    samples = [data.draw(st.integers(0, shape[0])) if partial else shape[0] for shape in shapes]
    counts = [n * rows for n, rows in zip(samples, sample_rows)]
    rows = sum(counts)
    if mutation == "count":
        counts[data.draw(st.integers(0, len(counts) - 1))] = data.draw(values)
    elif mutation == "drop_count":
        counts = counts[:-1]
    elif mutation == "add_count":
        counts.append(data.draw(values))
    elif mutation == "rows":
        rows = data.draw(st.integers(0, 12))
    activations = np.arange(rows * dim, dtype=np.float32).reshape([rows, dim])
    activations = {"rank1": activations.reshape([-1]),
                   "rank3": activations[..., None]}.get(mutation, activations)
    outputs = expect_result_or_invalid_argument(lambda: lib.tfe_feature_outputs(
        activations=activations, feature_row_counts=np.array(counts, np.int64),
        N=len(output_shapes), output_shapes=output_shapes, partial=partial, message="No fit.",
        table_name="t"))
    if mutation == "none":
        assert outputs is not None
    if outputs is None:
        return
    assert activations.ndim == 2 and len(counts) == len(shapes) and sum(counts) == rows
    first = 0
    for output, count, shape in zip(outputs, counts, output_shapes):
        assert list(output.shape[1:]) == shape[1:]
        assert output.shape[0] <= shape[0] if partial else output.shape[0] == shape[0]
        np.testing.assert_array_equal(np.reshape(output, [-1, dim]),
                                      activations[first:first + count])
        first += count


@FUZZ
@given(dim=st.integers(0, 3), data=st.data(), vocabulary_size=st.one_of(st.integers(-1, 8),
                                                                         extreme))
def test_gradient(lib, dim, data, vocabulary_size):
    row_splits, ids, gains, grads = zip(*data.draw(gradient_batches(dim)))
    result = expect_result_or_invalid_argument(lambda: lib.tfe_embedding_gradient(
        row_splits=list(row_splits), ids=list(ids), gains=list(gains),
        activation_gradients=list(grads), vocabulary_size=vocabulary_size))
    if result is not None:
        unique_ids, values = result
        assert np.all(np.diff(unique_ids.numpy()) > 0)
        assert values.shape == (unique_ids.shape[0], grads[0].shape[1])


# The optimizer classes name their ops and slots; the attrs are the ones set besides defaults.
OPTIMIZERS = {
    "sgd": (opt.SGD, {}),
    "adagrad": (opt.Adagrad, {}),
    "adagrad_momentum": (opt.AdagradMomentum,
                         {"momentum": 0.9, "use_nesterov": True, "beta2": 0.9}),
    "adam": (opt.Adam, {}),
    "adam_non_lazy": (opt.Adam, {"lazy_adam": False}),
    "ftrl": (opt.FTRL, {"l1_regularization_strength": 0.1}),
}


@FUZZ
@given(optimizer=st.sampled_from(sorted(OPTIMIZERS)), vocab=st.integers(0, 8),
       dim=st.integers(0, 3), data=st.data(),
       slot_kind=st.sampled_from(["ok", "ok", "ok", "shape", "dtype", "table_again"]),
       lr=st.sampled_from([0.1, 0.1, 0.1, float("nan"), float("inf"), [0.1, 0.2]]))
def test_sparse_apply(lib, optimizer, vocab, dim, data, slot_kind, lr):
    cls, attrs = OPTIMIZERS[optimizer]
    op_name, slot_names = cls.description.op, cls.description.slot_names
    table = tf.Variable(np.zeros([vocab, dim], np.float32))
    slots = {name: tf.Variable(np.full([vocab, dim], 0.1, np.float32)) for name in slot_names}
    if slot_names and slot_kind == "shape":
        slots[slot_names[-1]] = tf.Variable(np.zeros([vocab + 1, dim], np.float32))
    elif slot_names and slot_kind == "dtype":
        slots[slot_names[0]] = tf.Variable(np.zeros([vocab, dim], np.int32))
    elif slot_names and slot_kind == "table_again":
        slots[slot_names[0]] = table
    row_splits, ids, gains, grads = zip(*data.draw(gradient_batches(dim)))
    expect_result_or_invalid_argument(lambda: getattr(lib, op_name)(
        table=table.handle, **{name: var.handle for name, var in slots.items()},
        row_splits=list(row_splits), ids=list(ids), gains=list(gains),
        activation_gradients=list(grads), learning_rate=np.array(lr, np.float32), **attrs))
