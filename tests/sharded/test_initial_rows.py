"""A block's initial rows computed alone (`sharded.initial_rows`) are the same rows of the
initializer's own whole value, bit for bit, for Keras 3's, tf_keras' and TF's initializers of
every family it handles; the others are refused (None), never approximated."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tensorflow.python.ops import init_ops_v2

import tf_embedding
from tf_embedding.sharded import initial_rows
from tf_embedding.sharded.layout import ShardLayout

pytestmark = pytest.mark.unit

SHAPE = (1003, 6)
# Windows starting and ending off a Philox counter's group of 4 (or 2) elements.
WINDOWS = [(0, 1003), (0, 1), (1, 2), (5, 333), (17, 18), (1001, 1003)]

ROW_INITIALIZERS = {
    "keras3-uniform": lambda: keras.initializers.RandomUniform(-0.5, 0.5, seed=3),
    "keras3-normal": lambda: keras.initializers.RandomNormal(seed=1),
    "keras3-truncated-unseeded": lambda: keras.initializers.TruncatedNormal(),
    "keras3-glorot-uniform": lambda: keras.initializers.GlorotUniform(seed=5),
    "keras3-he-normal": lambda: keras.initializers.HeNormal(seed=2),
    "keras3-lecun-normal": lambda: keras.initializers.LecunNormal(seed=2),
    "keras3-constant": lambda: keras.initializers.Constant(0.5),
    "keras3-zeros": lambda: keras.initializers.Zeros(),
    "tf_keras-truncated": lambda: tf_keras.initializers.TruncatedNormal(seed=4),
    "tf_keras-glorot-normal": lambda: tf_keras.initializers.GlorotNormal(seed=1),
    "tf-truncated": lambda: init_ops_v2.TruncatedNormal(stddev=0.1, seed=9),
    "tf-variance-scaling": lambda: init_ops_v2.VarianceScaling(seed=9, distribution="uniform"),
    "tf-constant": lambda: init_ops_v2.Constant(3.0, support_partition=True),
    "row-id": lambda: tf_embedding.RowIdInitializer(3),
}


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.bfloat16])
@pytest.mark.parametrize("name", sorted(ROW_INITIALIZERS))
def test_rows_are_the_whole_values_rows(name, dtype):
    if name == "row-id" and dtype == tf.bfloat16:
        pytest.skip("RowIdInitializer counts rows in the table's dtype (tables are float32)")
    initializer = ROW_INITIALIZERS[name]()
    whole = np.asarray(initializer(SHAPE, dtype=dtype))
    for start, stop in WINDOWS:
        rows = initial_rows.initial_rows(initializer, SHAPE, dtype, start, stop)
        np.testing.assert_array_equal(np.asarray(rows), whole[start:stop],
                                      err_msg=f"rows [{start}, {stop})")
    row_bytes = SHAPE[1] * dtype.size
    for first, stride, window in [(0, 1, 100), (0, 2, 100), (2, 3, 100), (3, 4, 1),
                                  (1, 3, 5000)]:
        # Block `first` of `stride` blocks ('mod'), read `window` of its rows at a time.
        layout = ShardLayout(SHAPE[0], [None] * stride, "mod" if stride > 1 else "div")
        windows = layout.initial_block_windows(initializer, SHAPE, dtype, first,
                                               window_bytes=window * stride * row_bytes)
        np.testing.assert_array_equal(np.concatenate([np.asarray(part) for part in windows]),
                                      whole[first::stride], err_msg=f"rows {first}::{stride}")


@pytest.mark.parametrize("initializer", [
    init_ops_v2.TruncatedNormal(),  # unseeded: a stateful draw
    init_ops_v2.GlorotUniform(),
    init_ops_v2.Constant(np.ones(SHAPE)),
    keras.initializers.Orthogonal(seed=1),
    keras.initializers.RandomUniform(seed=keras.random.SeedGenerator(1)),
    lambda shape, dtype=None: tf.ones(shape, dtype),
], ids=["tf-unseeded", "tf-glorot-unseeded", "array-constant", "orthogonal", "seed-generator",
        "function"])
def test_initializers_without_row_values_give_none(initializer):
    assert initial_rows.initial_rows(initializer, SHAPE, tf.float32, 5, 333) is None


def test_independent_rows_only_for_shape_free_distributions():
    rows = initial_rows.independent_rows(init_ops_v2.TruncatedNormal(stddev=0.1), tf.float32,
                                         7, 6)
    assert rows.shape == (7, 6) and np.all(np.abs(rows) <= 0.2)
    assert initial_rows.independent_rows(init_ops_v2.GlorotUniform(), tf.float32, 7, 6) is None
    layout = ShardLayout(SHAPE[0], [None] * 3, "mod")
    window_bytes = 100 * 3 * SHAPE[1] * 4
    windows = list(layout.initial_block_windows(init_ops_v2.TruncatedNormal(stddev=0.1), SHAPE,
                                                tf.float32, 2, window_bytes=window_bytes))
    assert [part.shape[0] for part in windows] == [100, 100, 100, 34]
    # Neither row values nor a shape-free distribution: no windows (the whole value instead).
    assert layout.initial_block_windows(init_ops_v2.GlorotUniform(), SHAPE, tf.float32, 2,
                                        window_bytes=window_bytes) is None


@pytest.mark.parametrize("partition_strategy, blocks", [("div", 1), ("div", 3), ("mod", 3)])
def test_layout_blocks_hold_the_whole_values_rows(partition_strategy, blocks):
    layout = ShardLayout(SHAPE[0], [None] * blocks, partition_strategy)
    initializer = keras.initializers.TruncatedNormal(seed=11)
    whole = np.asarray(initializer(SHAPE, dtype=tf.float32))
    variable = layout.create_variable("table", SHAPE, tf.float32, initializer, trainable=False)
    for index, block in enumerate(variable.variables):
        np.testing.assert_array_equal(block.numpy(), layout.block_value(whole, index))
        windows = layout.initial_block_windows(initializer, SHAPE, tf.float32, index)
        np.testing.assert_array_equal(np.concatenate([np.asarray(part) for part in windows]),
                                      layout.block_value(whole, index))


@pytest.mark.parametrize("partition_strategy", ["div", "mod"])
def test_table_blocks_name_their_rows(partition_strategy):
    table = tf_embedding.TableConfig(vocabulary_size=11, dim=3, name="t",
                                     initializer=tf_embedding.RowIdInitializer())
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        embedding = tf_embedding.TPUEmbedding(
            {"f": tf_embedding.FeatureConfig(table)}, tf_embedding.Adagrad(0.1),
            table_devices=["/cpu:0"] * 3, partition_strategy=partition_strategy)
    blocks = embedding.table_blocks()["t"]
    assert sorted(blocks) == ["accumulators", "parameters"]
    rows = [row for block in blocks["parameters"] for row in block.rows]
    assert sorted(rows) == list(range(11))
    for block in blocks["parameters"]:
        np.testing.assert_array_equal(block.variable.numpy()[:, 0], list(block.rows))
