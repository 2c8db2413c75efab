"""`tf-embedding stats`: shard loads for the engine's row-block layouts ('div' and 'mod'), and
its histogram. (Its --profile-dir reading of training's lookup profiles: test_lookup_profile.py.)"""

import json
import sys

import numpy as np
import pytest

from tf_embedding.job import cli, stats
from tf_embedding.job.data import synthetic
from tf_embedding.job.data.spec import DataSpec, FeatureSpec, TableSpec

pytestmark = pytest.mark.unit

# Vocabulary sizes chosen so that the shard counts below split them unevenly, and the smallest
# table has fewer rows than some shard counts (the engine then creates fewer blocks).
SPEC = DataSpec(
    tables=(TableSpec("user", 5003, "sum", head_size=200), TableSpec("item", 2000, "mean"),
            TableSpec("hour", 5, "sum", zipf_alpha=0.3)),
    features=(FeatureSpec("user_id", "user"), FeatureSpec("item_id", "item"),
              FeatureSpec("history", "item", max_ids=5), FeatureSpec("hour", "hour")),
    num_dense=1)


@pytest.fixture(scope="module")
def batches():
    log = synthetic.SyntheticClickLog(SPEC, seed=1)
    return [log.batch(synthetic.TRAIN, step, 256) for step in range(3)]


def reference_block_counts(ids: np.ndarray, vocabulary_size: int, num_shards: int,
                           partition_strategy: str) -> np.ndarray:
    """Lookups per block, with blocks as TF splits a TPU table over hosts. 'div': contiguous, the
    first `vocabulary_size % num_shards` one row longer (numpy's array_split rule); 'mod': row r
    on shard r % num_shards. Empty blocks dropped."""
    rows = np.arange(vocabulary_size)
    if partition_strategy == "mod":
        blocks = [rows[rows % num_shards == s] for s in range(num_shards)]
    else:
        blocks = np.array_split(rows, num_shards)
    return np.array([np.count_nonzero(np.isin(ids, b)) for b in blocks if len(b)])


@pytest.mark.parametrize("num_shards, partition_strategy",
                         [(1, "div"), (3, "div"), (8, "div"), (3, "mod"), (8, "mod")])
def test_shard_loads_are_the_counts_of_ids_per_row_block(batches, num_shards,
                                                         partition_strategy):
    for table in stats.collect(batches, SPEC, num_shards, partition_strategy):
        features = [f.name for f in SPEC.features if f.table == table.table]
        per_batch = [np.concatenate([b["ids"][name].flat_values.numpy() for name in features])
                     for b in batches]
        expected = [reference_block_counts(ids, table.vocabulary_size, num_shards,
                                           partition_strategy) for ids in per_batch]
        np.testing.assert_array_equal(table.shard_lookups, np.sum(expected, axis=0),
                                      err_msg=table.table)
        assert len(table.shard_lookups) == min(num_shards, table.vocabulary_size)
        busiest = [e.max() / (len(ids) / len(e)) for e, ids in zip(expected, per_batch)]
        assert table.max_shard_load == pytest.approx(np.mean(busiest)), table.table


def stats_command(tmp_path, png: str) -> list[str]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "tables": [{"name": t.name, "vocabulary_size": t.vocabulary_size} for t in SPEC.tables],
        "features": [{"name": f.name, "table": f.table} for f in SPEC.features],
        "num_dense": 1}))
    return ["stats", "--config", str(config), "--batches", "2", "--batch-size", "64",
            "--num-shards", "4", "--png", png]


def test_histogram_is_a_png(tmp_path, capsys):
    png = str(tmp_path / "stats.png")
    assert cli.main(stats_command(tmp_path, png)) == 0
    assert f"histogram: {png}" in capsys.readouterr().out
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_histogram_is_an_error_that_says_how_to_install_it(
        tmp_path, capsys, monkeypatch):
    # A None entry makes `import matplotlib` raise ImportError, as when it is not installed.
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "stats.png"
    assert cli.main(stats_command(tmp_path, str(png))) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not png.exists()
    # Without a histogram, matplotlib is not needed.
    assert cli.main(stats_command(tmp_path, "")) == 0
    assert "user" in capsys.readouterr().out
