"""TfeFeaturesToCsr and tf_embedding.ops against numpy and stock TensorFlow.

The CSR batch is checked two ways: against an independent plain-Python rendering of the row
layout and gains rules (docs/kernels.md; `reference_csr` in references.py), and, through
`activation = segment-sum(gain * table[id])`, against stock TF's CPU lookups
(tf.nn.safe_embedding_lookup_sparse, tf.nn.embedding_lookup_sparse,
tf.tpu.experimental.embedding.serving_embedding_lookup).
"""

import math
import re

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import _loader
from tf_embedding.feature_inputs import feature_input
from tf_embedding.ops import features_to_csr
from tf_embedding.feature_inputs.feature_input import FeatureInput

from helpers.references import RawFeature, reference_csr
from helpers.tables import random_table

pytestmark = pytest.mark.unit


VOCAB = 10
DIM = 3
COMBINERS = ("sum", "mean", "sqrtn")
TPU_EMBEDDING = tf.tpu.experimental.embedding


@pytest.fixture(scope="module")
def ops():
    return _loader.load_ops()


# ---------------------------------------------------------------------------------------------
# The independent reference (references.py) applied to FeatureInputs.


def raw_feature(feature):
    tensor, weight = feature.tensor, feature.weight
    empty = np.zeros([0], np.int64)
    if isinstance(tensor, tf.SparseTensor):
        arrays = ("sparse", tensor.values, tensor.indices, tensor.dense_shape)
        weight = None if weight is None else weight.values
    elif isinstance(tensor, tf.RaggedTensor):
        arrays = ("ragged", tensor.flat_values, tensor.row_splits, empty)
        weight = None if weight is None else weight.flat_values
    else:
        arrays = ("dense", tensor, empty, empty)
    kind, ids, row_info, dense_shape = arrays
    return RawFeature(kind, np.asarray(ids), np.asarray(row_info), np.asarray(dense_shape),
                      None if weight is None else np.asarray(weight, np.float32),
                      feature.max_sequence_length, feature.prune_invalid)


def csr_activations(batch, table):
    """activation[r] = sum(gain * table[id]) over row r's lookups, in numpy."""
    row_splits = batch.row_splits.numpy()
    rows = np.repeat(np.arange(len(row_splits) - 1), np.diff(row_splits))
    out = np.zeros([len(row_splits) - 1, table.shape[1]], np.float32)
    np.add.at(out, rows, batch.gains.numpy()[:, None] * table[batch.ids.numpy()])
    return out


def assert_matches_reference(batch, features, combiner):
    row_splits, ids, gains, counts = reference_csr([raw_feature(f) for f in features], combiner)
    np.testing.assert_array_equal(batch.row_splits.numpy(), row_splits)
    np.testing.assert_array_equal(batch.ids.numpy(), ids)
    np.testing.assert_allclose(batch.gains.numpy(), gains, rtol=1e-6)
    np.testing.assert_array_equal(batch.feature_row_counts.numpy(), counts)


def convert(features, combiner, vocab=VOCAB, table_name="table"):
    return features_to_csr(table_name, vocab, combiner, features)


def split(batch, features, table):
    acts = tf.constant(csr_activations(batch, table))
    return feature_input.split_activations(acts, batch.feature_row_counts, features, table.shape[1])


# ---------------------------------------------------------------------------------------------
# Stock TF oracles.


def serving_lookup(feature, table, combiner):
    table_config = TPU_EMBEDDING.TableConfig(vocabulary_size=table.shape[0], dim=table.shape[1],
                                             combiner=combiner, name="table")
    feature_config = TPU_EMBEDDING.FeatureConfig(
        table=table_config, max_sequence_length=feature.max_sequence_length,
        name=feature.name)
    weights = None if feature.weight is None else {"f": feature.weight}
    return TPU_EMBEDDING.serving_embedding_lookup(
        {"f": feature.tensor}, weights, {table_config: tf.Variable(table)},
        {"f": feature_config})["f"].numpy()


