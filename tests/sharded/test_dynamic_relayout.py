"""A dynamic table's checkpoint restored onto another block layout (block count, partition
strategy) before the table is built: every key keeps its row's values and slots, moved to its
block under the new layout, so with a capacity no block fills the restored run continues bit
for bit as the uninterrupted one; a layout whose block cannot hold its keys fails naming the
table and the counts; one of another capacity fails naming both; a restore after build of
another layout fails saying why."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import dynamic_training

pytestmark = pytest.mark.unit

ROOMY = dynamic_training.ROOMY
ROW_RECORDS = dynamic_training.ROW_RECORDS


def trained(tmp_path, blocks: int, partition: str, capacity: int) -> tuple:
    """(the uninterrupted run's embedding, its activations), its checkpoint of step
    CHECKPOINT_STEP at tmp_path/ckpt."""
    strategy = tf.distribute.get_strategy()
    embedding = dynamic_training.embedding_for(strategy, partition, blocks=blocks,
                                               capacity=capacity)
    activations = dynamic_training.train(strategy, embedding,
                                         checkpoint_path=str(tmp_path / "ckpt"))
    return embedding, activations


def restored(tmp_path, blocks: int, partition: str, capacity: int):
    embedding = dynamic_training.embedding_for(tf.distribute.get_strategy(), partition,
                                               blocks=blocks, capacity=capacity)
    status = tf.train.Checkpoint(embedding=embedding).read(str(tmp_path / "ckpt"))
    embedding.build()
    status.assert_consumed()
    return embedding


@pytest.mark.parametrize("source, target", [
    ((1, "div"), (2, "div")), ((2, "div"), (3, "mod")), ((4, "mod"), (1, "div")),
    ((2, "mod"), (2, "div"))])
def test_a_restore_onto_another_layout_continues_as_the_uninterrupted_run(source, target,
                                                                          tmp_path):
    original, activations = trained(tmp_path, *source, ROOMY)
    embedding = restored(tmp_path, *target, ROOMY)
    saved = tf.train.load_checkpoint(str(tmp_path / "ckpt")).get_tensor(ROW_RECORDS)
    moved = tf.train.load_checkpoint(tf.train.Checkpoint(embedding=embedding).write(
        str(tmp_path / "moved"))).get_tensor(ROW_RECORDS)
    # The same keys, records and (checked below) values, in other rows; onto one block, every
    # key already lies in its block.
    assert np.array_equal(moved, saved) == (target[0] == 1)
    occupied = saved[:, 0] >= 0
    assert sorted(map(tuple, moved[moved[:, 0] >= 0])) == sorted(map(tuple, saved[occupied]))
    continued = dynamic_training.train(tf.distribute.get_strategy(), embedding,
                                       first_step=dynamic_training.CHECKPOINT_STEP)
    for step, value in enumerate(continued, dynamic_training.CHECKPOINT_STEP):
        np.testing.assert_array_equal(value, activations[step], err_msg=f"step {step}")
    assert embedding.dynamic_statistics() == original.dynamic_statistics()
    statistics = original.dynamic_statistics()["items"]
    assert statistics["admitted"] > 0 and statistics["evicted"] > 0
    # Each key's row and slot values, wherever its row is.
    dynamic_training.assert_same_rows_by_key(
        dynamic_training.rows_by_key(embedding, str(tmp_path / "restored")),
        dynamic_training.rows_by_key(original, str(tmp_path / "original")))


def test_a_layout_whose_block_cannot_hold_its_keys_fails_naming_the_table(tmp_path):
    # A full table of 6 rows in one block; onto 2 blocks of 3, 4 of its keys belong to one.
    trained(tmp_path, 1, "div", 6)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'items': the checkpoint's dynamic index holds 4 keys that "
                             r"belong to block 1 of this table's 2 \(partition_strategy "
                             r"'div'\), which has 3 rows"):
        restored(tmp_path, 2, "div", 6)


def test_a_checkpoint_of_another_capacity_fails_naming_both_before_build_too(tmp_path):
    trained(tmp_path, 1, "div", 12)
    with pytest.raises(ValueError, match=r"of table 'items': the checkpoint holds shape \(12, "
                                         r"3\) but the table has shape \(64, 3\)"):
        restored(tmp_path, 2, "div", ROOMY)


def test_a_restore_after_build_onto_another_layout_fails_saying_why(tmp_path):
    trained(tmp_path, 1, "div", ROOMY)
    embedding = dynamic_training.embedding_for(tf.distribute.get_strategy(), "div", blocks=2,
                                               capacity=ROOMY)
    embedding.build()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table 'items'.*another block layout.*only in a restore before the "
                             "table is built"):
        tf.train.Checkpoint(embedding=embedding).read(str(tmp_path / "ckpt"))
