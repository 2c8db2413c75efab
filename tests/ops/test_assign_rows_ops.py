"""TfeAssignRows writes a window of rows in place (TfeResetRows: chosen rows from a source),
against numpy; a tensor read before it keeps its values (copy-on-write); every bad input is an
InvalidArgumentError naming the table."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from tf_embedding import ops

pytestmark = pytest.mark.unit


def table(rows=7, dim=3):
    return resource_variable_ops.ResourceVariable(
        np.arange(rows * dim, dtype=np.float32).reshape(rows, dim), name="t")


@pytest.mark.parametrize("first_row, count", [(0, 7), (0, 1), (3, 2), (6, 1), (4, 0)])
def test_rows_are_written_and_the_rest_kept(first_row, count):
    variable = table()
    before = variable.read_value()  # shares the buffer: the write must copy first
    expected = before.numpy().copy()
    rows = np.random.default_rng(first_row).normal(size=(count, 3)).astype(np.float32)
    expected[first_row:first_row + count] = rows
    ops.assign_rows(variable, tf.constant(first_row, tf.int64), rows, table_name="video")
    np.testing.assert_array_equal(variable.numpy(), expected)
    np.testing.assert_array_equal(before.numpy(), np.arange(21, dtype=np.float32).reshape(7, 3))


@pytest.mark.parametrize("first_row, rows, message", [
    (5, np.zeros([3, 3], np.float32), r"rows \[5, 8\) are not all within the table's 7 rows"),
    (-1, np.zeros([1, 3], np.float32), r"rows \[-1, 0\) are not all within"),
    (0, np.zeros([1, 2], np.float32), "rows have 2 columns, the table 3"),
    (0, np.zeros([3], np.float32), "rows must be a matrix"),
    ([0], np.zeros([1, 3], np.float32), "first_row must be a scalar"),
])
def test_bad_windows_name_the_table(first_row, rows, message):
    variable = table()
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"Table 'video': .*{message}"):
        ops.assign_rows(variable, tf.constant(first_row, tf.int64), rows, table_name="video")
    np.testing.assert_array_equal(variable.numpy(), np.arange(21, dtype=np.float32).reshape(7, 3))


def test_reset_rows_copies_each_rows_source_row_in_place():
    variable = table()
    before = variable.read_value()
    source = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    rows, source_rows = np.array([5, 0, 2], np.int64), np.array([3, 3, 0], np.int64)
    expected = before.numpy().copy()
    expected[rows] = source[source_rows]
    ops.reset_rows(variable, rows, source, source_rows, table_name="video")
    np.testing.assert_array_equal(variable.numpy(), expected)
    np.testing.assert_array_equal(before.numpy(), np.arange(21, dtype=np.float32).reshape(7, 3))


@pytest.mark.parametrize("rows, source, source_rows, message", [
    ([7], np.zeros([1, 3]), [0], r"rows\[0\] is 7, not a row of the 7 rows"),
    ([1, -1], np.zeros([1, 3]), [0, 0], r"rows\[1\] is -1, not a row of the 7 rows"),
    ([1], np.zeros([2, 3]), [2], r"source_rows\[0\] is 2, not a row of the 2 rows"),
    ([1], np.zeros([1, 2]), [0], "source has 2 columns, the table 3"),
    ([1, 2], np.zeros([1, 3]), [0], "1 source_rows for 2 rows"),
    ([[1]], np.zeros([1, 3]), [0], "rows must be a vector"),
    ([1], np.zeros([3]), [0], "source must be a matrix"),
])
def test_bad_resets_name_the_table_and_change_nothing(rows, source, source_rows, message):
    variable = table()
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"Table 'video': .*{message}"):
        ops.reset_rows(variable, tf.constant(rows, tf.int64), tf.constant(source, tf.float32),
                       tf.constant(source_rows, tf.int64), table_name="video")
    np.testing.assert_array_equal(variable.numpy(), np.arange(21, dtype=np.float32).reshape(7, 3))
