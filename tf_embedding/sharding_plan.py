"""(Not in TF.) A sharding plan: how each table of a `TPUEmbedding` is split and where its
pieces live, one `TableSharding` per table, for one machine's devices, parameter-server tasks
and MultiWorkerMirroredStrategy workers alike (docs/sharding_plans.md).

```python
from tf_embedding.sharded.planning.planner import plan_sharding
from tf_embedding.sharding_plan import ShardingPlan, TableSharding

plan = ShardingPlan({
    "video": TableSharding("row_wise", partition_strategy="mod"),
    "country": TableSharding("table_wise", owner=1),
})
# or: plan = plan_sharding(feature_config, workers=8, batch_per_worker=2048)
embedding = tf_embedding.TPUEmbedding(feature_config, optimizer, sharding_plan=plan)
```

Kinds (`KINDS`):

* `"row_wise"`: rows split into one block per device ('div' contiguous, 'mod' strided); the
  unique ids travel to their blocks and their rows come back.
* `"row_wise_pooled"`: rows split the same way; each block combines its own lookups into
  partial activations (one machine and parameter-server tasks; results agree with row-wise to
  float rounding).
* `"table_wise"`: the whole table in one block on the device `owner` (an index into the
  strategy's block devices: replica devices, PS tasks in task order, workers by rank).

The plan changes no trained value and no checkpoint: every kind saves stock TF's full-shape
tensors, so a checkpoint restores under any other plan, strategy or worker count.
"""

import dataclasses
import json
from typing import Any, Mapping

from tf_embedding import argument_checks as checks

ROW_WISE = "row_wise"
ROW_WISE_POOLED = "row_wise_pooled"
TABLE_WISE = "table_wise"
KINDS = (ROW_WISE, ROW_WISE_POOLED, TABLE_WISE)
PARTITION_STRATEGIES = ("div", "mod")


@dataclasses.dataclass(frozen=True)
class TableSharding:
    """How one table is split: its kind, the row-wise kinds' partition strategy, and the
    table-wise kind's owner (an index into the strategy's block devices)."""

    kind: str = ROW_WISE
    partition_strategy: str = "div"
    owner: int = 0

    def __post_init__(self) -> None:
        owner = "TableSharding"
        if self.kind not in KINDS:
            checks.refuse(owner, "kind", self.kind, f"one of {list(KINDS)}")
        if self.partition_strategy not in PARTITION_STRATEGIES:
            checks.refuse(owner, "partition_strategy", self.partition_strategy,
                          "'div' or 'mod'")
        checks.check_integer(owner, "owner", self.owner, 0)
        if self.owner and self.kind != TABLE_WISE:
            checks.refuse(owner, "owner", self.owner, "0 unless kind is 'table_wise'",
                          why="a row-wise table has a block on every device")

    def to_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ShardingPlan:
    """{table name: its `TableSharding`}; tables it does not name are row-wise ('div').

    Args:
      tables: {table name: a `TableSharding`, its kind's name, or its `to_config()` dict}.
    """

    def __init__(self, tables: Mapping[str, "TableSharding | str | Mapping[str, Any]"]):
        checks.check_mapping("ShardingPlan", "tables", tables,
                             "{table name: TableSharding, kind name or config dict}")
        self.tables: dict[str, TableSharding] = {}
        for name, sharding in tables.items():
            checks.check_name("ShardingPlan", "tables", name)
            self.tables[name] = _table_sharding(name, sharding)

    @classmethod
    def of(cls, value: Any, owner: str) -> "ShardingPlan":
        """`value` as a plan: a `ShardingPlan` itself, or its config dict.

        Raises:
          TypeError: anything else, naming `owner`'s argument `sharding_plan`.
        """
        if isinstance(value, ShardingPlan):
            return value
        if not isinstance(value, Mapping):
            checks.refuse(owner, "sharding_plan", value,
                          "a tf_embedding.sharding_plan.ShardingPlan or its config dict",
                          TypeError)
        return cls(value)

    def __getitem__(self, table_name: str) -> TableSharding:
        return self.tables.get(table_name, TableSharding())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardingPlan) and self.to_config() == other.to_config()

    def __repr__(self) -> str:
        return f"ShardingPlan({self.to_config()!r})"

    def check_tables(self, table_names: list[str], num_devices: int, owner: str) -> None:
        """Raises ValueError for a table the plan names that does not exist, or a table-wise
        owner past the `num_devices` block devices; `owner` names the class in the message."""
        unknown = sorted(set(self.tables) - set(table_names))
        if unknown:
            raise ValueError(f"{owner}: sharding_plan names tables that do not exist: "
                             f"{unknown}; the tables are {sorted(table_names)}.")
        for name, sharding in self.tables.items():
            if sharding.kind == TABLE_WISE and sharding.owner >= num_devices:
                raise ValueError(
                    f"{owner}: sharding_plan puts table {name!r} on device {sharding.owner}, "
                    f"but the strategy has {num_devices} block device(s) (indices from 0).")

    def to_config(self) -> dict[str, dict[str, Any]]:
        """A JSON-able dict that `from_config` reads back (Keras configs, the job's files)."""
        return {name: sharding.to_config() for name, sharding in sorted(self.tables.items())}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ShardingPlan":
        return cls(config)

    def to_json(self) -> str:
        return json.dumps(self.to_config(), indent=2, sort_keys=True)

    def describe(self) -> str:
        """One line per table, as `tf-embedding` prints the plan."""
        lines = []
        for name, sharding in sorted(self.tables.items()):
            where = (f"on device {sharding.owner}" if sharding.kind == TABLE_WISE
                     else f"'{sharding.partition_strategy}' over every device")
            lines.append(f"{name}: {sharding.kind} {where}")
        return "\n".join(lines)


def _table_sharding(name: str, sharding: Any) -> TableSharding:
    if isinstance(sharding, TableSharding):
        return sharding
    if isinstance(sharding, str):
        return TableSharding(sharding)
    if isinstance(sharding, Mapping):
        unknown = sorted(set(sharding) - {field.name for field in
                                          dataclasses.fields(TableSharding)})
        if unknown:
            raise ValueError(f"ShardingPlan: table {name!r} has unknown keys {unknown}; a "
                             "table's sharding has kind, partition_strategy and owner.")
        return TableSharding(**sharding)
    raise TypeError(f"ShardingPlan: table {name!r} is given {sharding!r}; it must be a "
                    "TableSharding, a kind name or a config dict.")

