"""TfeCsrDedup (ops.dedup): unique ids grouped by shard, each lookup's
index into them and the shards' splits, against a numpy reference, and its errors."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import ops
from tf_embedding.feature_inputs.feature_input import FeatureInput

pytestmark = pytest.mark.unit


def reference_dedup(ids, num_shards):
    unique = sorted(set(ids.tolist()), key=lambda i: (i % num_shards, i))
    position = {u: k for k, u in enumerate(unique)}
    counts = np.bincount([u % num_shards for u in unique], minlength=num_shards)
    return (np.array(unique, np.int64), np.array([position[i] for i in ids.tolist()], np.int32),
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


ZIPF_IDS = np.minimum(np.random.default_rng(0).zipf(1.05, size=20000) - 1, 999_999)
DEDUP_CASES = {
    "zipf": ZIPF_IDS,
    "empty": np.zeros([0], np.int64),
    "same": np.full([7], 5),
    "zeros": np.zeros([3], np.int64),
    "huge": np.array([2**63 - 1, 0, 2**62, 2**63 - 1, 3, 2**40 + 7], np.int64),
    "small": np.array([5, 3, 5, 8, 0, 3, 11, 4], np.int64),
}


@pytest.mark.parametrize("num_shards", [1, 3, 4])
@pytest.mark.parametrize("case", sorted(DEDUP_CASES))
def test_dedup_matches_reference(case, num_shards):
    ids = DEDUP_CASES[case].astype(np.int64)
    result = ops.dedup(tf.constant(ids), num_shards)
    unique, inverse, shard_splits = reference_dedup(ids, num_shards)
    np.testing.assert_array_equal(result.unique_ids, unique)
    np.testing.assert_array_equal(result.inverse, inverse)
    np.testing.assert_array_equal(result.shard_splits, shard_splits)
    assert result.inverse.dtype == tf.int32
    np.testing.assert_array_equal(tf.gather(result.unique_ids, result.inverse), ids)


def test_dedup_of_a_csr_batch_partitions_by_shard():
    feature = FeatureInput("f", tf.ragged.constant([[9, 2, 9], [4], [2, 7]], tf.int64))
    batch = ops.features_to_csr("table", 10, "sum", [feature])
    result = ops.dedup(batch.ids, 3, table_name="table")
    np.testing.assert_array_equal(result.unique_ids, [9, 4, 7, 2])
    np.testing.assert_array_equal(result.shard_splits, [0, 1, 3, 4])
    np.testing.assert_array_equal(result.inverse, [0, 3, 0, 1, 3, 2])


@pytest.mark.parametrize("ids, num_shards, error, message", [
    ([5, -3], 3, tf.errors.InvalidArgumentError, "Table 'tbl': id -3 at lookup 1 is negative"),
    ([[1, 2]], 2, tf.errors.InvalidArgumentError, r"Table 'tbl': ids must be a vector, got "
     r"shape \[1,2\]"),
    ([1], 0, tf.errors.InvalidArgumentError, "num_shards' of 0 must be at least minimum 1"),
    ([1], 2**40, tf.errors.InvalidArgumentError,
     r"Table 'tbl': num_shards must be in \[1, 2147483647\], got 1099511627776"),
])
def test_dedup_invalid_inputs_raise(ids, num_shards, error, message):
    with pytest.raises(error, match=message):
        ops.dedup(tf.constant(ids, tf.int64), num_shards, table_name="tbl")
