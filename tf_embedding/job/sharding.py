"""`--sharding`: the `ShardingPlan` the sharded API's tables get (docs/sharding_plans.md).

* `row`: every table row-wise over every block device (the engine's default; no plan).
* `table`: every table whole on one block device, the largest (rows x dim) first on the device
  with the fewest floats so far (what `--ps-placement whole` did on parameter servers).
* `auto`: on a MultiWorkerMirroredStrategy cluster, the planner's plan for this cluster, from
  the data's ids per sample (a feature of 1..max_ids ids has (1 + max_ids) / 2); elsewhere
  row-wise, which the planner does not model.
* a path: a JSON file of a plan's config (`ShardingPlan.to_json()`).
"""

import json
import math
from typing import Any, Sequence

import tensorflow as tf

from tf_embedding.job.data.spec import DataSpec
from tf_embedding.sharded import parameter_server
from tf_embedding.sharded.multi_worker import group
from tf_embedding.sharded.planning import planner
from tf_embedding import sharding_plan as plans

CHOICES = ("row", "table", "auto")


def plan_for(sharding: str, feature_config: dict[str, Any], spec: DataSpec,
             batch_size: int) -> plans.ShardingPlan | None:
    """The plan `--sharding` asks for under the current strategy (None: row-wise).

    Raises:
      ValueError: a file that does not hold a plan (naming the file).
    """
    if sharding == "row":
        return None
    strategy = tf.distribute.get_strategy()
    devices = block_device_count(strategy)
    if sharding == "table":
        return whole_tables(tables_of(feature_config), devices)
    if sharding == "auto":
        if not group.is_multi_worker_strategy(strategy):
            return None
        return planner.plan_sharding(
            feature_config, devices, math.ceil(batch_size / devices),
            {feature.name: (1 + feature.max_ids) / 2 for feature in spec.features})
    try:
        with open(sharding) as f:
            return plans.ShardingPlan(json.load(f))
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"--sharding {sharding}: not one of {list(CHOICES)} nor a readable "
                         f"JSON file of a sharding plan: {error}") from None


def block_device_count(strategy: tf.distribute.Strategy) -> int:
    """How many devices a table-wise table may be put on: the PS tasks, or the replicas (one
    per worker on a multi-worker cluster)."""
    if parameter_server.is_parameter_server_strategy(strategy):
        return len(parameter_server.ps_devices(strategy))
    return strategy.num_replicas_in_sync


def whole_tables(tables: Sequence[Any], devices: int) -> plans.ShardingPlan:
    """Each table whole on one of `devices` devices, the largest (rows x dim) first on the
    device with the fewest floats so far (the first of them on a tie)."""
    load = [0] * devices
    placed = {}
    for table in sorted(tables, key=lambda t: -t.vocabulary_size * t.dim):
        owner = load.index(min(load))
        load[owner] += table.vocabulary_size * table.dim
        placed[table.name] = plans.TableSharding(plans.TABLE_WISE, owner=owner)
    return plans.ShardingPlan(placed)


def tables_of(feature_config: dict[str, Any]) -> list[Any]:
    """The TableConfigs of `feature_config`'s features, each once, in order of first use."""
    return list({id(f.table): f.table for f in feature_config.values()}.values())
