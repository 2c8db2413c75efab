"""Where each table's blocks live, how they split its rows and how lookups meet them: from a
`ShardingPlan` (`sharding_plan=`), or from the options before it (`table_devices`, `traffic`,
`partition_strategy`), which stay as they were (docs/sharding_plans.md says how they map)."""

import dataclasses
from typing import Any, Mapping, Sequence

from tf_embedding import sharding_plan as plans
from tf_embedding.sharded import engine_options

OWNER = engine_options.OWNER


@dataclasses.dataclass(frozen=True)
class Placement:
    """Per table name: its blocks' devices, its partition strategy, and whether its blocks
    combine their own lookups (pooled)."""

    devices: dict[str, tuple[str | None, ...]]
    partition_strategies: dict[str, str]
    pooled: frozenset[str]


def from_options(table_devices: Sequence[str] | Mapping[str, Sequence[str]] | None,
                 traffic: Mapping[str, str] | None, partition_strategy: str,
                 default: Sequence[str | None], table_configs: Sequence[Any],
                 pipelined: bool, parameter_servers: bool) -> Placement:
    """The placement `table_devices` / `traffic` / `partition_strategy` ask for."""
    names = [table.name for table in table_configs]
    return Placement(
        engine_options.checked_table_devices(table_devices, default, names, parameter_servers),
        {name: partition_strategy for name in names},
        engine_options.checked_traffic(traffic, table_configs, pipelined))


def from_plan(plan: Any, default: Sequence[str | None], table_configs: Sequence[Any],
              pipelined: bool, on_workers: bool) -> Placement:
    """The placement of `plan` (a `ShardingPlan` or its config dict) over the strategy's block
    devices `default` (replica devices, PS tasks, or the workers by rank).

    Raises:
      ValueError / TypeError: a malformed plan, a table or device it names that does not
        exist, or a kind the strategy cannot run (pooled lookups under
        MultiWorkerMirroredStrategy, whose lookups travel as rows to keep one process's bits).
    """
    plan = plans.ShardingPlan.of(plan, OWNER)
    names = [table.name for table in table_configs]
    plan.check_tables(names, len(default), OWNER)
    devices, partitions, traffic = {}, {}, {}
    for name in names:
        sharding = plan[name]
        devices[name] = ((default[sharding.owner],) if sharding.kind == plans.TABLE_WISE
                         else tuple(default))
        partitions[name] = sharding.partition_strategy
        if sharding.kind == plans.ROW_WISE_POOLED:
            if on_workers:
                raise ValueError(
                    f"{OWNER}: sharding_plan makes table {name!r} row_wise_pooled, which "
                    "MultiWorkerMirroredStrategy does not run: its lookups travel as rows, "
                    "which keeps one process's bits (docs/multi_worker.md).")
            traffic[name] = "partial"
    return Placement(devices, partitions,
                     engine_options.checked_traffic(traffic, table_configs, pipelined))


def check_one_way(sharding_plan: Any, table_devices: Any, traffic: Any,
                  partition_strategy: str) -> None:
    """Raises ValueError if `sharding_plan` is given with the options it replaces."""
    given = [name for name, value in (("table_devices", table_devices), ("traffic", traffic))
             if value is not None]
    if partition_strategy != "div":
        given.append("partition_strategy")
    if sharding_plan is not None and given:
        raise ValueError(f"{OWNER}: sharding_plan says where every table lives and how it is "
                         f"split, so it does not combine with {', '.join(given)}: put them in "
                         "the plan (tf_embedding.TableSharding).")
