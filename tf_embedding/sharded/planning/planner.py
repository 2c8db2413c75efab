"""`plan_tables` (and `plan_sharding`, its public form over a feature config): a sharding plan for a MultiWorkerMirroredStrategy cluster from a cost model.

The cost of a plan is the busiest worker's bytes per step, sent plus received (`traffic`),
under a memory bound per worker (each table's rows and optimizer slots, float32). Every table
starts row-wise, the kind whose bytes stay bounded as workers are added; then, smallest first,
a table moves whole onto the worker with the least traffic where it fits, if that lowers the
busiest worker's bytes (tables of few distinct ids on clusters of few workers). Greedy, as
TorchRec's planner partitions; it does not search every assignment.
"""

import dataclasses
from typing import Any, Mapping, Sequence

from tensorflow.python.util import nest

from tf_embedding import argument_checks as checks
from tf_embedding import sharding_plan as plans
from tf_embedding.sharded.planning import traffic


@dataclasses.dataclass(frozen=True)
class PlannedTable:
    """What the planner knows of one table."""

    name: str
    load: traffic.TableLoad
    slots: int = 0  # optimizer slot variables of the table's shape


def _table_bytes(table: PlannedTable) -> float:
    return 4.0 * table.load.vocabulary_size * table.load.dim * (1 + table.slots)


def plan_tables(tables: Sequence[PlannedTable], workers: int,
                memory_per_worker: float | None = None) -> plans.ShardingPlan:
    """A plan for `tables` on `workers` workers with at most `memory_per_worker` bytes of
    tables and slots each (None: no bound).

    Raises:
      ValueError: the tables do not fit the workers' memory even row-wise.
    """
    memory = [0.0] * workers
    load = [0.0] * workers  # each worker's bytes per step, sent plus received
    for table in tables:
        for rank in range(workers):
            memory[rank] += _table_bytes(table) / workers
            load[rank] += traffic.row_wise(table.load, workers).busiest
    if memory_per_worker is not None and max(memory) > memory_per_worker:
        raise ValueError(
            f"The tables need {max(memory) / 2**30:.2f} GiB per worker even split over all "
            f"{workers} workers, more than the {memory_per_worker / 2**30:.2f} GiB given.")
    chosen: dict[str, plans.TableSharding] = {}
    for table in sorted(tables, key=_table_bytes):
        row = traffic.row_wise(table.load, workers)
        whole = traffic.table_wise(table.load, workers)
        # Moving the table whole onto `owner`: its bytes there become the owner's, everywhere
        # else a non-owner's.
        def moved(owner: int) -> list[float]:
            return [value - row.busiest + (whole.busiest if rank == owner
                                           else whole.sent + whole.received)
                    for rank, value in enumerate(load)]
        fits = [rank for rank in range(workers)
                if memory_per_worker is None or memory[rank] + _table_bytes(table) * (
                    1 - 1 / workers) <= memory_per_worker]
        if not fits:
            continue
        owner = min(fits, key=lambda rank: max(moved(rank)))
        if max(moved(owner)) < max(load):
            load = moved(owner)
            for rank in range(workers):
                memory[rank] += (_table_bytes(table) if rank == owner else 0.0) - (
                    _table_bytes(table) / workers)
            chosen[table.name] = plans.TableSharding(plans.TABLE_WISE, owner=owner)
    return plans.ShardingPlan(chosen)


def busiest_bytes(tables: Sequence[PlannedTable], workers: int,
                  plan: plans.ShardingPlan) -> float:
    """The busiest worker's bytes per step, sent plus received, under `plan`."""
    load = [0.0] * workers
    for table in tables:
        sharding = plan[table.name]
        if sharding.kind == plans.TABLE_WISE:
            whole = traffic.table_wise(table.load, workers)
            for rank in range(workers):
                load[rank] += (whole.busiest if rank == sharding.owner
                               else whole.sent + whole.received)
        else:
            row = traffic.row_wise(table.load, workers).busiest
            load = [value + row for value in load]
    return max(load)


def plan_sharding(feature_config: Any, workers: int, batch_per_worker: int,
                  ids_per_sample: Mapping[str, float] | None = None,
                  memory_per_worker: float | None = None) -> plans.ShardingPlan:
    """(Not in TF.) A `ShardingPlan` for a MultiWorkerMirroredStrategy cluster of `workers`
    workers, each enqueueing `batch_per_worker` samples per step, that keeps the busiest
    worker's bytes per step low (docs/sharding_plans.md, "The planner").

    Args:
      feature_config: the nested `FeatureConfig`s given to `TPUEmbedding`.
      workers: the worker count.
      batch_per_worker: samples per worker and step.
      ids_per_sample: {feature name or path: mean ids per sample}; 1 for features it does not
        name (one-hot).
      memory_per_worker: bytes each worker may hold of tables and slots; None: no bound.

    Raises:
      ValueError: the tables do not fit even row-wise.
    """
    checks.check_integer("plan_sharding", "workers", workers, 1)
    checks.check_integer("plan_sharding", "batch_per_worker", batch_per_worker, 1)
    ids_per_sample = dict(ids_per_sample or {})
    rows: dict[str, float] = {}
    lookups: dict[str, float] = {}
    configs: dict[str, Any] = {}
    for path, feature in nest.flatten_with_joined_string_paths(feature_config):
        table = feature.table
        configs[table.name] = table
        positions = feature.max_sequence_length or 1
        hot = ids_per_sample.get(feature.name, ids_per_sample.get(path, 1.0))
        rows[table.name] = rows.get(table.name, 0.0) + batch_per_worker * positions
        lookups[table.name] = lookups.get(table.name, 0.0) + batch_per_worker * hot
    tables = [PlannedTable(name, traffic.TableLoad(table.vocabulary_size, table.dim,
                                                   rows[name], lookups[name] / rows[name]),
                           slots=len(table.optimizer.slot_names()) if table.optimizer else 0)
              for name, table in configs.items()]
    return plan_tables(tables, workers, memory_per_worker)
