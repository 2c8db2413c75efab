"""StridedShardedVariable ('mod' blocks): every whole-table view sees the rows in table order,
against numpy on the same table; checkpoints hold the one full tensor."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.sharded.strided_variable import StridedShardedVariable

pytestmark = pytest.mark.unit

VOCABULARY, DIM, BLOCKS = 11, 3, 4


def table() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, (VOCABULARY, DIM)).astype(np.float32)


def strided(value: np.ndarray) -> StridedShardedVariable:
    return StridedShardedVariable(
        [tf.Variable(value[block::BLOCKS], name=f"t_{block}") for block in range(BLOCKS)],
        name="t")


def test_reads_see_the_rows_in_table_order():
    value = table()
    variable = strided(value)
    assert variable.shape == (VOCABULARY, DIM)
    assert [block.shape[0] for block in variable] == [3, 3, 3, 2]
    np.testing.assert_array_equal(variable.numpy(), value)
    np.testing.assert_array_equal(tf.convert_to_tensor(variable), value)
    np.testing.assert_array_equal(variable + 1.0, value + 1.0)
    np.testing.assert_array_equal(variable[2:9:3], value[2:9:3])
    np.testing.assert_array_equal(variable[5], value[5])
    ids = tf.constant([10, 0, 5, 5, 3], tf.int64)
    np.testing.assert_array_equal(variable.sparse_read(ids), value[ids.numpy()])
    # As a tf.function argument it is rebuilt from its blocks, still strided.
    np.testing.assert_array_equal(tf.function(tf.convert_to_tensor)(variable), value)


def test_writes_go_to_row_r_of_block_r_mod_n():
    value = table()
    variable = strided(np.zeros_like(value))
    variable.assign(value)
    np.testing.assert_array_equal(list(variable)[1], value[1::BLOCKS])
    variable.assign_add(value)
    variable.assign_sub(value / 2)
    expected = 1.5 * value
    np.testing.assert_allclose(variable.numpy(), expected)
    variable.scatter_update(tf.IndexedSlices(tf.zeros([2, DIM]), tf.constant([7, 2], tf.int64)))
    expected[[7, 2]] = 0
    np.testing.assert_allclose(variable.numpy(), expected)
    with pytest.raises(ValueError, match="indices must be a 1-D tensor"):
        variable.sparse_read(tf.constant([[1]], tf.int64))


def test_checkpoint_is_the_full_table_restorable_into_one_variable(tmp_path):
    value = table()
    path = tf.train.Checkpoint(table=strided(value)).save(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(
        tf.train.load_checkpoint(path).get_tensor("table/.ATTRIBUTES/VARIABLE_VALUE"), value)
    plain = tf.Variable(tf.zeros([VOCABULARY, DIM]))
    tf.train.Checkpoint(table=plain).restore(path).assert_consumed()
    np.testing.assert_array_equal(plain, value)
    # And back: an existing strided variable takes a whole-table checkpoint.
    path = tf.train.Checkpoint(table=tf.Variable(2 * value)).save(str(tmp_path / "plain"))
    variable = strided(np.zeros_like(value))
    tf.train.Checkpoint(table=variable).restore(path).assert_consumed()
    np.testing.assert_array_equal(variable.numpy(), 2 * value)
