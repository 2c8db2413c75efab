"""TPUEmbedding's output shapes (TPU rules, sequences, batches that do not fill them), building
with input shapes, and where its tables live.
"""

import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import sharded_variable

import tf_embedding

from helpers.sharded import feature_config, initial_table
from helpers.sharded import make_strategy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("kind", ["sparse", "ragged"])
def test_output_shapes_follow_tpu_rules(kind):
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=3, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    config = {
        "dense_2d": tf_embedding.FeatureConfig(table),
        "dense_3d": tf_embedding.FeatureConfig(table),
        "pooled": tf_embedding.FeatureConfig(table),
        "sequence": tf_embedding.FeatureConfig(table, max_sequence_length=2),
        "reshaped": tf_embedding.FeatureConfig(table, output_shape=[2, 2]),
    }
    samples = [[1, 2], [3], [], [4, 5, 6]]
    make = lambda rows: (tf.ragged.constant(rows, dtype=tf.int64) if kind == "ragged"
                         else tf.ragged.constant(rows, dtype=tf.int64).to_sparse())
    emb = tf_embedding.TPUEmbedding(config, tf_embedding.SGD(0.1))
    emb.enqueue({
        "dense_2d": tf.constant([[1], [2], [3], [4]], tf.int64),
        "dense_3d": tf.constant([[[1], [2]], [[3], [4]], [[5], [6]], [[7], [8]]], tf.int64),
        "pooled": make(samples),
        "sequence": make(samples),
        "reshaped": make(samples),
    })
    out = emb.dequeue()
    row = lambda ids: [float(sum(i + 1 for i in ids))] * 3
    np.testing.assert_array_equal(out["dense_2d"], [row([i]) for i in [1, 2, 3, 4]])
    assert out["dense_3d"].shape == (4, 2, 3)
    np.testing.assert_array_equal(out["pooled"], [row(s) for s in samples])
    np.testing.assert_array_equal(out["sequence"], [[row(s[:1]) if s else row([]),
                                                     row(s[1:2]) if len(s) > 1 else row([])]
                                                    for s in samples])
    np.testing.assert_array_equal(out["reshaped"], np.reshape([row(s) for s in samples], [2, 2, 3]))


def test_ragged_output_shape_larger_than_the_batch_is_a_sequence():
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=1, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    emb = tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table, output_shape=[2, 3])},
                                    tf_embedding.SGD(0.1))
    emb.enqueue({"f": tf.ragged.constant([[1, 2, 3, 4], [5]], dtype=tf.int64)})
    np.testing.assert_array_equal(emb.dequeue()["f"][..., 0], [[2, 3, 4], [6, 0, 0]])


@pytest.mark.parametrize("kind", ["ragged", "sparse"])
@pytest.mark.parametrize("given_to", ["FeatureConfig", "build"])
def test_a_sequence_output_shape_from_the_config_or_build_makes_a_sequence(kind, given_to):
    """TF takes a feature's output shape from FeatureConfig, build() or the first enqueue alike:
    [batch, seq] for a rank 2 input without max_sequence_length is a sequence either way (and
    from build(), also for a smaller final batch dequeued with partial=True)."""
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=1, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    feature = tf_embedding.FeatureConfig(
        table, output_shape=[2, 4] if given_to == "FeatureConfig" else None)
    emb = tf_embedding.TPUEmbedding({"f": feature}, tf_embedding.SGD(0.1))
    if given_to == "build":
        emb.build(per_replica_input_shapes={"f": tf.TensorShape([2, 4, 1])})

    def ids(rows):
        ragged = tf.ragged.constant(rows, dtype=tf.int64)
        return ragged if kind == "ragged" else ragged.to_sparse()

    emb.enqueue({"f": ids([[1, 2, 3, 4, 5], [6]])}, training=False)
    np.testing.assert_array_equal(emb.dequeue()["f"][..., 0], [[2, 3, 4, 5], [7, 0, 0, 0]])
    if given_to == "FeatureConfig":
        return  # There TF's rule is prod(output_shape) / batch positions per sample.
    emb.enqueue({"f": ids([[7, 8]])}, training=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="partial=True"):
        emb.dequeue()
    emb.enqueue({"f": ids([[7, 8]])}, training=False)
    np.testing.assert_array_equal(emb.dequeue(partial=True)["f"][..., 0], [[8, 9, 0, 0]])
    # A batch larger than built fits no shape, partial or not.
    emb.enqueue({"f": ids([[1], [2], [3]])}, training=False)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table t: the dequeued batch's rows per feature \['f'\] "
                             r"do not fill their output shapes \[\[2, 4\]\]\. The output shapes "
                             "come from FeatureConfig.output_shape, build"):
        emb.dequeue(partial=True)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("features", [["f"], ["f", "g"]])
