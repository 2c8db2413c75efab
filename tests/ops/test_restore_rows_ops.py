"""TfeRestoreRows reads rows of a checkpointed matrix, against numpy, from an unsliced tensor and
from row slices (every boundary), reading only those rows; bad requests are errors naming the
table."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import sharded_variable

from tf_embedding import ops

pytestmark = pytest.mark.unit

KEY = "v/.ATTRIBUTES/VARIABLE_VALUE"
VALUES = np.random.default_rng(0).normal(size=(1003, 5)).astype(np.float32)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    directory = tmp_path_factory.mktemp("checkpoints")
    unsliced = tf.train.Checkpoint(v=tf.Variable(VALUES)).write(str(directory / "one"))
    sliced = tf.train.Checkpoint(v=sharded_variable.ShardedVariable([
        tf.Variable(VALUES[:400]), tf.Variable(VALUES[400:700]), tf.Variable(VALUES[700:])
    ])).write(str(directory / "three"))
    return {"unsliced": unsliced, "sliced": sliced}


def read(prefix, first_row, num_rows, key=KEY):
    return ops.restore_rows(prefix, key, tf.constant(first_row, tf.int64),
                            tf.constant(num_rows, tf.int64), table_name="video")


@pytest.mark.parametrize("layout", ["unsliced", "sliced"])
@pytest.mark.parametrize("first_row, num_rows", [
    (0, 1003), (0, 1), (399, 1), (399, 2), (400, 300), (650, 100), (1002, 1), (5, 0)])
def test_rows_match(checkpoints, layout, first_row, num_rows):
    np.testing.assert_array_equal(read(checkpoints[layout], first_row, num_rows).numpy(),
                                  VALUES[first_row:first_row + num_rows])


def test_reads_only_the_rows(tmp_path):
    rows, dim = 262_144, 64  # 64 MB
    prefix = tf.train.Checkpoint(v=tf.Variable(tf.ones([rows, dim]))).write(str(tmp_path / "c"))

    def status_kb(field):
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith(field))

    read(prefix, 0, 1)  # the op's first run
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    before = status_kb("VmRSS")
    read(prefix, 1000, 16)
    assert status_kb("VmHWM") - before < 16 * 1024  # far below the 64 MB tensor


@pytest.mark.parametrize("first_row, num_rows, key, error, message", [
    (1000, 5, KEY, tf.errors.InvalidArgumentError,
     r"Table 'video': rows \[1000, 1005\) are not all within the checkpoint's 1003 rows"),
    (-1, 2, KEY, tf.errors.InvalidArgumentError, r"rows \[-1, 1\) are not all within"),
    (0, 1, "nothing", tf.errors.NotFoundError, "nothing"),
])
def test_bad_requests_are_errors(checkpoints, first_row, num_rows, key, error, message):
    with pytest.raises(error, match=message):
        read(checkpoints["sliced"], first_row, num_rows, key)


def test_a_tensor_that_is_no_float_matrix_is_refused(tmp_path):
    prefix = tf.train.Checkpoint(v=tf.Variable([1, 2, 3])).write(str(tmp_path / "c"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="int32 \\[3\\], not a float32 matrix"):
        read(prefix, 0, 1)