def stock_lookup(feature, table, combiner):
    """Stock TF's CPU result for a feature, as serving_embedding_lookup would compute it."""
    tensor = feature.tensor
    sequence = feature.max_sequence_length > 0
    if not isinstance(tensor, tf.SparseTensor) or sequence:
        return serving_lookup(feature, table, combiner)
    if feature.prune_invalid:
        return tf.nn.safe_embedding_lookup_sparse(
            tf.constant(table), tensor, feature.weight, combiner=combiner).numpy()
    # embedding_lookup_sparse drops trailing empty rows: pad them back with zeros.
    pooled = tf.nn.embedding_lookup_sparse(
        tf.constant(table), tensor, feature.weight, combiner=combiner).numpy()
    rows = int(tensor.dense_shape[0])
    return np.concatenate([pooled, np.zeros([rows - len(pooled), table.shape[1]], np.float32)])


# ---------------------------------------------------------------------------------------------
# Random features of every kind.


def _random_rows(rng, batch, max_len=4):
    """Row lengths with empty rows, and ids with duplicates inside and across rows."""
    lengths = rng.integers(0, max_len + 1, size=batch)
    lengths[0] = 0  # always one empty row
    ids = rng.integers(0, VOCAB // 2, size=int(lengths.sum()))
    return lengths, ids


def make_feature(kind, rng, id_dtype=np.int64, weighted=False, prune=False, msl=0, batch=5):
    """A random FeatureInput of `kind` (dense, sparse, sparse3, ragged) over `batch` samples;
    with `prune`, some ids are -1."""
    lengths, ids = _random_rows(rng, batch)
    if prune and ids.size:
        ids[rng.integers(0, ids.size, size=2)] = -1
    ids = ids.astype(id_dtype)
    weights = rng.uniform(0.5, 2.0, size=ids.size).astype(np.float32)
    name = f"{kind}_feature"
    if kind == "dense":
        dense = rng.integers(0, VOCAB, size=[batch, 2]).astype(id_dtype)
        weight = rng.uniform(0.5, 2.0, size=[batch, 2]).astype(np.float32)
        return FeatureInput(name, tf.constant(dense), tf.constant(weight) if weighted else None,
                            msl, prune)
    if kind == "ragged":
        tensor = tf.RaggedTensor.from_row_lengths(ids, lengths)
        weight = tf.RaggedTensor.from_row_lengths(weights, lengths) if weighted else None
        return FeatureInput(name, tensor, weight, msl, prune)
    if kind == "sparse":
        indices = [[b, p] for b, n in enumerate(lengths) for p in range(n)]
        shape = [batch, max(int(lengths.max()), 1)]
    else:  # rank-3 sparse: [batch, 3, last]
        indices = [[b, p % 3, p // 3] for b, n in enumerate(lengths) for p in range(n)]
        shape = [batch, 3, 2]
    indices = np.array(indices, np.int64).reshape([-1, len(shape)])
    tensor = tf.SparseTensor(indices, ids, shape)
    weight = tf.SparseTensor(indices, weights, shape) if weighted else None
    return FeatureInput(name, tensor, weight, msl, prune)


# ---------------------------------------------------------------------------------------------
# Semantics.


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind, prune", [("dense", False), ("sparse", False), ("sparse", True),
                                         ("sparse3", True), ("ragged", False)])
def test_pooled_matches_reference_and_stock(kind, prune, weighted, id_dtype, combiner):
    rng = np.random.default_rng(hash((kind, prune, weighted, combiner)) % 2**32)
    feature = make_feature(kind, rng, id_dtype, weighted, prune)
    batch = convert([feature], combiner)
    assert_matches_reference(batch, [feature], combiner)
    if kind == "dense" and weighted:
        return  # stock TF rejects weights on dense inputs
    table = random_table(VOCAB, DIM)
    (activations,) = split(batch, [feature], table)
    np.testing.assert_allclose(activations, stock_lookup(feature, table, combiner),
                               rtol=1e-5, atol=1e-6)


# Section 3 of the API reference: table row i = [i + 1, i + 1]; rows [0, 1], [], [3].
SECTION3_TABLE = np.repeat(np.arange(1, 5, dtype=np.float32)[:, None], 2, axis=1)
SECTION3 = {
    ("sum", False): [[3, 3], [0, 0], [4, 4]],
    ("mean", False): [[1.5, 1.5], [0, 0], [4, 4]],
    ("sqrtn", False): [[2.1213203, 2.1213203], [0, 0], [4, 4]],
    ("sum", True): [[4, 4], [0, 0], [2, 2]],
    ("mean", True): [[1.3333334, 1.3333334], [0, 0], [4, 4]],
    ("sqrtn", True): [[1.7888544, 1.7888544], [0, 0], [4, 4]],
}


@pytest.mark.parametrize("combiner, weighted", sorted(SECTION3))
@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_section3_numbers(kind, combiner, weighted):
    ids, weights, lengths = [0, 1, 3], [2.0, 1.0, 0.5], [2, 0, 1]
    if kind == "ragged":
        tensor = tf.ragged.constant([[0, 1], [], [3]], tf.int64)
        weight = tf.ragged.constant([[2.0, 1.0], [], [0.5]]) if weighted else None
    else:
        indices = [[0, 0], [0, 1], [2, 0]]
        tensor = tf.SparseTensor(indices, tf.constant(ids, tf.int64), [3, 2])
        weight = tf.SparseTensor(indices, weights, [3, 2]) if weighted else None
    feature = FeatureInput("f", tensor, weight, prune_invalid=kind == "sparse")
    batch = convert([feature], combiner, vocab=4)
    np.testing.assert_array_equal(batch.row_splits, np.cumsum([0] + lengths))
    (activations,) = split(batch, [feature], SECTION3_TABLE)
    np.testing.assert_allclose(activations, SECTION3[combiner, weighted], rtol=1e-6)


@pytest.mark.parametrize("combiner, prune, expected", [
    ("mean", True, [[1, 1]]),           # weight -1 pruned
    ("mean", False, [[0, 0]]),          # sum of weights 0 -> gains 0
    ("sqrtn", True, [[1, 1]]),
    ("sqrtn", False, [[-0.70710677, -0.70710677]]),
    ("sum", True, [[-1, -1]]),          # sum keeps non-positive weights: 1 * 1 - 1 * 2
    ("sum", False, [[-1, -1]]),
])
def test_section3_weight_pruning(combiner, prune, expected):
    indices = [[0, 0], [0, 1]]
    feature = FeatureInput("f", tf.SparseTensor(indices, tf.constant([0, 1], tf.int64), [1, 2]),
                           tf.SparseTensor(indices, [1.0, -1.0], [1, 2]), prune_invalid=prune)
    batch = convert([feature], combiner, vocab=4)
    (activations,) = split(batch, [feature], SECTION3_TABLE)
    np.testing.assert_allclose(activations, expected, rtol=1e-6)
    assert_matches_reference(batch, [feature], combiner)
    if prune:
        np.testing.assert_allclose(activations, stock_lookup(feature, SECTION3_TABLE, combiner))


def test_negative_ids_are_pruned():
    tensor = tf.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 0]],
                             tf.constant([-1, 2, -5, 3], tf.int64), [3, 2])
    feature = FeatureInput("f", tensor, prune_invalid=True)
    batch = convert([feature], "mean")
    np.testing.assert_array_equal(batch.row_splits, [0, 1, 1, 2])
    np.testing.assert_array_equal(batch.ids, [2, 3])
    np.testing.assert_array_equal(batch.gains, [1, 1])
    table = random_table(VOCAB, DIM)
    np.testing.assert_allclose(split(batch, [feature], table)[0],
                               stock_lookup(feature, table, "mean"), rtol=1e-6)