def test_a_batch_that_does_not_fill_the_output_shapes_fails_in_a_function(features, jit_compile):
    """In a tf.function (one table of one feature and one of two), compiled or not, the rows
    check names the table and features and shows the rows: run time when uncompiled, compile
    time under XLA, where the rows are known."""
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=2, combiner="sum", name="t")
    emb = tf_embedding.TPUEmbedding({f: tf_embedding.FeatureConfig(table) for f in features},
                                    tf_embedding.SGD(0.1))
    emb.build(per_replica_batch_size=2)

    # Batches of any size: the rows are known only when the function runs.
    @tf.function(input_signature=[{f: tf.SparseTensorSpec([None, None], tf.int64)
                                   for f in features}], jit_compile=jit_compile)
    def forward(batch):
        emb.enqueue(batch, training=False)
        return emb.dequeue()

    def batch(rows):
        return {f: tf.sparse.from_dense(tf.constant([[1]] * rows, tf.int64)) for f in features}

    outputs = forward(batch(2))
    assert [out.shape for out in outputs.values()] == [(2, 2)] * len(features)
    np.testing.assert_array_equal(np.stack(list(outputs.values())),
                                  np.stack([emb.embedding_tables[table][1]] * 2 * len(features))
                                  .reshape(len(features), 2, 2))
    if not jit_compile:
        # The check, the split and the shapes are one op per table: the dequeue has no
        # assertion, tf.cond (a function call per table and step), split or reshape.
        op_types = {op.type for op in forward.get_concrete_function().graph.get_operations()
                    if op.name.startswith("dequeue/")}
        assert "TfeFeatureOutputs" in op_types
        assert not op_types & {"Assert", "If", "StatelessIf", "SplitV", "Reshape"}
    shapes = ", ".join(["[2]"] * len(features))
    rows = ", ".join(["3"] * len(features))
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
            f"Table t: the dequeued batch's rows per feature {features} do not fill their "
            f"output shapes [{shapes}]; a smaller final batch dequeues with partial=True. The "
            "output shapes come from FeatureConfig.output_shape, build() or the first enqueue, "
            f"and must fit every batch. Rows per feature: [{rows}].")):
        forward(batch(3))


def test_build_with_input_shapes_and_partial_final_batch():
    table = tf_embedding.TableConfig(vocabulary_size=10, dim=2, combiner="sum", name="t",
                                     initializer=tf_embedding.RowIdInitializer(1))
    emb = tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table)}, tf_embedding.SGD(1.0))
    emb.build(per_replica_input_shapes={"f": tf.TensorShape([4, None])})
    spec = tf.RaggedTensorSpec([None, None], tf.int64)

    @tf.function(input_signature=[spec])
    def enqueue(ids):
        emb.enqueue({"f": ids})

    @tf.function
    def full():
        activations = emb.dequeue()
        emb.apply_gradients(activations)
        return activations["f"]

    @tf.function
    def partial():
        activations = emb.dequeue(partial=True)
        emb.apply_gradients(activations)
        return activations["f"]

    enqueue(tf.ragged.constant([[1], [2], [3], [4]], dtype=tf.int64))
    assert full().shape == (4, 2)
    enqueue(tf.ragged.constant([[5], [6]], dtype=tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="a smaller final batch dequeues with partial=True"):
        full()
    enqueue(tf.ragged.constant([[5], [6]], dtype=tf.int64))
    assert partial().shape == (2, 2)
    assert partial.get_concrete_function().structured_outputs.shape.as_list() == [None, 2]


def test_tables_are_sharded_on_the_replica_devices_and_not_trainable():
    strategy = make_strategy("mirrored4")
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1))
    tables = {config.name: variable for config, variable in emb.embedding_tables.items()}
    video = tables["video"]
    assert isinstance(video, sharded_variable.ShardedVariable)
    assert [block.shape.as_list() for block in video] == [[4, 4], [3, 4], [3, 4], [3, 4]]
    assert [block.device[-5:] for block in video] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    assert [block.name for block in video] == [f"video_{i}:0" for i in range(4)]
    # Fewer rows than devices: only non-empty blocks exist, as on a TPU.
    assert [block.shape.as_list() for block in tables["tiny"]] == [[1, 2]] * 3
    variables = emb.table_variables()
    accumulators = variables["video"]["accumulators"]
    assert [block.name for block in accumulators] == [
        f"video/accumulators_{i}:0" for i in range(4)]
    assert not any(block.trainable for slots in variables.values()
                   for variable in slots.values() for block in variable)
    assert all(not isinstance(block, tf.distribute.DistributedValues)
               for block in video)
    np.testing.assert_array_equal(tf.convert_to_tensor(video), initial_table("video"))
