"""The Keras layer with a `sharding_plan` (docs/sharding_plans.md): each table gets the plan's
kind and devices under MirroredStrategy, the plan is saved in the layer's config and read back,
and a layer trained by the model's optimizer refuses one."""

import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras
from tf_embedding import sharding_plan

pytestmark = pytest.mark.integration

PLAN = sharding_plan.ShardingPlan({
    "video": sharding_plan.TableSharding("table_wise", owner=1),
    "user": sharding_plan.TableSharding("row_wise", partition_strategy="mod"),
})


def _features():
    video = tf_embedding.TableConfig(20, 4, name="video")
    user = tf_embedding.TableConfig(30, 2, name="user")
    return {"video": tf_embedding.FeatureConfig(video, name="video"),
            "user": tf_embedding.FeatureConfig(user, name="user")}


def test_the_layer_splits_its_tables_as_its_plan_says_and_saves_the_plan():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"])
    with strategy.scope():
        layer = embedding_keras.TPUEmbedding(_features(), "sgd", sharding_plan=PLAN)
        layer.build(None)
    blocks = {table.name: list(variable) for table, variable in layer.embedding_tables.items()}
    # The video table whole on the second device; the user table strided over all three.
    assert [tf.DeviceSpec.from_string(block.device).device_index
            for block in blocks["video"]] == [1]
    assert [block.shape[0] for block in blocks["user"]] == [10, 10, 10]
    user = layer.embedding_tables[next(t for t in layer.embedding_tables if t.name == "user")]
    user.assign(tf.reshape(tf.range(60, dtype=tf.float32), [30, 2]))
    # 'mod': row r in block r % 3, so block 1 holds rows 1, 4, 7, ...
    assert blocks["user"][1].numpy()[:2, 0].tolist() == [2.0, 8.0]
    config = layer.get_config()
    assert config["sharding_plan"] == PLAN.to_config()
    with strategy.scope():
        restored = embedding_keras.TPUEmbedding.from_config(config)
    assert restored.get_config()["sharding_plan"] == PLAN.to_config()
    assert embedding_keras.TPUEmbedding(_features(), "sgd").get_config()["sharding_plan"] is None
