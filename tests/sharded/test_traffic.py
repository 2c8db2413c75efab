"""How lookups meet a table's blocks (`TPUEmbedding(traffic=...)`), in one process: the partial
mode's regrouping of a CSR batch by block (`ShardLayout.group_by_block`), training in the partial
mode against numpy under the default strategy and MirroredStrategy, and the option's errors.
The same modes on a cluster: tests/cluster/test_parameter_server.py."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding.sharded.layout import ShardLayout

from helpers import sharded_training as steps_lib
from helpers.sharded import TABLES, feature_config, variable_values

pytestmark = pytest.mark.integration

PARTIAL = {name: "partial" for name in TABLES}


def test_group_by_block_gives_each_block_its_lookups_in_row_order():
    layout = ShardLayout(10, [None, None, None])  # blocks [0, 4), [4, 7), [7, 10)
    row_splits = tf.constant([0, 3, 3, 7], tf.int64)
    ids = tf.constant([9, 0, 5, 4, 4, 1, 8], tf.int64)
    gains = tf.constant([1, 2, 3, 4, 5, 6, 7], tf.float32)
    grouped = layout.group_by_block(row_splits, ids, gains)
    batches = [[part.numpy().tolist() for part in batch]
               for batch in layout.block_batches(*grouped)]
    assert batches == [
        [[0, 1, 1, 2], [0, 1], [2.0, 6.0]],  # block 0: ids 0 (row 0) and 1 (row 2)
        [[0, 1, 1, 3], [1, 0, 0], [3.0, 4.0, 5.0]],  # block 1: 5 (row 0), 4 and 4 (row 2)
        [[0, 1, 1, 2], [2, 1], [1.0, 7.0]],  # block 2: 9 (row 0), 8 (row 2)
    ]
    # Blocks without lookups get empty batches over the same rows.
    empty = layout.block_batches(*layout.group_by_block(
        tf.constant([0, 1, 2], tf.int64), tf.constant([0, 3], tf.int64), tf.ones([2])))
    assert [batch[0].numpy().tolist() for batch in empty] == [[0, 1, 2], [0, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize("optimizer, strategy, options", [
    ("adagrad", "default", {"table_devices": ["/cpu:0", "/cpu:1", "/cpu:0"]}),
    ("ftrl", "mirrored2", {}),
    ("adam", "mirrored4", {}),
    ("sgd", "mirrored2", {"table_devices": ["/cpu:3", "/cpu:2", "/cpu:1", "/cpu:0"]}),
])
def test_partial_traffic_trains_as_numpy_says(optimizer, strategy, options):
    steps_lib.train_and_check(strategy, "ragged", steps_lib.OPTIMIZERS[optimizer],
                              traffic=PARTIAL, **options)


def test_partial_and_rows_traffic_agree_to_rounding():
    def trained(traffic):
        emb = steps_lib.train_and_check("default", "sparse", steps_lib.OPTIMIZERS["adagrad"],
                                        table_devices=["/cpu:0", "/cpu:1"], traffic=traffic)
        return variable_values(emb)

    rows, partial = trained({}), trained(PARTIAL)
    for table in TABLES:
        np.testing.assert_allclose(partial[table]["parameters"], rows[table]["parameters"],
                                   rtol=1e-6, atol=1e-7)


def embedding(**options):
    return tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1), **options)


def test_traffic_errors_name_the_table():
    with pytest.raises(ValueError, match=r"traffic names table 'videos', which is not a table "
                                         r"of this TPUEmbedding \(tables: \['user', 'video'"):
        embedding(traffic={"videos": "partial"})
    with pytest.raises(ValueError, match="traffic of table 'video' must be 'rows' or 'partial', "
                                         "got 'ids'"):
        embedding(traffic={"video": "ids"})
    with pytest.raises(ValueError, match=r"traffic 'partial' \(tables \['user'\]\) does not "
                                         "combine with pipeline_execution_with_tensor_core"):
        embedding(traffic={"user": "partial"}, pipeline_execution_with_tensor_core=True)
    config = feature_config()
    config["age"].table.quantization_config = tf_embedding.QuantizationConfig(8, -1.0, 1.0)
    with pytest.raises(ValueError, match="Table user has a QuantizationConfig"):
        tf_embedding.TPUEmbedding(config, tf_embedding.SGD(0.1), traffic={"user": "partial"})