def test_section3_sequence_numbers():
    tensor = tf.SparseTensor([[0, 0], [0, 1], [0, 2], [1, 0]],
                             tf.constant([0, 1, 2, 3], tf.int64), [2, 3])
    feature = FeatureInput("f", tensor, max_sequence_length=2)
    batch = convert([feature], "mean", vocab=4)
    (activations,) = split(batch, [feature], SECTION3_TABLE)
    np.testing.assert_array_equal(activations, [[[1, 1], [2, 2]], [[4, 4], [0, 0]]])


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("msl", [2, 6])  # truncates / pads the longest row (4)
@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_sequence_features_match_stock(kind, msl, combiner):
    rng = np.random.default_rng(msl)
    feature = make_feature(kind, rng, msl=msl)
    batch = convert([feature], combiner)
    assert_matches_reference(batch, [feature], combiner)
    assert batch.feature_row_counts.numpy()[0] == 5 * msl
    np.testing.assert_array_equal(batch.gains, np.ones_like(batch.gains))
    table = random_table(VOCAB, DIM)
    (activations,) = split(batch, [feature], table)
    np.testing.assert_allclose(activations, stock_lookup(feature, table, combiner), rtol=1e-6)


def test_sequence_rows_sum_duplicate_positions_and_keep_weights():
    # Two lookups at (0, 1): scatter_nd semantics add them; a sequence row gets no combiner.
    indices = [[0, 1], [0, 1], [1, 0]]
    feature = FeatureInput(
        "f", tf.SparseTensor(indices, tf.constant([1, 2, 3], tf.int64), [2, 2]),
        tf.SparseTensor(indices, [2.0, 3.0, 4.0], [2, 2]), max_sequence_length=2)
    batch = convert([feature], "mean")
    np.testing.assert_array_equal(batch.row_splits, [0, 0, 2, 3, 3])
    np.testing.assert_array_equal(batch.ids, [1, 2, 3])
    np.testing.assert_array_equal(batch.gains, [2, 3, 4])


