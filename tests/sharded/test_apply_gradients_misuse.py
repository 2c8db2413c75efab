"""A misuse of the sharded `TPUEmbedding.apply_gradients` (a table without an optimizer, gradients
of the wrong structure or shape) is refused before the dequeued batch is taken from the engine's
queue, so the batch is still there: a correct call then trains on it, and it still blocks a new
training dequeue as an unapplied batch does."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

pytestmark = pytest.mark.unit

INITIAL = np.arange(8, dtype=np.float32).reshape(4, 2)
LEARNING_RATE = 0.5


def _embedding(optimizer):
    table = tf_embedding.TableConfig(vocabulary_size=4, dim=2, name="t",
                                     initializer=tf.constant_initializer(INITIAL))
    return tf_embedding.TPUEmbedding({"a": tf_embedding.FeatureConfig(table)}, optimizer)


def _ids():
    return {"a": tf.constant([1, 2], tf.int64)}


def test_no_optimizer_is_refused_and_the_batch_stays():
    emb = _embedding(None)
    emb.enqueue(_ids())
    activations = emb.dequeue()
    for _ in range(2):
        # The same error each time: the batch was not taken (taking it again would fail with
        # "without activations to update").
        with pytest.raises(ValueError, match="Table t has no optimizer, so apply_gradients"):
            emb.apply_gradients(activations)
    emb.enqueue(_ids())
    with pytest.raises(RuntimeError, match="still awaits apply_gradients"):
        emb.dequeue()


@pytest.mark.parametrize("wrong, message", [
    ({"a": tf.ones([2, 3])}, r"Found gradient of shape \(2, 3\) at path a\. Expected shape"),
    ({"b": tf.ones([2, 2])}, "don't have the same set of keys"),
    ({"a": "not a tensor"}, "found non-tensor type"),
])
def test_wrong_gradients_are_refused_and_a_correct_call_trains(wrong, message):
    emb = _embedding(tf_embedding.SGD(LEARNING_RATE))
    emb.enqueue(_ids())
    emb.dequeue()
    with pytest.raises(ValueError, match=message):
        emb.apply_gradients(wrong)
    emb.apply_gradients({"a": tf.ones([2, 2])})
    # SGD on the looked-up rows 1 and 2, each with gradient 1 in every column.
    expected = INITIAL.copy()
    expected[[1, 2]] -= LEARNING_RATE
    np.testing.assert_array_equal(
        tf.convert_to_tensor(emb.embedding_tables[emb.engine.tables[0].config]).numpy(),
        expected)
    # The batch was applied once: there is none left.
    with pytest.raises(RuntimeError, match="without activations to update"):
        emb.apply_gradients({"a": tf.ones([2, 2])})
