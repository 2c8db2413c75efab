"""`tf-embedding cluster --strategy multi-worker`: the main job on 2 loopback workers reaches the
one-process run's AUC (same data, same global batch); a worker killed mid-run makes the other
exit with one line naming it, the command restarts both with --resume, and the run ends with
every checkpointed value bit-identical to an uninterrupted run's (exactly once). With a dynamic
table, the workers' index counts, admits and evicts as one process's."""

import copy
import json
import re

import numpy as np
import pytest

from helpers.cluster_command import CONFIG, run_cluster
from helpers.job_runs import checkpoint_values, run_python

pytestmark = pytest.mark.cluster

STEPS = 100


def cluster_run(tmp_path, name: str, config_values: dict | None = None,
                **kill) -> tuple[str, dict]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(config_values or {**CONFIG, "steps": STEPS,
                                                   "checkpoint_every": 20}))
    model_dir = tmp_path / name
    status, output = run_cluster(["--strategy", "multi-worker", "--num-workers", "2",
                                  "--collective-timeout", "60", "--config", str(config),
                                  "--model-dir", str(model_dir)], **kill)
    assert status == 0, output
    assert f"step {STEPS}/{STEPS}" in output and "exported SavedModel" in output, output
    return output, json.loads((model_dir / "metrics.json").read_text())


def test_two_workers_reach_the_one_process_auc_and_resume_exactly_once(tmp_path):
    output, metrics = cluster_run(tmp_path, "uninterrupted")
    assert output.count("starting 2 workers") == 1, output

    killed, killed_metrics = cluster_run(tmp_path, "killed", kill_ps_after="step 41/",
                                         kill="worker", kill_index=1)
    assert "tf-embedding cluster: worker 1 died; restarting it (restart 1 of 3)" in killed, \
        killed
    lost = [line for line in killed.splitlines() if line.startswith("tf-embedding: error:")]
    assert lost and re.match(r"tf-embedding: error: lost /job:worker/replica:0/task:1: restart "
                             r"every worker with --resume", lost[0]), killed
    resumed = re.search(r"resumed \S+ at step (\d+)", killed)
    assert resumed and int(resumed.group(1)) in (20, 40), killed
    expected = checkpoint_values(str(tmp_path / "uninterrupted"))
    actual = checkpoint_values(str(tmp_path / "killed"))
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=key)
    assert killed_metrics["auc"] == metrics["auc"]

    # One process, the same job: the dense part's all-reduce rounds differently, the rest is
    # the same computation.
    one_process = one_process_run(tmp_path)
    assert abs(metrics["auc"] - one_process["auc"]) < 0.005, (metrics, one_process)


def one_process_run(tmp_path) -> dict:
    """The metrics of tmp_path/config.json's job run in one process."""
    run_python(f"""
import sys
from tf_embedding.job import cli
sys.exit(cli.main(["train", "--config", {str(tmp_path / "config.json")!r}, "--model-dir",
                   {str(tmp_path / "one_process")!r}, "--progress", "none"]))
""")
    return json.loads((tmp_path / "one_process" / "metrics.json").read_text())


def test_a_dynamic_table_counts_admits_and_evicts_as_in_one_process(tmp_path):
    # User keys renewed every 30 batches; the capacity is large enough that no block fills, so
    # the index's counts do not depend on the block count (one process: one block).
    config = copy.deepcopy({**CONFIG, "steps": STEPS, "checkpoint_every": 50})
    config["tables"][0].update(vocabulary_size=4000, renew_every=30,
                               dynamic={"admit_after": 2, "evict_after_steps": 40})
    _, metrics = cluster_run(tmp_path, "dynamic", config)
    counts = metrics["dynamic_tables"]["user"]
    assert counts["step"] == STEPS and counts["admitted"] > counts["occupied"] > 0
    assert counts["evicted"] > 0 and counts["refused"] == 0
    assert one_process_run(tmp_path)["dynamic_tables"] == metrics["dynamic_tables"]
