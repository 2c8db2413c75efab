"""--ps-placement: where `tf-embedding train` puts whole tables on a parameter-server cluster,
and its errors elsewhere. (tests/cluster/test_parameter_server.py trains such a placement on a
loopback cluster bit-identical to one process.)"""

import pytest

import tf_embedding
from tf_embedding.job import cli, embedding_apis
from tf_embedding.job.data.spec import synthetic_spec

pytestmark = pytest.mark.unit

PS = [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(3)]


def table(name: str, rows: int, dim: int = 16) -> tf_embedding.TableConfig:
    return tf_embedding.TableConfig(rows, dim, name=name)


def test_largest_tables_first_on_the_least_loaded_task():
    tables = [table("a", 100), table("b", 1000), table("c", 600), table("d", 500),
              table("e", 10, dim=2000)]
    # By rows x dim: e 20000, b 16000, c 9600, d 8000, a 1600.
    assert embedding_apis.whole_tables(tables, PS) == {
        "e": [PS[0]], "b": [PS[1]], "c": [PS[2]], "d": [PS[2]], "a": [PS[1]]}


def test_the_default_job_spreads_its_tables_over_two_tasks():
    spec = synthetic_spec()
    tables = embedding_apis.tables_of(embedding_apis.feature_config(spec, 16, 0))
    placed = embedding_apis.whole_tables(tables, PS[:2])
    assert sorted(placed) == sorted(t.name for t in spec.tables)
    # The 2M-row table alone on one task, everything else on the other.
    assert {name for name, devices in placed.items() if devices == [PS[0]]} == {"user"}


def test_whole_placement_needs_ps_tasks_and_the_sharded_api():
    features = embedding_apis.feature_config(synthetic_spec(), 16, 0)
    with pytest.raises(ValueError, match="--ps-placement whole places tables on ps tasks"):
        embedding_apis.table_placement(features, "whole")
    assert embedding_apis.table_placement(features, "split") == {}
    with pytest.raises(ValueError, match="--ps-placement whole places the sharded API's"):
        cli.parse(["train", "--ps-placement", "whole", "--embedding-api", "replicated"])