def test_rank3_sparse_ignores_max_sequence_length_like_stock():
    rng = np.random.default_rng(3)
    feature = make_feature("sparse3", rng, msl=2, prune=True)
    batch = convert([feature], "mean")
    assert batch.feature_row_counts.numpy()[0] == 5 * 3
    table = random_table(VOCAB, DIM)
    (activations,) = split(batch, [feature], table)
    assert activations.shape == (5, 3, DIM)
    unsequenced = feature._replace(max_sequence_length=0)
    np.testing.assert_allclose(activations, stock_lookup(unsequenced, table, "mean"), rtol=1e-5)


@pytest.mark.parametrize("combiner", COMBINERS)
def test_three_features_stack_in_order(combiner):
    rng = np.random.default_rng(7)
    features = [make_feature("ragged", rng, weighted=True),
                make_feature("dense", rng, id_dtype=np.int32),
                make_feature("sparse", rng, msl=3)]
    features[2] = features[2]._replace(name="sequence")
    batch = convert(features, combiner)
    assert_matches_reference(batch, features, combiner)
    np.testing.assert_array_equal(batch.feature_row_counts, [5, 10, 15])
    table = random_table(VOCAB, DIM)
    outputs = split(batch, features, table)
    assert [o.shape for o in outputs] == [(5, DIM), (5, 2, DIM), (5, 3, DIM)]
    for feature, output in zip(features, outputs):
        np.testing.assert_allclose(output, stock_lookup(feature, table, combiner), rtol=1e-5)


def test_duplicate_ids_keep_input_order_and_are_not_merged():
    tensor = tf.ragged.constant([[4, 4, 1, 4], [1, 4]], tf.int64)
    batch = convert([FeatureInput("f", tensor)], "mean")
    np.testing.assert_array_equal(batch.row_splits, [0, 4, 6])
    np.testing.assert_array_equal(batch.ids, [4, 4, 1, 4, 1, 4])
    np.testing.assert_allclose(batch.gains, [0.25] * 4 + [0.5] * 2)


