"""TPUEmbedding's checks of features, weights and gradients against its feature config.
"""

import logging

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

from helpers.sharded import gradients_like, small_embedding, small_features

pytestmark = pytest.mark.unit


F = np.float32


BAD_FEATURES = [
    ({"a": tf.constant([[0], [1]], tf.int64)}, ValueError, "don't have the same nested"),
    ({"a": [[0], [1]], "b": small_features()["b"]}, ValueError, "don't have the same nested"),
    ({"a": tf.Variable([[0]]), "b": small_features()["b"]}, ValueError,
     "Input a is of unknown type .*Variable"),
    ({"a": tf.constant([[0, 1]], tf.int64), "b": small_features()["b"]}, ValueError,
     "Input a: Rank 2 or above dense tensor should have last dimension as 1"),
    ({"a": tf.constant(0, tf.int64), "b": small_features()["b"]}, ValueError,
     "Only rank 1 and above dense tensor is supported"),
    ({"a": tf.SparseTensor([[0]], tf.constant([1], tf.int64), [3]),
      "b": small_features("sparse")["b"]}, ValueError,
     "Only rank 2 and above sparse tensor is supported, find rank 1 sparse tensor for input a"),
    ({"a": tf.ragged.constant([[[0]]], dtype=tf.int64), "b": small_features()["b"]}, ValueError,
     "Only rank 2 ragged tensor is supported, find rank 3 ragged tensor for input a"),
    ({"a": tf.ragged.constant([[0], [1], [2]], dtype=tf.int64), "b": small_features()["b"]},
     ValueError, r"Inconsistent shape founded for input feature a, Output shape is set to be "
                 r"\(2,\), But got incoming output shape \(3,\)"),
]


@pytest.mark.parametrize("features, error, message", BAD_FEATURES)
def test_enqueue_rejects_features_not_matching_feature_config(features, error, message):
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)
    with pytest.raises(error, match=message):
        emb.enqueue(features)


BAD_WEIGHTS = [
    ({"a": tf.ones([2, 1])}, ValueError, "don't have the same nested"),
    ({"a": tf.ones([2, 1]), "b": None}, ValueError,
     "Weight specified for dense input a, which is not allowed"),
    ({"a": tf.ones([2]), "b": None}, ValueError,
     "Weight for a is type .*EagerTensor.* which does not match type input which is "
     "RaggedTensor."),
    ({"a": None, "b": tf.ragged.constant([[1.0, 1.0], [1.0]])}, ValueError,
     "Weight specified for b, but this is a sequence feature."),
]


@pytest.mark.parametrize("weights, error, message", BAD_WEIGHTS)
def test_enqueue_rejects_weights_not_matching_feature_config(weights, error, message):
    emb = small_embedding()
    features = small_features()
    if "Weight specified for dense" in message:
        features = {"a": tf.constant([[0], [1]], tf.int64), "b": features["b"]}
    with pytest.raises(error, match=message):
        emb.enqueue(features, weights)


def test_build_without_shapes_takes_them_from_the_first_enqueue():
    # TF on a TPU raises at build() here; see docs/api_differences.md for why this does not.
    emb = small_embedding()
    emb.build()
    with pytest.raises(ValueError, match="Input Feature a has output shape set as <unknown> "
                                         "which is not fully defined"):
        emb.dequeue()
    emb.enqueue(small_features())
    activations = emb.dequeue()
    assert activations["a"].shape == (2, 2)
    assert activations["b"].shape == (2, 2, 2)


