"""TPUEmbedding's inference batches (training=False): no apply_gradients needed, raw batches
(sparse, ragged or dense) looked up unconverted in one op with the same bits, their errors and
queue capacity.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

from helpers.graphs import custom_op_counts, custom_ops
from helpers.sharded import dequeue_and_apply, gradients_like, small_embedding, small_features

pytestmark = pytest.mark.unit


def test_inference_batches_need_no_apply_gradients():
    emb = small_embedding()
    for _ in range(2):
        emb.enqueue(small_features(), training=False)
        emb.dequeue()
    emb.enqueue(small_features())
    dequeue_and_apply(emb)


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
@pytest.mark.parametrize("in_function", [False, True])
def test_raw_inference_batches_are_looked_up_unconverted_with_the_same_bits(in_function, kind):
    """A forward-only batch of rank-2 SparseTensors, or of RaggedTensors, waits unconverted and
    is converted and looked up in one op (TfeFeaturesLookup; for the sequence feature "b" by its
    conversion path): the same activations as a training batch's. A batch mixing the two, or a
    training one, is converted at enqueue time."""
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)

    def forward(features, training):
        emb.enqueue(features, training=training)
        return emb.dequeue()

    step = tf.function(forward) if in_function else forward
    inference = step(small_features(kind), False)
    training = step(small_features(kind), True)
    emb.apply_gradients(gradients_like(training))
    expected = {"a": [[1.0, 1.0], [1.0, 1.0]], "b": [[[1.0, 1.0], [1.0, 1.0]],
                                                       [[1.0, 1.0], [0.0, 0.0]]]}
    for key in expected:
        np.testing.assert_array_equal(inference[key].numpy(), training[key].numpy())
    if in_function:
        mixed = {"a": small_features("sparse")["a"], "b": small_features("ragged")["b"]}
        assert "TfeFeaturesLookup" in custom_ops(step, small_features(kind), False)
        assert "TfeFeaturesToCsr" not in custom_ops(step, small_features(kind), False)
        assert "TfeFeaturesToCsr" in custom_ops(step, mixed, False)
        assert "TfeFeaturesToCsr" in custom_ops(step, small_features(kind), True)
        # A dequeue traced after its enqueue in the same function takes that batch's queue
        # directly: no tf.cond with the raw batches' lookups in the training step.
        assert "TfeFeaturesLookup" not in custom_ops(step, small_features(kind), True)


def _tables_embedding(num_tables: int = 3) -> tf_embedding.TPUEmbedding:
    """Up to three tables of one feature each, one per combiner, built for batches of 4."""
    configs = [tf_embedding.TableConfig(vocabulary_size=50 + t, dim=3 + t, combiner=combiner,
                                        name=f"t{t}")
               for t, combiner in enumerate(["sum", "mean", "sqrtn"][:num_tables])]
    features = {f"f{t}": tf_embedding.FeatureConfig(table) for t, table in enumerate(configs)}
    emb = tf_embedding.TPUEmbedding(features, tf_embedding.SGD(0.1))
    emb.build(per_replica_batch_size=4)
    return emb


def _tables_batch(kind: str, num_tables: int = 3) -> dict[str, tf.Tensor | tf.SparseTensor]:
    """A batch of 4 for `_tables_embedding`: SparseTensors of 0-5 ids per sample, or dense ids
    of one per sample, shaped [4] and [4, 1] in turn."""
    rng = np.random.default_rng(3)
    if kind == "dense":
        return {f"f{t}": tf.constant(rng.integers(0, 50, size=[4, 1][:1 + t % 2]), tf.int64)
                for t in range(num_tables)}
    return {f"f{t}": tf.ragged.constant([rng.integers(0, 50, size=n) for n in (3, 0, 1, 5)],
                                        dtype=tf.int64).to_sparse()
            for t in range(num_tables)}


@pytest.mark.parametrize("kind,num_tables", [("sparse", 3), ("dense", 3), ("dense", 1)])
def test_an_inference_batch_of_several_tables_is_looked_up_in_one_op(kind, num_tables):
    """Every table's features of a raw inference batch in one TfeFeaturesLookup, whose threads
    share all the tables' rows; each table's activations as the training path gives them."""
    emb = _tables_embedding(num_tables)
    batch = _tables_batch(kind, num_tables)

    @tf.function
    def step(features, training):
        emb.enqueue(features, training=training)
        return emb.dequeue()

    assert custom_op_counts(step, batch, False)["TfeFeaturesLookup"] == 1
    assert "TfeFeaturesToCsr" not in custom_ops(step, batch, False)
    inference, training = step(batch, False), step(batch, True)
    emb.apply_gradients(gradients_like(training))
    for name in batch:
        np.testing.assert_array_equal(inference[name].numpy(), training[name].numpy())


def test_a_bad_dense_id_in_a_raw_inference_batch_fails_naming_table_and_feature():
    emb = _tables_embedding()
    batch = _tables_batch("dense")
    batch["f1"] = tf.constant([[1], [51], [2], [3]], tf.int64)

    @tf.function
    def forward(features):
        emb.enqueue(features, training=False)
        return emb.dequeue()

    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 't1', feature 'f1': id 51 at lookup 1 is out of range for "
                             r"vocabulary size 51"):
        forward(batch)


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_a_bad_id_in_a_raw_inference_batch_fails_naming_table_and_feature(kind):
    """The direct lookup of a raw batch rejects an id out of range, and the step fails with the
    conversion's message."""
    emb = small_embedding()
    emb.build(per_replica_batch_size=2)

    @tf.function
    def forward(features):
        emb.enqueue(features, training=False)
        return emb.dequeue()

    rows = tf.ragged.constant([[0, 6], [5]], dtype=tf.int64)
    feature = rows if kind == "ragged" else rows.to_sparse()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 't', feature 'a': id 6 at lookup 1 is out of range for "
                             r"vocabulary size 6"):
        forward({"a": feature, "b": feature})


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_raw_inference_batches_share_the_queue_capacity(kind):
    emb = small_embedding()
    emb.enqueue(small_features(kind), training=False)
    with pytest.raises(RuntimeError, match="already holds 1 enqueued batch"):
        emb.enqueue(small_features(kind))
    with pytest.raises(RuntimeError, match="already holds 1 enqueued batch"):
        emb.enqueue(small_features("sparse" if kind == "ragged" else "ragged"), training=False)
    emb.dequeue()
    emb.enqueue(small_features(kind))
    with pytest.raises(RuntimeError, match="already holds 1 enqueued batch"):
        emb.enqueue(small_features(kind), training=False)
    dequeue_and_apply(emb)
    emb.enqueue(small_features(kind), training=False)
    with pytest.raises(RuntimeError, match="enqueued with training=False"):
        emb.apply_gradients(gradients_like(emb.dequeue()))


def test_dense_inference_batches_across_functions_eagerly_and_in_the_queue_capacity():
    """A raw dense batch enqueued in one function is looked up by a dequeue traced in another
    (which learns its kind at run time) and eagerly, with the training path's bits; it takes
    the queue's one place as any batch does."""
    emb = _tables_embedding()
    batch = _tables_batch("dense")
    enqueue = tf.function(lambda features, training: emb.enqueue(features, training=training))
    dequeue = tf.function(emb.dequeue)
    enqueue(batch, False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="already holds 1 enqueued batch"):
        enqueue(batch, False)
    across = dequeue()
    emb.enqueue(batch, training=False)
    with pytest.raises(RuntimeError, match="already holds 1 enqueued batch"):
        emb.enqueue(_tables_batch("sparse"), training=False)
    eager = emb.dequeue()
    enqueue(batch, True)
    training = dequeue()
    emb.apply_gradients(gradients_like(training))
    for name in batch:
        np.testing.assert_array_equal(across[name].numpy(), training[name].numpy())
        np.testing.assert_array_equal(eager[name].numpy(), training[name].numpy())