def test_unsorted_sparse_indices_are_sorted_stably_by_row():
    indices = [[2, 0], [0, 1], [2, 1], [0, 0], [1, 0]]
    ids = tf.constant([7, 1, 8, 2, 5], tf.int64)
    weights = [1.0, 2.0, 3.0, 4.0, 5.0]
    feature = FeatureInput("f", tf.SparseTensor(indices, ids, [3, 2]),
                           tf.SparseTensor(indices, weights, [3, 2]), prune_invalid=True)
    batch = convert([feature], "sum")
    np.testing.assert_array_equal(batch.row_splits, [0, 2, 3, 5])
    np.testing.assert_array_equal(batch.ids, [1, 2, 5, 7, 8])  # input order within a row
    np.testing.assert_array_equal(batch.gains, [2, 4, 5, 1, 3])
    table = random_table(VOCAB, DIM)
    np.testing.assert_allclose(split(batch, [feature], table)[0],
                               stock_lookup(feature, table, "sum"), rtol=1e-6)


@pytest.mark.parametrize("feature, rows", [
    (FeatureInput("dense", tf.zeros([0], tf.int64)), 0),
    (FeatureInput("dense2d", tf.zeros([0, 3], tf.int32)), 0),
    (FeatureInput("sparse", tf.SparseTensor(tf.zeros([0, 2], tf.int64), tf.zeros([0], tf.int64),
                                            [0, 4])), 0),
    (FeatureInput("sparse_nnz0", tf.SparseTensor(tf.zeros([0, 2], tf.int64),
                                                 tf.zeros([0], tf.int64), [3, 4])), 3),
    (FeatureInput("ragged", tf.RaggedTensor.from_row_splits(tf.zeros([0], tf.int64), [0])), 0),
    (FeatureInput("ragged_nnz0", tf.ragged.constant([[], [], []], tf.int64)), 3),
    (FeatureInput("ragged_seq", tf.RaggedTensor.from_row_splits(tf.zeros([0], tf.int64), [0]),
                  max_sequence_length=4), 0),
    (FeatureInput("sparse_seq", tf.SparseTensor(tf.zeros([0, 2], tf.int64),
                                                tf.zeros([0], tf.int64), [2, 4]),
                  max_sequence_length=3), 6),
])
@pytest.mark.parametrize("combiner", COMBINERS)
def test_empty_batches(feature, rows, combiner):
    batch = convert([feature], combiner)
    np.testing.assert_array_equal(batch.row_splits, np.zeros([rows + 1]))
    assert batch.ids.shape == (0,) and batch.gains.shape == (0,)
    np.testing.assert_array_equal(batch.feature_row_counts, [rows])
    (activations,) = split(batch, [feature], random_table(VOCAB, DIM))
    np.testing.assert_array_equal(activations, np.zeros(activations.shape))
    expected = feature_input.activation_shape(feature, DIM).numpy()
    assert activations.shape == tuple(expected) and math.prod(expected[:-1]) == rows


