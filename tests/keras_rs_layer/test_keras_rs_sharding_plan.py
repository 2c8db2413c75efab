"""tf_embedding.keras_rs.DistributedEmbedding with a `sharding_plan` (docs/sharding_plans.md):
its tables are split as the plan says under MirroredStrategy, keyed by keras-rs's table names,
and the plan is saved in the layer's config and read back."""

import os
import sys

import pytest

if sys.version_info < (3, 11):
    pytest.skip("keras-rs needs Python 3.11 or newer", allow_module_level=True)

import keras_rs  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position

from tf_embedding import keras_rs as embedding_rs  # pylint: disable=wrong-import-position
from tf_embedding import sharding_plan  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1",
                               reason="keras-rs is Keras 3 only"),
              pytest.mark.integration]

PLAN = sharding_plan.ShardingPlan({
    "video": sharding_plan.TableSharding("table_wise", owner=1),
    "user": sharding_plan.TableSharding("row_wise", partition_strategy="mod"),
})


def _features():
    video = keras_rs.layers.TableConfig(name="video", vocabulary_size=9, embedding_dim=4,
                                        optimizer="sgd")
    user = keras_rs.layers.TableConfig(name="user", vocabulary_size=12, embedding_dim=2,
                                       optimizer="sgd")
    return {"watched": keras_rs.layers.FeatureConfig(name="watched", table=video,
                                                     input_shape=(4, 1), output_shape=(4, 4)),
            "user": keras_rs.layers.FeatureConfig(name="user", table=user,
                                                  input_shape=(4, 1), output_shape=(4, 2))}


def test_the_layer_splits_its_tables_as_its_plan_says_and_saves_the_plan():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"])
    with strategy.scope():
        layer = embedding_rs.DistributedEmbedding(_features(), sharding_plan=PLAN.to_config())
        layer.build({"watched": (4, 1), "user": (4, 1)})
    tables = layer.table_variables()
    # The video table whole on the second device; the user table strided over all three.
    assert [tf.DeviceSpec.from_string(block.device).device_index
            for block in tables["video"]["parameters"]] == [1]
    assert [block.shape[0] for block in tables["user"]["parameters"]] == [4, 4, 4]
    config = layer.get_config()
    assert config["sharding_plan"] == PLAN.to_config()
    with strategy.scope():
        restored = embedding_rs.DistributedEmbedding.from_config(config)
    assert restored.get_config()["sharding_plan"] == PLAN.to_config()
    assert embedding_rs.DistributedEmbedding(_features()).get_config()["sharding_plan"] is None
