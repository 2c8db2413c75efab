"""TfeEmbeddingLookup, TfeEmbeddingLookupDense, and TfeEmbeddingGradient against numpy and stock
TF. (TfeFeatureOutputs: test_feature_outputs_ops.py; the kernels' ISA variants:
test_lookup_ops_isa.py.)

CSR batches are built directly in numpy (docs/kernels.md, "The CSR batch"). References sum in
float32 in lookup order, the order the kernels promise, so most comparisons are tight.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from tf_embedding import _loader, ops
from tf_embedding.feature_inputs import feature_input

from helpers.references import csr, reference_lookup
from helpers.tables import random_table

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def lib():
    return _loader.load_ops()


def random_csr(rng, num_rows, vocab, max_per_row=5, empty_fraction=0.2):
    """Random batch with empty rows and (many) duplicate ids."""
    rows = []
    for _ in range(num_rows):
        count = 0 if rng.random() < empty_fraction else int(rng.integers(1, max_per_row + 1))
        rows.append([(int(rng.integers(0, vocab)), float(rng.normal())) for _ in range(count)])
    return csr(rows)


def reference_gradient(vocab, dim, batches):
    """Dense table gradient, summed in batch order then lookup order, and the touched ids."""
    grad = np.zeros([vocab, dim], np.float32)
    touched = set()
    for row_splits, ids, gains, activation_gradients in batches:
        for r in range(len(row_splits) - 1):
            for k in range(row_splits[r], row_splits[r + 1]):
                grad[ids[k]] += gains[k] * activation_gradients[r]
                touched.add(int(ids[k]))
    return grad, np.array(sorted(touched), np.int64)


def to_sparse(row_splits, ids, gains):
    """The batch as (sp_ids, sp_weights) for stock tf.nn.*embedding_lookup_sparse."""
    rows = np.repeat(np.arange(len(row_splits) - 1), np.diff(row_splits))
    positions = np.arange(len(ids)) - row_splits[rows]
    indices = np.stack([rows, positions], axis=1).astype(np.int64)
    shape = [len(row_splits) - 1, max(1, int(np.diff(row_splits).max(initial=0)))]
    return tf.SparseTensor(indices, ids, shape), tf.SparseTensor(indices, gains, shape)


# ---------------------------------------------------------------------------------------------
# Forward.


@pytest.mark.parametrize("dim", [1, 3, 8, 16, 32, 64, 128, 65])
def test_lookup_matches_numpy_for_every_dim_path(dim):
    rng = np.random.default_rng(dim)
    table = random_table(50, dim, seed=dim)
    batch = random_csr(rng, num_rows=40, vocab=50)
    expected = reference_lookup(table, *batch)
    variable = tf.Variable(table)
    np.testing.assert_allclose(ops.embedding_lookup(variable, *batch), expected, rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_allclose(ops.embedding_lookup_dense(table, *batch), expected, rtol=1e-6,
                               atol=1e-6)


def test_lookup_sums_duplicates_and_zeroes_empty_rows():
    table = np.arange(10, dtype=np.float32).reshape(5, 2)
    batch = csr([[(1, 1.0), (1, 2.0), (4, 0.5)], [], [(0, 3.0)], []])
    out = ops.embedding_lookup(tf.Variable(table), *batch)
    np.testing.assert_array_equal(out, [[10.0, 13.5], [0, 0], [0, 3.0], [0, 0]])


@pytest.mark.parametrize("rows", [[], [[], [], []]], ids=["no_rows", "only_empty_rows"])
def test_lookup_of_an_empty_batch(rows):
    out = ops.embedding_lookup(tf.Variable(random_table(4, 3)), *csr(rows))
    assert out.shape == (len(rows), 3)
    assert not np.any(out.numpy())


def test_lookup_matches_stock_safe_embedding_lookup_sparse():
    rng = np.random.default_rng(1)
    table = random_table(100, 8)
    row_splits, ids, gains = random_csr(rng, num_rows=64, vocab=100)
    sp_ids, sp_weights = to_sparse(row_splits, ids, gains)
    variable = tf.Variable(table)
    stock = tf.nn.safe_embedding_lookup_sparse(variable, sp_ids, sp_weights, combiner="sum")
    np.testing.assert_allclose(ops.embedding_lookup(variable, row_splits, ids, gains), stock,
                               rtol=1e-5, atol=1e-5)


def test_lookup_sees_updates_made_by_stock_ops():
    variable = tf.Variable(np.zeros([3, 2], np.float32))
    batch = csr([[(2, 1.0)]])
    variable.scatter_nd_update([[2]], [[5.0, 6.0]])  # sparse update: copy-on-read mode
    np.testing.assert_array_equal(ops.embedding_lookup(variable, *batch), [[5.0, 6.0]])
    variable.assign(np.ones([3, 2], np.float32))
    np.testing.assert_array_equal(ops.embedding_lookup(variable, *batch), [[1.0, 1.0]])


def test_lookup_in_tf_function_has_static_shape():
    variable = tf.Variable(random_table(6, 4))
    batch = csr([[(1, 1.0)], [(2, 1.0), (3, 1.0)]])

    @tf.function
    def lookup(row_splits, ids, gains):
        out = ops.embedding_lookup(variable, row_splits, ids, gains)
        assert out.shape.as_list() == [2, 4]
        return out

    np.testing.assert_allclose(lookup(*batch), reference_lookup(variable.numpy(), *batch),
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Gradient.


def test_gradient_tape_gives_indexed_slices_like_stock_tf():
    rng = np.random.default_rng(2)
    table = random_table(30, 4)
    row_splits, ids, gains = random_csr(rng, num_rows=20, vocab=30)
    upstream = rng.normal(size=[20, 4]).astype(np.float32)
    ours, stock = tf.Variable(table), tf.Variable(table)
    sp_ids, sp_weights = to_sparse(row_splits, ids, gains)
    with tf.GradientTape(persistent=True) as tape:
        loss_ours = tf.reduce_sum(ops.embedding_lookup(ours, row_splits, ids, gains) * upstream)
        loss_stock = tf.reduce_sum(
            tf.nn.safe_embedding_lookup_sparse(stock, sp_ids, sp_weights, combiner="sum")
            * upstream)
    grad = tape.gradient(loss_ours, ours)
    assert isinstance(grad, tf.IndexedSlices)
    assert grad.dense_shape.numpy().tolist() == [30, 4]
    expected, touched = reference_gradient(30, 4, [(row_splits, ids, gains, upstream)])
    np.testing.assert_array_equal(grad.indices, touched)
    np.testing.assert_array_equal(grad.values, expected[touched])
    np.testing.assert_allclose(tf.convert_to_tensor(grad),
                               tf.convert_to_tensor(tape.gradient(loss_stock, stock)),
                               rtol=1e-5, atol=1e-5)


def test_dense_lookup_gradient_is_indexed_slices():
    table = tf.constant(random_table(5, 3))
    batch = csr([[(4, 2.0), (1, 1.0)], [(4, 1.0)]])
    with tf.GradientTape() as tape:
        tape.watch(table)
        loss = tf.reduce_sum(ops.embedding_lookup_dense(table, *batch))
    grad = tape.gradient(loss, table)
    assert isinstance(grad, tf.IndexedSlices)
    np.testing.assert_array_equal(grad.indices, [1, 4])
    np.testing.assert_array_equal(grad.values, [[1.0] * 3, [3.0] * 3])
    assert grad.dense_shape.numpy().tolist() == [5, 3]


def test_gradient_in_tf_function():
    variable = tf.Variable(random_table(8, 2))
    batch = csr([[(7, 1.0), (7, 1.0)], [(0, -1.0)]])

    @tf.function
    def grad_fn():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(ops.embedding_lookup(variable, *batch))
        return tape.gradient(loss, variable)

    grad = grad_fn()
    np.testing.assert_array_equal(grad.indices, [0, 7])
    np.testing.assert_array_equal(grad.values, [[-1.0, -1.0], [2.0, 2.0]])


def test_embedding_gradient_over_n_batches_matches_numpy():
    rng = np.random.default_rng(3)
    vocab, dim = 40, 5
    batches = []
    for num_rows in (30, 0, 17):
        batch = random_csr(rng, num_rows, vocab)
        batches.append((*batch, rng.normal(size=[num_rows, dim]).astype(np.float32)))
    unique_ids, values = ops.embedding_gradient(batches, vocabulary_size=vocab)
    expected, touched = reference_gradient(vocab, dim, batches)
    np.testing.assert_array_equal(unique_ids, touched)
    # Same summation order as the reference: bit-identical.
    np.testing.assert_array_equal(values, expected[touched])


def test_embedding_gradient_of_no_lookups_is_empty():
    unique_ids, values = ops.embedding_gradient(
        [(*csr([[], []]), np.ones([2, 3], np.float32))])
    assert unique_ids.shape == (0,) and values.shape == (0, 3)


def test_embedding_gradient_with_large_vocabulary_ids():
    ids = [2**40 + 5, 3, 2**40 + 5, 2**33]
    batch = csr([[(i, 1.0)] for i in ids])
    unique_ids, values = ops.embedding_gradient(
        [(*batch, np.arange(4, dtype=np.float32).reshape(4, 1))])
    np.testing.assert_array_equal(unique_ids, [3, 2**33, 2**40 + 5])
    np.testing.assert_array_equal(values, [[1.0], [3.0], [2.0]])


def test_embedding_gradient_rejects_ids_too_large_to_sort():
    batch = csr([[(2**62, 1.0)]] * 5)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table 'video': 5 lookups with ids up to 4611686018427387904 do "
                             "not fit the 64-bit sort key"):
        ops.embedding_gradient([(*batch, np.ones([5, 1], np.float32))], table_name="video")


def test_keras_sgd_applies_our_indexed_slices():
    import keras  # pylint: disable=import-outside-toplevel

    table = random_table(10, 3)
    variable = tf.Variable(table)
    batch = csr([[(2, 1.0), (9, 0.5)], [(2, 2.0)]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(ops.embedding_lookup(variable, *batch))
    grad = tape.gradient(loss, variable)
    keras.optimizers.SGD(learning_rate=0.5).apply_gradients([(grad, variable)])
    expected = table.copy()
    expected[2] -= np.float32(0.5) * np.float32(3.0)
    expected[9] -= np.float32(0.5) * np.float32(0.5)
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Validation: every check raises InvalidArgumentError naming the table.

VALID = csr([[(0, 1.0), (2, 1.0)], [(1, 1.0)]])


def _replace(batch, **changes):
    fields = dict(zip(("row_splits", "ids", "gains"), batch))
    fields.update(changes)
    return fields["row_splits"], fields["ids"], fields["gains"]


BAD_BATCHES = [
    ("row_splits_not_vector", _replace(VALID, row_splits=np.zeros([2, 2], np.int64)),
     r"row_splits must be a vector, got shape \[2,2\]"),
    ("ids_not_vector", _replace(VALID, ids=np.zeros([3, 1], np.int64)),
     r"ids must be a vector, got shape \[3,1\]"),
    ("gains_not_vector", _replace(VALID, gains=np.float32(1.0)),
     r"gains must be a vector, got shape \[\]"),
    ("row_splits_empty", _replace(VALID, row_splits=np.zeros([0], np.int64)),
     "row_splits must have at least one element"),
    ("row_splits_not_from_zero", _replace(VALID, row_splits=np.array([1, 2, 3], np.int64)),
     r"row_splits\[0\] must be 0, got 1"),
    ("row_splits_decreasing", _replace(VALID, row_splits=np.array([0, 3, 2, 3], np.int64)),
     r"row_splits must be non-decreasing, but row_splits\[2\] = 2 < row_splits\[1\] = 3"),
    ("row_splits_short", _replace(VALID, row_splits=np.array([0, 2], np.int64)),
     r"row_splits\[1\] = 2 must equal the number of ids, 3"),
    ("row_splits_long", _replace(VALID, row_splits=np.array([0, 2, 4], np.int64)),
     r"row_splits\[2\] = 4 must equal the number of ids, 3"),
    ("gains_length", _replace(VALID, gains=np.ones([2], np.float32)),
     "gains has 2 elements but ids has 3"),
    ("id_too_large", _replace(VALID, ids=np.array([0, 5, 1], np.int64)),
     r"id 5 at ids\[1\] is out of range for vocabulary size 4"),
    ("id_negative", _replace(VALID, ids=np.array([0, 1, -1], np.int64)),
     r"id -1 at ids\[2\] is out of range for vocabulary size 4"),
]


@pytest.mark.parametrize("batch,message", [case[1:] for case in BAD_BATCHES],
                         ids=[case[0] for case in BAD_BATCHES])
@pytest.mark.parametrize("dense", [False, True], ids=["variable", "dense"])
def test_lookup_rejects_malformed_batch(batch, message, dense):
    table = random_table(4, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        if dense:
            ops.embedding_lookup_dense(table, *batch, table_name="video")
        else:
            ops.embedding_lookup(tf.Variable(table, name="video"), *batch)


# XLA compiles for shapes, not values: its kernels reject malformed shapes when they compile,
# with the TF kernels' messages (value faults get the defined meaning of docs/xla.md instead).
# (A row_splits that is no vector, or empty, fails the op's shape function while tracing.)
SHAPE_FAULTS = ("ids_not_vector", "gains_not_vector", "gains_length")


@pytest.mark.parametrize("batch,message", [case[1:] for case in BAD_BATCHES
                                           if case[0] in SHAPE_FAULTS],
                         ids=[case[0] for case in BAD_BATCHES if case[0] in SHAPE_FAULTS])
def test_xla_lookup_rejects_malformed_shapes(batch, message):
    table = tf.Variable(random_table(4, 2), name="video")
    lookup = tf.function(lambda *batch: ops.embedding_lookup(table, *batch), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        lookup(*batch)


# The values are checked when the compiled step runs, by the TF kernel's code (the CPU custom
# call), with its messages. Not "row_splits_short": inside XLA, ids past the last row are the
# padding of a converted batch (docs/xla.md, "Limits").
VALUE_FAULTS = ("row_splits_not_from_zero", "row_splits_decreasing", "row_splits_long",
                "id_too_large", "id_negative")


@pytest.mark.parametrize("batch,message", [case[1:] for case in BAD_BATCHES
                                           if case[0] in VALUE_FAULTS],
                         ids=[case[0] for case in BAD_BATCHES if case[0] in VALUE_FAULTS])
@pytest.mark.parametrize("dense", [False, True], ids=["variable", "dense"])
def test_xla_lookup_rejects_malformed_values_when_it_runs(batch, message, dense):
    table = random_table(4, 2)
    if dense:
        lookup = tf.function(
            lambda *batch: ops.embedding_lookup_dense(table, *batch, table_name="video"),
            jit_compile=True)
    else:
        variable = tf.Variable(table, name="video")
        lookup = tf.function(lambda *batch: ops.embedding_lookup(variable, *batch),
                             jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        lookup(*batch)


def test_xla_lookup_skips_the_padding_after_the_last_row():
    table = tf.Variable(random_table(4, 2), name="video")
    lookup = tf.function(lambda *batch: ops.embedding_lookup(table, *batch), jit_compile=True)
    row_splits, ids, gains = (np.array([0, 1, 2], np.int64), np.array([1, 2, 0, 3], np.int64),
                              np.ones([4], np.float32))
    expected = table.numpy()[[1, 2]]
    np.testing.assert_array_equal(lookup(row_splits, ids, gains).numpy(), expected)


BAD_TABLE_VARIABLES = [
    (np.zeros([4], np.float32), r"Table 'video': table variable must be a matrix, got shape \[4\]"),
    (np.zeros([4, 2], np.int32), "Table 'video': table variable must hold float32, got int32"),
]


# Under XLA too: the kernel checks the variable's dtype and rank when it compiles.
@pytest.mark.parametrize("jit_compile", [False, True], ids=["tf", "xla"])
@pytest.mark.parametrize("value,message", BAD_TABLE_VARIABLES)
def test_lookup_rejects_bad_table_variable(value, message, jit_compile):
    table = tf.Variable(value, name="video")
    lookup = tf.function(lambda *batch: ops.embedding_lookup(table, *batch),
                         jit_compile=jit_compile)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        lookup(*VALID)


def test_lookup_rejects_uninitialized_variable():
    variable = resource_variable_ops.UninitializedVariable(shape=[4, 2], dtype=tf.float32,
                                                           name="video")
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="Table 'video': table variable is not initialized"):
        ops.embedding_lookup(variable, *VALID)


# TfeFeaturesLookup checks its table as the lookup does, and that it holds the vocabulary its
# ids are checked against.
@pytest.mark.parametrize("value,message", BAD_TABLE_VARIABLES + [
    (np.zeros([3, 2], np.float32), "Table 'video': the table has 3 rows but vocabulary_size is 4"),
])
def test_features_lookup_rejects_bad_table_variable(value, message):
    table = tf.Variable(value, name="video")
    feature = feature_input.FeatureInput(
        "f", tf.SparseTensor([[0, 0]], tf.constant([1], tf.int64), [1, 1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.features_lookup([ops.LookedUpTable(table, "video", 4, "sum")], [[feature]])


def _features_lookup_of_two_features(**table_attrs):
    """TfeFeaturesLookup of two sparse features of table 'video' with `table_attrs`."""
    table = tf.Variable(np.zeros([4, 2], np.float32))
    feature = tf.SparseTensor([[0, 0]], tf.constant([1], tf.int64), [1, 1])
    attrs = dict(table_names=["video"], combiners=["sum"], vocabulary_sizes=[4],
                 table_feature_counts=[2])
    attrs.update(table_attrs)
    return _loader.load_ops().tfe_features_lookup(
        tables=[table.handle], ids=[feature.values] * 2, row_info=[feature.indices] * 2,
        dense_shapes=[feature.dense_shape] * 2, weights=[tf.zeros([0])] * 2,
        input_kinds=["sparse"] * 2, has_weights=[False] * 2, max_sequence_lengths=[0] * 2,
        prune_invalid=[False] * 2, feature_names=["a", "b"], **attrs)


# The op's table attrs must describe its tables and features (the Python wrapper builds them).
@pytest.mark.parametrize("table_attrs, message", [
    (dict(table_names=["video", "user"]), "attr table_names has 2 entries but there are 1 tables"),
    (dict(table_feature_counts=[3]),
     "Table 'video': table_feature_counts gives it 3 features from feature 0 of 2"),
    (dict(table_feature_counts=[1]), "table_feature_counts sum to 1 but there are 2 features"),
])
def test_features_lookup_rejects_table_attrs_that_do_not_fit(table_attrs, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        _features_lookup_of_two_features(**table_attrs)


def test_dense_lookup_rejects_non_matrix_table():
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'video': table must be a matrix, got shape \[4,2,1\]"):
        ops.embedding_lookup_dense(np.zeros([4, 2, 1], np.float32), *VALID, table_name="video")


GRADIENTS = np.ones([2, 3], np.float32)


# (name, batches, vocabulary_size, message)
GRADIENT_FAULTS = [
    ("grads_rank", [(*VALID, np.ones([3], np.float32))], -1,
     r"batch 0: activation_gradients must be a matrix, got shape \[3\]"),
    ("grads_rows", [(*VALID, np.ones([3, 3], np.float32))], -1,
     r"batch 0: activation_gradients has shape \[3,3\] but must be \[2,3\]"),
    ("grads_dim_mismatch", [(*VALID, GRADIENTS), (*VALID, np.ones([2, 4], np.float32))], -1,
     r"batch 1: activation_gradients has shape \[2,4\] but must be \[2,3\]"),
    ("row_splits", [(*VALID, GRADIENTS),
                    (*_replace(VALID, row_splits=np.array([0, 1, 2], np.int64)), GRADIENTS)], -1,
     r"batch 1: row_splits\[2\] = 2 must equal the number of ids, 3"),
    ("negative_id", [(*VALID, GRADIENTS), (*_replace(VALID, ids=np.array([0, -7, 1], np.int64)),
                                           GRADIENTS)],
     -1, r"batch 1: id -7 at ids\[1\] is negative"),
    ("id_above_vocabulary", [(*VALID, GRADIENTS),
                             (*_replace(VALID, ids=np.array([0, 9, 9], np.int64)), GRADIENTS)],
     4, r"batch 1: id 9 at ids\[1\] is out of range for vocabulary size 4"),
    ("gains_length", [(*_replace(VALID, gains=np.ones([1], np.float32)), GRADIENTS)], -1,
     "batch 0: gains has 1 elements but ids has 3"),
]


@pytest.mark.parametrize("batches,vocabulary_size,message",
                         [case[1:] for case in GRADIENT_FAULTS],
                         ids=[case[0] for case in GRADIENT_FAULTS])
def test_embedding_gradient_rejects_malformed_batches(batches, vocabulary_size, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        ops.embedding_gradient(batches, vocabulary_size=vocabulary_size, table_name="video")


# Under XLA the shape faults are rejected when the kernel compiles, with the same messages.
GRADIENT_SHAPE_FAULTS = ("grads_rank", "grads_rows", "grads_dim_mismatch", "gains_length")


@pytest.mark.parametrize("batches,message",
                         [(case[1], case[3]) for case in GRADIENT_FAULTS
                          if case[0] in GRADIENT_SHAPE_FAULTS],
                         ids=[case[0] for case in GRADIENT_FAULTS
                              if case[0] in GRADIENT_SHAPE_FAULTS])
def test_xla_embedding_gradient_rejects_malformed_shapes(batches, message):
    gradient = tf.function(
        lambda batches: ops.embedding_gradient(batches, vocabulary_size=4, table_name="video"),
        jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        gradient(batches)


def test_n_list_lengths_must_agree(lib):
    def mismatched():
        return lib.tfe_embedding_gradient(row_splits=[VALID[0]] * 2, ids=[VALID[1]],
                                          gains=[VALID[2]], activation_gradients=[GRADIENTS])

    with pytest.raises(tf.errors.InvalidArgumentError, match="do not match 5 inputs"):
        mismatched()
    with pytest.raises(ValueError, match="must match length"):
        tf.function(mismatched).get_concrete_function()
    with pytest.raises(ValueError, match="at least one"):
        ops.embedding_gradient([])