def test_split_activations_in_tf_function_with_unknown_batch(ops):
    features_spec = [tf.RaggedTensorSpec([None, None], tf.int64),
                     tf.SparseTensorSpec([None, None], tf.int64),
                     tf.TensorSpec([None], tf.int32)]

    @tf.function(input_signature=features_spec)
    def lookup(ragged, sparse, dense):
        features = [FeatureInput("r", ragged), FeatureInput("s", sparse, max_sequence_length=2),
                    FeatureInput("d", dense)]
        batch = convert(features, "mean")
        table = tf.constant(random_table(VOCAB, DIM))
        rows = tf.ragged.row_splits_to_segment_ids(batch.row_splits)
        acts = tf.math.unsorted_segment_sum(batch.gains[:, None] * tf.gather(table, batch.ids),
                                            rows, tf.shape(batch.row_splits)[0] - 1)
        return feature_input.split_activations(acts, batch.feature_row_counts, features, DIM)

    ragged = tf.ragged.constant([[1, 2], [], [3]], tf.int64)
    sparse = tf.SparseTensor([[0, 0], [0, 1], [0, 2], [2, 0]],
                             tf.constant([4, 5, 6, 7], tf.int64), [3, 3])
    dense = tf.constant([8, 9, 0], tf.int32)
    r, s, d = lookup(ragged, sparse, dense)
    assert (r.shape, s.shape, d.shape) == ((3, DIM), (3, 2, DIM), (3, DIM))
    table = random_table(VOCAB, DIM)
    np.testing.assert_allclose(r, serving_lookup(FeatureInput("r", ragged), table, "mean"),
                               rtol=1e-6)
    np.testing.assert_allclose(
        s, serving_lookup(FeatureInput("s", sparse, max_sequence_length=2), table, "mean"))
    np.testing.assert_allclose(d, table[[8, 9, 0]])
    static = lookup.get_concrete_function().structured_outputs
    assert [o.shape.as_list() for o in static] == [[None, DIM], [None, 2, DIM], [None, DIM]]


# ---------------------------------------------------------------------------------------------
# Validation: every bad input raises InvalidArgumentError naming the table and the feature.


def raw_csr(ops, kind="sparse", values=(1, 2), row_info=((0, 0), (1, 0)), dense_shape=(2, 2),
            weights=None, msl=0, prune=False, combiner="sum", vocab=VOCAB, **overrides):
    """Calls the raw op on one feature; `overrides` replace whole op arguments."""
    args = dict(
        ids=[tf.constant(values, tf.int64)],
        row_info=[tf.constant(row_info, tf.int64)],
        dense_shapes=[tf.constant(dense_shape, tf.int64)],
        weights=[tf.constant([] if weights is None else weights, tf.float32)],
        input_kinds=[kind], has_weights=[weights is not None], max_sequence_lengths=[msl],
        prune_invalid=[prune], feature_names=["feat"], combiner=combiner,
        vocabulary_size=vocab, table_name="tbl")
    args.update(overrides)
    return ops.tfe_features_to_csr(**args)


