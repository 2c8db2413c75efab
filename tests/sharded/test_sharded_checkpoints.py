"""TPUEmbedding checkpoints: stock TF's keys and object graph, each table and slot saved as one
full-shape tensor (slices of its contiguous row blocks; with partition_strategy='mod', the
reassembled table), restorable at any other block count and partition strategy and into the
unsharded classes (stock and tf_embedding's TPUEmbeddingForServing, TPUEmbeddingV0), and back."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

from helpers.checkpoints import object_graph, save
from helpers.sharded import ADAGRAD, TABLES, assert_same_values, feature_config
from helpers.sharded import randomize, sharded, variable_values

pytestmark = pytest.mark.integration

stock = tf.tpu.experimental.embedding


@pytest.mark.parametrize("optimizer, partition_strategy", [
    ("SGD", "div"), ("Adam", "div"), ("FTRL", "div"), ("Adam", "mod")])
def test_keys_and_object_graph_match_stock_tpu_embedding(optimizer, partition_strategy,
                                                         tmp_path):
    ours = sharded("mirrored4", getattr(tf_embedding, optimizer)(0.1),
                   partition_strategy=partition_strategy)
    ours.build()
    theirs = stock.TPUEmbedding(feature_config(stock), getattr(stock, optimizer)(0.1))
    theirs.build()
    ours_path, theirs_path = save(ours, tmp_path / "ours"), save(theirs, tmp_path / "stock")
    assert tf.train.list_variables(ours_path) == tf.train.list_variables(theirs_path)
    assert object_graph(ours_path) == object_graph(theirs_path)
    shapes = dict(tf.train.list_variables(ours_path))
    assert shapes["embedding/video/.ATTRIBUTES/VARIABLE_VALUE"] == [13, 4]


@pytest.mark.parametrize("source, target, restore_before_build", [
    ("default", "mirrored4", True),
    ("mirrored4", "mirrored2", False),
    ("mirrored2", "default", True),
    # (strategy, partition_strategy): 'mod' blocks hold rows r % n, 'div' blocks ranges.
    (("mirrored4", "mod"), ("mirrored2", "div"), True),
    (("mirrored4", "mod"), ("default", "div"), False),
    (("mirrored2", "div"), ("mirrored4", "mod"), True),
    (("mirrored4", "mod"), ("mirrored2", "mod"), False),
])
def test_restore_at_another_block_count(source, target, restore_before_build, tmp_path):
    source, source_partition = source if isinstance(source, tuple) else (source, "div")
    target, target_partition = target if isinstance(target, tuple) else (target, "div")
    writer = sharded(source, partition_strategy=source_partition)
    expected = randomize(writer, seed=1)
    path = save(writer, tmp_path)

    reader = sharded(target, partition_strategy=target_partition)
    if not restore_before_build:
        reader.build()
    status = tf.train.Checkpoint(embedding=reader).restore(path)
    reader.build()
    status.assert_consumed()
    assert_same_values(variable_values(reader), expected)
    blocks = {config.name: list(table) for config, table in reader.embedding_tables.items()}
    assert len(blocks["video"]) == {"default": 1, "mirrored2": 2, "mirrored4": 4}[target]
    if target_partition == "mod":
        # Block b holds rows b, b + n, ...: the restore strided the full tensor.
        for block, variable in enumerate(blocks["video"]):
            np.testing.assert_array_equal(
                variable.numpy(),
                expected["video"]["parameters"][block::len(blocks["video"])])


def test_restore_before_build_reads_each_block_from_the_checkpoint(tmp_path):
    writer = sharded("mirrored2")
    expected = randomize(writer, seed=2)
    path = save(writer, tmp_path)

    def failing_initializer(shape, dtype=None):
        raise AssertionError("initializer called despite a pending restore")

    config = feature_config()
    for feature in config.values():
        feature.table.initializer = failing_initializer
    reader = sharded("mirrored4", config=config)
    tf.train.Checkpoint(embedding=reader).restore(path).assert_existing_objects_matched()
    reader.build()
    assert_same_values(variable_values(reader), expected)


@pytest.mark.parametrize("restore_before_build, partition_strategy, serving", [
    (True, "div", stock), (False, "div", stock),
    (True, "mod", stock), (False, "mod", tf_embedding)])
def test_restore_into_tpu_embedding_for_serving(restore_before_build, partition_strategy,
                                                serving, tmp_path):
    writer = sharded("mirrored4" if partition_strategy == "mod" else "mirrored2",
                     partition_strategy=partition_strategy)
    expected = randomize(writer, seed=3)
    path = save(writer, tmp_path)

    reader = serving.TPUEmbeddingForServing(feature_config(serving),
                                            serving.Adagrad(**ADAGRAD))
    if not restore_before_build:
        reader.build()
    status = tf.train.Checkpoint(embedding=reader).restore(path)
    tables = reader.embedding_tables  # builds (eagerly) if needed
    status.assert_consumed()
    assert_same_values(variable_values(reader), expected)
    video = next(table for config, table in tables.items() if config.name == "video")
    assert video.shape == (13, 4)
    lookup = reader({"favorited": tf.ragged.constant([[12, 1]], dtype=tf.int64)})["favorited"]
    np.testing.assert_allclose(lookup, [expected["video"]["parameters"][[12, 1]].sum(0)])


def test_restore_into_tpu_embedding_v0(tmp_path):
    writer = sharded("mirrored2")
    expected = randomize(writer, seed=4)
    path = save(writer, tmp_path)

    reader = tf_embedding.TPUEmbeddingV0(feature_config(), tf_embedding.Adagrad(**ADAGRAD))
    tf.train.Checkpoint(embedding=reader).restore(path).expect_partial()
    reader.build()
    assert_same_values(variable_values(reader), expected)


@pytest.mark.parametrize("writer_class, partition_strategy", [
    ("TPUEmbeddingForServing", "div"), ("TPUEmbedding", "div"),
    ("TPUEmbeddingForServing", "mod")])
def test_restore_from_stock_unsharded_checkpoints(writer_class, partition_strategy, tmp_path):
    writer = getattr(stock, writer_class)(feature_config(stock), stock.Adagrad(**ADAGRAD))
    expected = randomize(writer, seed=5)
    path = save(writer, tmp_path)

    reader = sharded("mirrored4", partition_strategy=partition_strategy)
    status = tf.train.Checkpoint(embedding=reader).restore(path)
    reader.build()
    status.assert_consumed()
    assert_same_values(variable_values(reader), expected)


def test_restore_of_another_vocabulary_size_is_rejected(tmp_path):
    writer = sharded("mirrored2")
    writer.build()
    path = save(writer, tmp_path)
    config = feature_config()
    config["watched"].table.vocabulary_size = TABLES["video"].vocabulary_size + 1
    reader = sharded("mirrored4", config=config)
    tf.train.Checkpoint(embedding=reader).restore(path)
    with pytest.raises(ValueError, match="Cannot restore variable 'video' of table 'video': the "
                                         r"checkpoint holds shape \(13, 4\) but the table has "
                                         r"shape \(14, 4\)"):
        reader.build()