def test_an_unknown_batch_dimension_gives_batches_of_their_own_size():
    # As a distributed dataset's on several MultiWorkerMirroredStrategy workers: TF refuses
    # such a first enqueue; here every batch is looked up at its own size, and trains. The
    # reference is numpy: "a" sums its rows, "b" is a sequence of 2; SGD(0.1) on unit gradients.
    emb = small_embedding()
    emb.build()
    table = emb.table_variables()["t"]["parameters"].numpy()

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)])
    def step(ids):
        emb.enqueue({"a": ids, "b": ids})
        activations = emb.dequeue()
        assert activations["a"].shape.as_list() == [None, 2]
        assert activations["b"].shape.as_list() == [None, 2, 2]
        emb.apply_gradients(gradients_like(activations))
        return activations

    for rows in ([[0, 1], [5]], [[1], [2, 3, 4], [4]]):
        got = step(tf.ragged.constant(rows, dtype=tf.int64))
        # The reference's sums and updates round in another order: a few ulps apart.
        np.testing.assert_allclose(got["a"].numpy(), [table[r].sum(0) for r in rows],
                                   rtol=1e-6, atol=1e-6)
        sequences = np.zeros([len(rows), 2, 2], np.float32)
        for sample, row in enumerate(rows):
            sequences[sample, :len(row[:2])] = table[row[:2]]
        np.testing.assert_array_equal(got["b"].numpy(), sequences)
        # Each id's unit gradients summed over the batch ("a" every position, "b" the first
        # two), then one SGD step per id, as the fused update does.
        counts: dict[int, int] = {}
        for row in rows:
            for position, index in enumerate(row):
                counts[index] = counts.get(index, 0) + (2 if position < 2 else 1)
        for index, count in counts.items():
            table[index] -= np.float32(0.1) * np.float32(count)
    np.testing.assert_allclose(emb.table_variables()["t"]["parameters"].numpy(), table,
                               rtol=1e-6, atol=1e-6)


def test_output_shapes_must_be_defined_beyond_the_batch_dimension():
    table = tf_embedding.TableConfig(vocabulary_size=6, dim=2, combiner="sum", name="t")
    emb = tf_embedding.TPUEmbedding({"a": tf_embedding.FeatureConfig(table)},
                                    tf_embedding.SGD(0.1))

    @tf.function(input_signature=[tf.SparseTensorSpec([None, None, None], tf.int64)])
    def enqueue(ids):
        emb.enqueue({"a": ids})

    with pytest.raises(ValueError, match=r"Input Feature a has output shape set as \(None, "
                                         r"None\) which is not fully defined"):
        enqueue(tf.sparse.from_dense(tf.constant([[[1]]], tf.int64)))


BAD_GRADIENTS = [
    ({"a": tf.ones([2, 2])}, ValueError, "don't have the same nested"),
    ({"a": np.ones([2, 2], F), "b": tf.ones([2, 2, 2])}, ValueError,
     "found non-tensor type: <class 'numpy.ndarray'> at path a."),
    ({"a": tf.ones([2, 3]), "b": tf.ones([2, 2, 2])}, ValueError,
     r"Found gradient of shape \(2, 3\) at path a. Expected shape \[2, 2\]."),
    ({"a": tf.ones([3, 2]), "b": tf.ones([2, 2, 2])}, ValueError,
     r"Found gradient of shape \(3, 2\) at path a."),
]


@pytest.mark.parametrize("gradients, error, message", BAD_GRADIENTS)
def test_apply_gradients_rejects_gradients_not_matching_feature_config(gradients, error, message):
    emb = small_embedding()
    emb.enqueue(small_features())
    emb.dequeue()
    with pytest.raises(error, match=message):
        emb.apply_gradients(gradients)


def test_missing_gradient_is_zero_and_warned_once(caplog):
    emb = small_embedding(tf_embedding.Adam(0.1))
    table = emb.table_variables()["t"]["parameters"]
    before = tf.convert_to_tensor(table).numpy()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            emb.enqueue(small_features())
            activations = emb.dequeue()
            emb.apply_gradients({"a": None, "b": tf.zeros_like(activations["b"])})
    warnings = [r.getMessage() for r in caplog.records if "No gradient passed" in r.getMessage()]
    assert warnings == ["No gradient passed for feature a, sending zero gradient. This may not "
                        "be correct behavior for certain optimizers like Adam."]
    # Zero gradients leave Adam's rows unchanged (the moments stay zero).
    np.testing.assert_array_equal(
        tf.convert_to_tensor(table), before)


def test_apply_gradients_without_optimizer():
    table = tf_embedding.TableConfig(vocabulary_size=4, dim=2, name="t")
    emb = tf_embedding.TPUEmbedding({"a": tf_embedding.FeatureConfig(table)}, None)
    emb.build()
    assert list(emb.table_variables()["t"]) == ["parameters"]
    emb.enqueue({"a": tf.constant([1, 2], tf.int64)})
    activations = emb.dequeue()
    with pytest.raises(ValueError, match="Table t has no optimizer"):
        emb.apply_gradients(activations)