PREFIX = "Table 'tbl', feature 'feat': "
BIG = 2**40
INVALID_CASES = {
    "id_too_large": (dict(values=(1, 10)), PREFIX + "id 10 at lookup 1 is out of range for "
                     "vocabulary size 10"),
    "id_too_large_pruned": (dict(values=(-1, 12), prune=True), PREFIX + r"id 12 at lookup 1"),
    "negative_id": (dict(values=(-1, 2)), PREFIX + "id -1 at lookup 0 is out of range for "
                    "vocabulary size 10"),
    "negative_id_ragged": (dict(kind="ragged", values=(3, -2), row_info=(0, 2), dense_shape=[]),
                           PREFIX + "id -2 at lookup 1"),
    "negative_id_dense": (dict(kind="dense", values=(-3,), row_info=[], dense_shape=[1]),
                          PREFIX + "id -3 at lookup 0"),
    "indices_rank1": (dict(row_info=(0, 1)), PREFIX + r"sparse indices must be a matrix "
                      r"\[nnz, rank\], got shape \[2\]"),
    "indices_rank3": (dict(row_info=[[[0, 0]], [[1, 0]]]), PREFIX + r"sparse indices must be a "
                      r"matrix \[nnz, rank\], got shape \[2, 1, 2\]"),
    "indices_columns": (dict(row_info=((0, 0, 0), (1, 0, 0))),
                        PREFIX + r"sparse indices have 3 columns but dense_shape \[2, 2\] has 2"),
    "indices_rows": (dict(values=(1, 2, 3)), PREFIX + "sparse indices have 2 rows but there are 3"),
    "weights_length": (dict(weights=(1.0,)), PREFIX + "weights have 1 elements but there are 2"),
    "index_outside": (dict(row_info=((0, 0), (2, 0))), PREFIX + r"sparse indices\[1\] = \[2, 0\]"
                      r" is out of bounds for dense_shape \[2, 2\]"),
    "index_negative": (dict(row_info=((0, -1), (1, 0))),
                       PREFIX + r"sparse indices\[0\] = \[0, -1\] is out of bounds"),
    "dense_shape_negative": (dict(values=(), row_info=np.zeros([0, 2]), dense_shape=(-2, 2)),
                             PREFIX + r"sparse dense_shape \[-2, 2\] has a negative dimension"),
    "rank1": (dict(row_info=((0,), (1,)), dense_shape=(4,)),
              PREFIX + r"sparse input must have rank >= 2 \(dense_shape \[4\]\)"),
    "rows_overflow": (dict(values=(), row_info=np.zeros([0, 3]), dense_shape=(BIG, BIG, 1)),
                      PREFIX + "the sparse dense_shape gives more than 2147483647 output rows"),
    "rows_int64_overflow": (dict(values=(), row_info=np.zeros([0, 4]),
                                 dense_shape=(2**62, 2**62, 2**62, 1)),
                            PREFIX + "the sparse dense_shape gives more than 2147483647 output "
                            "rows"),
    "sequence_overflow": (dict(values=(), row_info=np.zeros([0, 2]), dense_shape=(BIG, 1), msl=8),
                          PREFIX + "the sparse dense_shape gives more than 2147483647"),
    "ragged_sequence_overflow": (dict(kind="ragged", values=(), row_info=(0, 0, 0), msl=2**62),
                                 PREFIX + "the ragged row_splits gives more than"),
    "splits_empty": (dict(kind="ragged", values=(), row_info=()),
                     PREFIX + r"row_splits must have at least one element \(R \+ 1 for R rows\), "
                     "got none"),
    "splits_start": (dict(kind="ragged", row_info=(1, 2)),
                     PREFIX + r"row_splits\[0\] must be 0, got 1"),
    "splits_decreasing": (dict(kind="ragged", row_info=(0, 2, 1, 2)),
                          PREFIX + r"row_splits must be non-decreasing, but row_splits\[2\] "
                          r"= 1 < row_splits\[1\] = 2"),
    "splits_end": (dict(kind="ragged", row_info=(0, 1)),
                   PREFIX + r"row_splits\[1\] = 1 must equal the number of ids, 2"),
    "splits_past_end": (dict(kind="ragged", row_info=(0, 5)),
                        PREFIX + r"row_splits\[1\] = 5 must equal the number of ids, 2"),
    "unknown_kind": (dict(kind="dence"), PREFIX + "unknown input kind 'dence' "
                     r"\(expected dense, sparse or ragged\)"),
    "unknown_combiner": (dict(combiner="max"), "Table 'tbl': unknown combiner 'max' "
                         r"\(expected sum, mean or sqrtn\)"),
    "negative_msl": (dict(msl=-1), PREFIX + "max_sequence_length must be >= 0, got -1"),
    "dense_sequence": (dict(kind="dense", msl=2), PREFIX + r"is a sequence feature "
                       r"\(max_sequence_length 2\) but its input is dense"),
    "attr_length": (dict(feature_names=["a", "b"]), "Table 'tbl': attr feature_names has 2 "
                    "entries but there are 1 features"),
    "kinds_length": (dict(input_kinds=[]), "attr input_kinds has 0 entries"),
    "msl_length": (dict(max_sequence_lengths=[0, 0]), "attr max_sequence_lengths has 2"),
    "ids_list_length": (dict(ids=[tf.constant([1], tf.int64)] * 2),
                        "Table 'tbl': 2 ids tensors but 1 features"),
}


@pytest.mark.parametrize("case", sorted(INVALID_CASES))
def test_invalid_inputs_raise(ops, case):
    overrides, message = INVALID_CASES[case]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        raw_csr(ops, **overrides)


