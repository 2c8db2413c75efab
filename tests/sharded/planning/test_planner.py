"""The traffic formulas (tf_embedding/sharded/planning/traffic.py) against bytes counted on
simulated batches, and the planner's choices on small configurations."""

import numpy as np
import pytest

import tf_embedding
from tf_embedding import sharding_plan
from tf_embedding.sharded.planning import planner
from tf_embedding.sharded.planning import traffic

pytestmark = pytest.mark.unit


def _counted_row_wise(load: traffic.TableLoad, workers: int, seed: int = 0) -> float:
    """Mean bytes a worker sends per step with one 'div' block per worker, counted on uniform
    ids: ids to other owners (8 each), rows it serves to others (4 dim each), lookups to other
    owners (16 each), gradient rows of its samples with a lookup in each other block."""
    rng = np.random.default_rng(seed)
    rows, hot = int(load.rows), int(load.ids_per_row)
    ids = rng.integers(0, load.vocabulary_size, size=(workers, rows, hot))
    block_rows = -(-load.vocabulary_size // workers)
    owners = ids // block_rows
    sent = np.zeros(workers)
    for worker in range(workers):
        unique = np.unique(ids[worker])
        unique_owners = unique // block_rows
        foreign = unique_owners != worker
        sent[worker] += 8 * foreign.sum() + 16 * (owners[worker] != worker).sum()
        for owner in np.unique(unique_owners[foreign]):
            sent[owner] += 4 * load.dim * (unique_owners == owner).sum()  # rows it serves
        for owner in range(workers):
            if owner != worker:
                looked_up = (owners[worker] == owner).any(axis=1).sum()
                sent[worker] += 4 * load.dim * looked_up
    return float(sent.mean())


@pytest.mark.parametrize("workers, hot", [(2, 1), (4, 3), (8, 10)])
def test_the_row_wise_formula_matches_counted_bytes(workers, hot):
    load = traffic.TableLoad(vocabulary_size=50_000, dim=16, rows=8192, ids_per_row=hot)
    assert traffic.row_wise(load, workers).sent == pytest.approx(
        _counted_row_wise(load, workers), rel=0.02)


def test_the_table_wise_formula_counts_lookups_twice_and_a_row_per_sample():
    load = traffic.TableLoad(vocabulary_size=1000, dim=8, rows=100, ids_per_row=5)
    bytes_ = traffic.table_wise(load, workers=4)
    assert bytes_.sent == 32 * 500 + 4 * 8 * 100
    assert bytes_.received == 4 * 8 * 100
    assert bytes_.busiest == 3 * (bytes_.sent + bytes_.received)
    assert traffic.table_wise(load, workers=1).busiest == 0.0


def test_row_wise_bytes_stay_bounded_as_workers_are_added():
    load = traffic.TableLoad(vocabulary_size=40_000_000, dim=128, rows=2048, ids_per_row=3)
    at_2, at_256 = (traffic.row_wise(load, n).busiest for n in (2, 256))
    assert at_256 < 4 * at_2


def _features(hot_vocabulary: int):
    heavy = tf_embedding.TableConfig(hot_vocabulary, 128, name="heavy")
    one_hot = tf_embedding.TableConfig(1_000_000, 128, name="one_hot")
    return {"heavy": tf_embedding.FeatureConfig(heavy, name="heavy"),
            "one_hot": tf_embedding.FeatureConfig(one_hot, name="one_hot")}


def test_the_planner_pools_a_many_ids_table_whole_on_few_workers_only():
    features = _features(1_000_000)
    few = planner.plan_sharding(features, workers=2, batch_per_worker=2048,
                                     ids_per_sample={"heavy": 100})
    assert few["heavy"].kind == "table_wise" and few["one_hot"].kind == "row_wise"
    many = planner.plan_sharding(features, workers=64, batch_per_worker=2048,
                                      ids_per_sample={"heavy": 100})
    assert many.tables == {}  # every table row-wise
    tables = [planner.PlannedTable("heavy", traffic.TableLoad(1_000_000, 128, 2048, 100)),
              planner.PlannedTable("one_hot", traffic.TableLoad(1_000_000, 128, 2048, 1))]
    everything_row_wise = sharding_plan.ShardingPlan({})
    assert planner.busiest_bytes(tables, 2, few) < planner.busiest_bytes(
        tables, 2, everything_row_wise)


def test_the_planner_keeps_tables_within_memory_and_says_when_they_cannot_fit():
    features = _features(1_000_000)
    # 1M x 128 float32 is 512 MB: whole on one worker it does not fit 400 MB.
    plan = planner.plan_sharding(features, workers=2, batch_per_worker=2048,
                                      ids_per_sample={"heavy": 100},
                                      memory_per_worker=400e6 + 256e6)
    assert plan.tables == {}
    with pytest.raises(ValueError, match="The tables need 0.48 GiB per worker even split over "
                                         "all 2 workers, more than the 0.09 GiB given"):
        planner.plan_sharding(features, workers=2, batch_per_worker=2048,
                                   memory_per_worker=1e8)
