"""`TPUEmbedding(sharding_plan=...)` in one process: a plan mixing every kind trains as numpy
says under MirroredStrategy and the default strategy, each table gets the kind and devices the
plan names, a checkpoint moves between plans, and a bad plan is refused naming the table.
(On MultiWorkerMirroredStrategy workers: tests/multi_worker/test_multi_worker_training.py.)"""

import json

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import sharding_plan
from tf_embedding.sharded.sharding.row_wise import RowWise
from tf_embedding.sharded.sharding.row_wise_pooled import RowWisePooled
from tf_embedding.sharded.sharding.table_wise import TableWise

from helpers import sharded_training as steps_lib
from helpers.sharded import TABLES, feature_config, variable_values

pytestmark = pytest.mark.integration

MIXED = sharding_plan.ShardingPlan({
    "video": sharding_plan.TableSharding("table_wise", owner=2),
    "user": sharding_plan.TableSharding("row_wise", partition_strategy="mod"),
    "query": "row_wise_pooled",
})


@pytest.mark.parametrize("optimizer, strategy", [("adagrad", "mirrored4"), ("adam", "default")])
def test_a_mixed_plan_trains_as_numpy_says(optimizer, strategy):
    plan = MIXED if strategy == "mirrored4" else sharding_plan.ShardingPlan(
        {"user": sharding_plan.TableSharding("row_wise", partition_strategy="mod")})
    emb = steps_lib.train_and_check(strategy, "ragged", steps_lib.OPTIMIZERS[optimizer],
                                    sharding_plan=plan)
    kinds = {sharding.name: type(sharding) for sharding in emb.engine.shardings}
    if strategy == "mirrored4":
        assert kinds == {"video": TableWise, "user": RowWise, "query": RowWisePooled,
                         "tiny": RowWise}
        video = next(s for s in emb.engine.shardings if s.name == "video")
        assert [tf.DeviceSpec.from_string(d).device_index for d in video.table.layout.devices] \
            == [2]
    else:
        assert set(kinds.values()) == {TableWise}


def test_a_checkpoint_moves_between_plans(tmp_path):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"])
    with strategy.scope():
        first = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1),
                                          sharding_plan=MIXED)
        first.build()
    for table, variables in first.table_variables().items():
        for slot, variable in variables.items():
            shape = variable.shape
            variable.assign(np.random.default_rng(len(table + slot)).normal(
                size=shape).astype(np.float32))
    path = tf.train.Checkpoint(embedding=first).save(str(tmp_path / "ckpt"))
    expected = variable_values(first)
    second = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1),
                                       sharding_plan={"user": "table_wise"})
    second.build()
    tf.train.Checkpoint(embedding=second).restore(path).assert_consumed()
    restored = variable_values(second)
    for table in TABLES:
        for slot in expected[table]:
            np.testing.assert_array_equal(restored[table][slot], expected[table][slot])


def _embedding(**options):
    return tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1), **options)


def test_bad_plans_are_refused_naming_the_table():
    with pytest.raises(ValueError, match=r"sharding_plan names tables that do not exist: "
                                         r"\['videos'\]"):
        _embedding(sharding_plan={"videos": "table_wise"})
    with pytest.raises(ValueError, match="sharding_plan puts table 'video' on device 3, but the "
                                         r"strategy has 1 block device\(s\)"):
        _embedding(sharding_plan={"video": {"kind": "table_wise", "owner": 3}})
    with pytest.raises(ValueError, match="does not combine with table_devices, "
                                         "partition_strategy"):
        _embedding(sharding_plan={}, table_devices=["/cpu:0"], partition_strategy="mod")
    with pytest.raises(ValueError, match="Table user has a QuantizationConfig"):
        config = feature_config()
        config["age"].table.quantization_config = tf_embedding.QuantizationConfig(8, -1.0, 1.0)
        tf_embedding.TPUEmbedding(config, tf_embedding.SGD(0.1),
                                  sharding_plan={"user": "row_wise_pooled"})


def test_table_sharding_and_plan_arguments_are_checked():
    with pytest.raises(ValueError, match="argument `kind` is 'column_wise'; it must be one of "
                                         r"\['row_wise', 'row_wise_pooled', 'table_wise'\]"):
        sharding_plan.TableSharding("column_wise")
    with pytest.raises(ValueError, match="argument `partition_strategy` is 'stride'"):
        sharding_plan.TableSharding(partition_strategy="stride")
    with pytest.raises(ValueError, match="argument `owner` is 2; it must be 0 unless kind is "
                                         "'table_wise'"):
        sharding_plan.TableSharding("row_wise", owner=2)
    with pytest.raises(TypeError, match="argument `owner` is 1.0"):
        sharding_plan.TableSharding("table_wise", owner=1.0)
    with pytest.raises(ValueError, match=r"table 'video' has unknown keys \['device'\]"):
        sharding_plan.ShardingPlan({"video": {"kind": "table_wise", "device": 1}})
    with pytest.raises(TypeError, match="table 'video' is given 3"):
        sharding_plan.ShardingPlan({"video": 3})


def test_a_plan_round_trips_through_its_config_and_json():
    config = MIXED.to_config()
    assert config["query"] == {"kind": "row_wise_pooled", "partition_strategy": "div",
                               "owner": 0}
    assert sharding_plan.ShardingPlan.from_config(config) == MIXED
    assert sharding_plan.ShardingPlan(json.loads(MIXED.to_json())) == MIXED
    assert MIXED["tiny"] == sharding_plan.TableSharding()  # not named: row-wise 'div'
    assert MIXED.describe().splitlines() == [
        "query: row_wise_pooled 'div' over every device",
        "user: row_wise 'mod' over every device",
        "video: table_wise on device 2"]
