"""--sharding: the plan `tf-embedding train` gives the sharded API's tables (job/sharding.py),
its deprecated form --ps-placement, and its errors. (tests/cluster/test_parameter_server.py
trains whole tables on a loopback cluster bit-identical to one process.)"""

import json

import pytest

import tf_embedding
from tf_embedding import sharding_plan
from tf_embedding.job import cli, embedding_apis, sharding
from tf_embedding.job.data.spec import synthetic_spec

pytestmark = pytest.mark.unit


def table(name: str, rows: int, dim: int = 16) -> tf_embedding.TableConfig:
    return tf_embedding.TableConfig(rows, dim, name=name)


def owners(plan: sharding_plan.ShardingPlan) -> dict[str, int]:
    assert {entry.kind for entry in plan.tables.values()} == {"table_wise"}
    return {name: entry.owner for name, entry in plan.tables.items()}


def test_largest_tables_first_on_the_least_loaded_device():
    tables = [table("a", 100), table("b", 1000), table("c", 600), table("d", 500),
              table("e", 10, dim=2000)]
    # By rows x dim: e 20000, b 16000, c 9600, d 8000, a 1600.
    assert owners(sharding.whole_tables(tables, 3)) == {"e": 0, "b": 1, "c": 2, "d": 2, "a": 1}


def test_the_default_job_spreads_its_tables_over_two_devices():
    spec = synthetic_spec()
    tables = sharding.tables_of(embedding_apis.feature_config(spec, 16, 0))
    placed = owners(sharding.whole_tables(tables, 2))
    assert sorted(placed) == sorted(t.name for t in spec.tables)
    # The 2M-row table alone on one device, everything else on the other.
    assert {name for name, owner in placed.items() if owner == 0} == {"user"}


def test_each_choice_gives_its_plan_in_one_process(tmp_path):
    spec = synthetic_spec()
    features = embedding_apis.feature_config(spec, 16, 0)
    assert sharding.plan_for("row", features, spec, 4096) is None
    assert sharding.plan_for("auto", features, spec, 4096) is None  # not a multi-worker run
    assert set(owners(sharding.plan_for("table", features, spec, 4096)).values()) == {0}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"user": {"kind": "row_wise", "partition_strategy": "mod"}}))
    assert sharding.plan_for(str(path), features, spec, 4096)["user"].partition_strategy == "mod"
    path.write_text(json.dumps({"user": "column_wise"}))
    with pytest.raises(ValueError, match=f"--sharding {path}: not one of .* nor a readable "
                                         "JSON file of a sharding plan: .*column_wise"):
        sharding.plan_for(str(path), features, spec, 4096)
    with pytest.raises(ValueError, match="--sharding nowhere.json: not one of"):
        sharding.plan_for("nowhere.json", features, spec, 4096)


def test_ps_placement_whole_is_sharding_table_and_needs_the_sharded_api():
    with pytest.warns(DeprecationWarning, match="use --sharding table"):
        _, options, _ = cli.parse(["train", "--ps-placement", "whole"])
    assert options.sharding == "table"
    with pytest.raises(ValueError, match="--ps-placement whole is --sharding table"):
        cli.parse(["train", "--ps-placement", "whole", "--sharding", "auto"])
    with pytest.raises(ValueError, match="--sharding table splits the sharded API's"):
        cli.parse(["train", "--sharding", "table", "--embedding-api", "replicated"])
