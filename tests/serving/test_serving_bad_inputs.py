"""Inputs the serving lookups index with, checked in stock ops: ragged row splits, weights laid
out as their ids, ids' dtype and the tables given. Every path (the default segment lookup, the
XLA-compiled one, eager and traced with unknown shapes) fails with an error that names the table
and the feature, where it would otherwise read past the ids or pair weights with the wrong ids."""

import gc

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding as emb

pytestmark = pytest.mark.unit

TABLE = emb.TableConfig(8, 2, name="video", combiner="sum", initializer=emb.RowIdInitializer())
FEATURES = {"a": emb.FeatureConfig(table=TABLE)}
IDS = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
# TF's Assert prints its message with the quotes escaped.
WHERE = r"Table \\?'video\\?', feature \\?'a\\?'"


def _lookup(jit_compile: bool, traced: bool, ids, weights=None) -> np.ndarray:
    serving = emb.TPUEmbeddingForServing(FEATURES, None, jit_compile=jit_compile)
    args = [ids] if weights is None else [ids, weights]

    def call(ids, weights=None):
        return serving.embedding_lookup({"a": ids}, None if weights is None else {"a": weights})

    if traced:  # unknown sizes: only the run-time checks can see the batch
        signature = [tf.RaggedTensorSpec([None, None], tf.int64),
                     tf.RaggedTensorSpec([None, None], tf.float32)][:len(args)]
        call = tf.function(call, autograph=False, input_signature=signature)
    return call(*args)["a"].numpy()


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("traced", [False, True])
def test_weights_laid_out_as_the_ids_are_looked_up(jit_compile, traced):
    weights = tf.ragged.constant([[1.0, 2.0], [3.0]])
    np.testing.assert_allclose(_lookup(jit_compile, traced, IDS, weights),
                               [[5.0, 5.0], [9.0, 9.0]])


@pytest.mark.parametrize("jit_compile", [False, True])
def test_weights_whose_row_splits_have_another_dtype_are_looked_up(jit_compile):
    weights = tf.ragged.constant([[1.0, 2.0], [3.0]], row_splits_dtype=tf.int32)
    np.testing.assert_allclose(_lookup(jit_compile, False, IDS, weights),
                               [[5.0, 5.0], [9.0, 9.0]])


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("weights", [[[1.0], [2.0]], [[1.0, 1.0, 1.0], [2.0]]])
def test_weights_of_another_count_fail_when_traced(jit_compile, weights):
    with pytest.raises(ValueError, match=f"{WHERE}: the weights must be laid out as the ids"):
        _lookup(jit_compile, False, IDS, tf.ragged.constant(weights))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"{WHERE}: the weights must be laid out as the ids"):
        _lookup(jit_compile, True, IDS, tf.ragged.constant(weights))


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("traced", [False, True])
def test_weights_in_rows_of_other_lengths_fail(jit_compile, traced):
    # As many weights as ids, but row 0 holds one of them and row 1 two: TF's ragged lookup
    # cannot broadcast them, and pairing them by position would weight the wrong ids.
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{WHERE}: the weights must be"):
        _lookup(jit_compile, traced, IDS, tf.ragged.constant([[1.0], [2.0, 3.0]]))


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("splits", [[0, 2, 9], [1, 2, 3], [0, 3, 2, 3]])
def test_malformed_ragged_ids_fail(jit_compile, traced, splits):
    ids = tf.RaggedTensor.from_row_splits(tf.constant([1, 2, 3], tf.int64),
                                          tf.constant(splits, tf.int64), validate=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match=WHERE + r": the ids\\?' row_splits"):
        _lookup(jit_compile, traced, ids)


def test_float_ids_are_a_type_error_naming_the_feature():
    serving = emb.TPUEmbeddingForServing(FEATURES, None)
    with pytest.raises(TypeError, match="Feature a: ids must be int32 or int64, got float32"):
        serving.embedding_lookup({"a": tf.constant([1.0, 2.0])})


def test_a_table_missing_from_tables_names_it():
    with pytest.raises(ValueError, match="Feature 'a': `tables` holds no table for its table "
                                         "'video'"):
        emb.serving_embedding_lookup({"a": tf.constant([1, 2], tf.int64)}, None, {}, FEATURES)


def test_compiled_lookups_of_successive_serving_objects_in_functions():
    # The compiled pooling is one function of the module: called inside a user's function it
    # must not keep the first object's variable, which the second object's call would reuse
    # after the first object is gone.
    for _ in range(2):
        np.testing.assert_allclose(_lookup(True, True, IDS), [[3.0, 3.0], [3.0, 3.0]])
        gc.collect()