@pytest.mark.slow
def test_stacking_past_the_row_limit_raises(ops):
    empty = tf.zeros([0, 2], tf.int64)
    half = tf.constant([2**30, 1], tf.int64)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table 'tbl', feature 'second': stacking it after 1073741824 rows "
                             "gives more than 2147483647 output rows"):
        ops.tfe_features_to_csr(
            ids=[tf.zeros([0], tf.int64)] * 3, row_info=[empty] * 3,
            dense_shapes=[half, half, half], weights=[tf.zeros([0])] * 3,
            input_kinds=["sparse"] * 3, has_weights=[False] * 3, max_sequence_lengths=[0] * 3,
            prune_invalid=[False] * 3, feature_names=["first", "second", "third"],
            combiner="sum", vocabulary_size=4, table_name="tbl")


def test_int32_and_int64_ids_mix_across_features(ops):
    batch = ops.tfe_features_to_csr(
        ids=[tf.constant([3], tf.int32), tf.constant([[4, 5]], tf.int64)],
        row_info=[tf.zeros([0], tf.int64)] * 2, dense_shapes=[tf.zeros([0], tf.int64)] * 2,
        weights=[tf.zeros([0])] * 2, input_kinds=["dense"] * 2, has_weights=[False] * 2,
        max_sequence_lengths=[0] * 2, prune_invalid=[False] * 2, feature_names=["a", "b"],
        combiner="sum", vocabulary_size=VOCAB, table_name="tbl")
    np.testing.assert_array_equal(batch.csr_ids, [3, 4, 5])
    np.testing.assert_array_equal(batch.feature_row_counts, [1, 2])


# ---------------------------------------------------------------------------------------------
# Python-side checks of tf_embedding.ops.


@pytest.mark.parametrize("feature, error, message", [
    (FeatureInput("nested", tf.ragged.constant([[[1], [2, 3]], [[4]]], tf.int64)), ValueError,
     "Feature nested: only rank 2 ragged tensors"),
    (FeatureInput("uniform", tf.RaggedTensor.from_row_splits(tf.zeros([3, 2], tf.int64),
                                                             [0, 3])),
     ValueError, "Feature uniform: only rank 2 ragged tensors"),
    (FeatureInput("nested_w", tf.ragged.constant([[1]], tf.int64),
                  tf.ragged.constant([[[1.0]]])), ValueError,
     "Feature nested_w: only rank 2 ragged weights"),
    (FeatureInput("floats", tf.constant([1.0, 2.0])), TypeError,
     "Feature floats: ids must be int32 or int64, got float32"),
    (FeatureInput("sparse_floats", tf.SparseTensor([[0, 0]], [1.5], [1, 1])), TypeError,
     "Feature sparse_floats: ids must be int32 or int64, got float32"),
    (FeatureInput("mixed", tf.ragged.constant([[1]], tf.int64), tf.constant([1.0])), TypeError,
     "Feature mixed: weight is a EagerTensor but the input is ragged"),
    (FeatureInput("mixed2", tf.constant([1], tf.int64), tf.ragged.constant([[1.0]])), TypeError,
     "Feature mixed2: weight is a RaggedTensor but the input is dense"),
    (FeatureInput("seq", tf.constant([1], tf.int64), max_sequence_length=2), ValueError,
     "Feature seq is a sequence feature but a dense tensor was passed"),
])
def test_features_to_csr_rejects_bad_features(feature, error, message):
    with pytest.raises(error, match=re.escape(message)):
        convert([feature], "sum")


def test_features_to_csr_needs_a_feature():
    with pytest.raises(ValueError, match="Table t: features_to_csr needs at least one feature"):
        features_to_csr("t", VOCAB, "sum", [])


def test_kernel_errors_name_the_feature_through_the_wrapper():
    feature = FeatureInput("clicks", tf.ragged.constant([[1, 99]], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape("Table 'videos', feature 'clicks': id 99 at lookup 1 is "
                                       "out of range for vocabulary size 10")):
        features_to_csr("videos", VOCAB, "sum", [feature])
