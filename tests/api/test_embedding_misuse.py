"""Mistakes in using the configs and embedding classes fail where they are made, naming the
table and the problem, instead of training with the wrong numbers or failing later with a raw
TensorFlow error."""

import re

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

pytestmark = pytest.mark.unit


def _features(table):
    return {"watched": tf_embedding.FeatureConfig(table)}


@pytest.mark.parametrize("embedding_class", [tf_embedding.TPUEmbedding,
                                             tf_embedding.TPUEmbeddingV0])
def test_a_table_config_reused_with_another_optimizer_is_refused(embedding_class):
    # TF writes the first object's optimizer into the config; the second would train with it.
    table = tf_embedding.TableConfig(10, 2, name="video")
    embedding_class(_features(table), tf_embedding.SGD(0.1))
    with pytest.raises(ValueError, match=r"Table 'video': .*earlier embedding object.*"
                                         r"SGD\(learning_rate=0.1\).*SGD\(learning_rate=1.0\)"):
        embedding_class(_features(table), tf_embedding.SGD(1.0))


def test_a_table_config_reused_with_an_equal_optimizer_or_for_serving_is_accepted():
    table = tf_embedding.TableConfig(10, 2, name="video")
    optimizer = tf_embedding.Adagrad(0.1)
    tf_embedding.TPUEmbedding(_features(table), optimizer)
    tf_embedding.TPUEmbedding(_features(table), optimizer)
    tf_embedding.TPUEmbedding(_features(table), tf_embedding.Adagrad(0.1))
    serving = tf_embedding.TPUEmbeddingForServing(_features(table), None)
    assert table.optimizer == optimizer
    assert sorted(serving.table_variables()["video"]) == ["accumulators", "parameters"]


def test_a_table_config_with_its_own_optimizer_keeps_it():
    table = tf_embedding.TableConfig(10, 2, name="video", optimizer=tf_embedding.SGD(0.5))
    tf_embedding.TPUEmbedding(_features(table), tf_embedding.SGD(0.1))
    tf_embedding.TPUEmbedding(_features(table), tf_embedding.SGD(1.0))
    assert table.optimizer.learning_rate == 0.5


def test_two_objects_with_their_own_configs_train_with_their_own_optimizers():
    results = []
    for learning_rate in (0.1, 1.0):
        table = tf_embedding.TableConfig(4, 1, name="video", combiner="sum",
                                         initializer=tf.zeros_initializer())
        embedding = tf_embedding.TPUEmbedding(_features(table), tf_embedding.SGD(learning_rate))
        embedding.build([tf.TensorShape([1, 1])])
        embedding.enqueue({"watched": tf.constant([[1]], tf.int64)}, training=True)
        embedding.dequeue()
        embedding.apply_gradients({"watched": tf.ones([1, 1])})
        results.append(embedding.embedding_tables[table].numpy()[1, 0])
    np.testing.assert_array_equal(results, [np.float32(-0.1), np.float32(-1.0)])


SERVING_INPUTS = {
    "dense": lambda: tf.constant([[1], [12]], tf.int64),
    "sparse": lambda: tf.sparse.from_dense(tf.constant([[1, 2]], tf.int64)),
    "ragged": lambda: tf.ragged.constant([[1], [2, 3]], tf.int64),
}


@pytest.mark.parametrize("kind", sorted(SERVING_INPUTS))
def test_serving_lookups_refuse_a_users_own_xla_compilation(kind):
    # XLA drops the lookups' checks (the dense id 12 was clamped silently) and fails on sparse
    # and ragged input with TF's DisableCopyOnRead: the refusal names the supported way.
    table = tf_embedding.TableConfig(10, 2, name="video", combiner="sum")
    serving = tf_embedding.TPUEmbeddingForServing(_features(table), None)
    serving.build()
    compiled = tf.function(lambda ids: serving({"watched": ids}), jit_compile=True)
    with pytest.raises(ValueError, match=r"XLA-compiled function.*pass `jit_compile=True` to "
                                         r"TPUEmbeddingForServing"):
        compiled(SERVING_INPUTS[kind]())


def test_the_jit_compile_argument_keeps_the_checks():
    table = tf_embedding.TableConfig(10, 2, name="video", combiner="sum")
    serving = tf_embedding.TPUEmbeddingForServing(_features(table), None, jit_compile=True)
    serving.build()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"12 is not in \[0, 10\)"):
        tf.function(lambda ids: serving({"watched": ids}))(SERVING_INPUTS["dense"]())


def _two_tables(video_rows, dim=2, embedding_class=tf_embedding.TPUEmbedding):
    video = tf_embedding.TableConfig(video_rows, dim, name="video")
    user = tf_embedding.TableConfig(5, 2, name="user")
    embedding = embedding_class({"f": tf_embedding.FeatureConfig(video),
                                 "g": tf_embedding.FeatureConfig(user)}, tf_embedding.Adagrad(0.1))
    embedding.build()
    return embedding


@pytest.mark.parametrize("embedding_class", [tf_embedding.TPUEmbedding,
                                             tf_embedding.TPUEmbeddingV0,
                                             tf_embedding.TPUEmbeddingForServing])
@pytest.mark.parametrize("video_rows, dim, saved, wanted", [
    (20, 2, "(10, 2)", "(20, 2)"), (10, 3, "(10, 2)", "(10, 3)")])
def test_a_checkpoint_that_does_not_fit_fails_before_anything_is_assigned(
        tmp_path, embedding_class, video_rows, dim, saved, wanted):
    # TF fails in RestoreV2 with a raw shape error; the message names the table and both shapes.
    path = tf.train.Checkpoint(embedding=_two_tables(10, embedding_class=embedding_class)).save(
        str(tmp_path / "c"))
    embedding = _two_tables(video_rows, dim, embedding_class)
    before = {name: variables["parameters"].numpy()
              for name, variables in embedding.table_variables().items()}
    with pytest.raises(ValueError, match=re.escape(
            f"Cannot restore variable 'video' of table 'video': the checkpoint holds shape "
            f"{saved} but the table has shape {wanted} (vocabulary_size, dim). Nothing was "
            "restored.")):
        tf.train.Checkpoint(embedding=embedding).restore(path)
    for name, variables in embedding.table_variables().items():
        np.testing.assert_array_equal(variables["parameters"].numpy(), before[name])


def test_a_fitting_checkpoint_restores_after_build(tmp_path):
    saved = _two_tables(10)
    path = tf.train.Checkpoint(embedding=saved).save(str(tmp_path / "c"))
    embedding = _two_tables(10)
    tf.train.Checkpoint(embedding=embedding).restore(path).assert_consumed()
    for name, variables in embedding.table_variables().items():
        np.testing.assert_array_equal(variables["parameters"].numpy(),
                                      saved.table_variables()[name]["parameters"].numpy())
