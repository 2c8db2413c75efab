"""`tf-embedding` with a dynamic table: the synthetic user ids are scattered keys, each renewed
every RENEW_EVERY batches (new users replace old ones), so the table admits and evicts as it
trains. Checked: the run's statistics (metrics.json, `tf-embedding stats --model-dir`), a
stopped-then-resumed run and a killed (kill -9) then resumed one equal to a straight one (index
included), the Keras layer's run, the export scoring in plain TensorFlow, and the errors where
a dynamic table cannot go."""

import copy
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job import cli
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.data.synthetic import synthetic_keys

from helpers.job_runs import CONFIG, checkpoint_values, generate_examples, run_python

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RENEW_EVERY = 60
STOP_AT = 70
DYNAMIC_CONFIG = copy.deepcopy(CONFIG)
DYNAMIC_CONFIG["tables"][0].update(
    vocabulary_size=1500, renew_every=RENEW_EVERY,
    dynamic={"admit_after": 2, "evict_after_steps": 40})
STATISTICS = ("step", "occupied", "candidates", "admitted", "evicted", "refused")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dynamic_runs")
    config = root / "config.json"
    config.write_text(json.dumps(DYNAMIC_CONFIG))
    common = ["train", "--config", str(config), "--model-dir"]
    dirs = {name: str(root / name) for name in ("straight", "resumed", "keras")}
    assert cli.main(common + [dirs["straight"]]) == 0
    assert cli.main(common + [dirs["resumed"], "--stop-at-step", str(STOP_AT)]) == 0
    assert cli.main(common + [dirs["resumed"], "--resume"]) == 0
    assert cli.main(common + [dirs["keras"], "--embedding-api", "keras"]) == 0
    return {"root": root, "config": str(config), **dirs}


def _metrics(model_dir):
    with open(os.path.join(model_dir, "metrics.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("run", ["straight", "keras"])
def test_the_run_admits_and_evicts_and_reports_it(runs, run, capsys):
    counts = _metrics(runs[run])["dynamic_tables"]["user"]
    assert counts["step"] == DYNAMIC_CONFIG["steps"]
    # Renewed keys replace old ones: more admitted than the table holds, the stale evicted.
    assert counts["admitted"] > counts["occupied"] > 0 and counts["evicted"] > 0
    assert counts["occupied"] + counts["evicted"] == counts["admitted"]
    capsys.readouterr()
    assert cli.main(["stats", "--model-dir", runs[run]]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines()
               if line.startswith("user "))
    assert [int(cell.replace(",", "")) for cell in row[1:]] == [counts[s] for s in STATISTICS]


def test_a_resumed_run_ends_as_the_straight_run(runs):
    straight, resumed = checkpoint_values(runs["straight"]), checkpoint_values(runs["resumed"])
    assert straight.keys() == resumed.keys()
    assert "embedding/user..dynamic/index/.ATTRIBUTES/row_records" in straight
    for key in straight:
        np.testing.assert_array_equal(straight[key], resumed[key], err_msg=key)
    assert _metrics(runs["straight"])["dynamic_tables"] == _metrics(runs["resumed"])[
        "dynamic_tables"]


def test_a_killed_run_resumes_to_the_straight_runs_end(runs, tmp_path):
    """kill -9 after the first checkpoint, then --resume: the index and its counts too."""
    model_dir = str(tmp_path / "killed")
    command = ["train", "--config", runs["config"], "--model-dir", model_dir]
    process = subprocess.Popen([sys.executable, "-m", "tf_embedding", *command],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = os.path.join(model_dir, "checkpoints")
    deadline = time.monotonic() + 600  # a hang guard
    try:
        while tf.train.latest_checkpoint(checkpoints) is None:
            assert process.poll() is None, "the run ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint in 600 s"
            time.sleep(0.1)
    finally:
        process.kill()
        process.wait()
    assert not os.path.exists(os.path.join(model_dir, "metrics.json"))
    assert cli.main(command + ["--resume"]) == 0
    straight, resumed = checkpoint_values(runs["straight"]), checkpoint_values(model_dir)
    assert straight.keys() == resumed.keys()
    for key in straight:
        np.testing.assert_array_equal(straight[key], resumed[key], err_msg=key)


def test_the_export_scores_in_plain_tensorflow(runs):
    root = runs["root"]
    tsv, records = generate_examples(runs["config"], root, 300)
    scores = json.loads(run_python(f"""
        import json, sys
        import tensorflow as tf
        model = tf.saved_model.load({os.path.join(runs["straight"], "export")!r})
        lines = [l.rstrip("\\n") for l in open({tsv!r})]
        examples = [r.numpy() for r in tf.data.TFRecordDataset({records!r})]
        tsv = model.signatures["serve_tsv"](lines=tf.constant(lines))["probability"]
        ex = model.signatures["serving_default"](examples=tf.constant(examples))["probability"]
        assert not any(m.split(".")[0] == "tf_embedding" for m in sys.modules)
        print(json.dumps({{"tsv": tsv.numpy().tolist(), "tfrecord": ex.numpy().tolist()}}))
    """).splitlines()[-1])
    assert len(scores["tsv"]) == 300
    np.testing.assert_allclose(scores["tsv"], scores["tfrecord"], rtol=1e-6)
    assert 0.0 < min(scores["tsv"]) and max(scores["tsv"]) < 1.0


def test_data_stats_count_a_dynamic_tables_keys(runs, capsys):
    assert cli.main(["stats", "--config", runs["config"], "--batches", "3", "--png", ""]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines()
               if line.startswith("user "))
    assert row[1] == "1,500" and float(row[2]) == 1.0


def test_keys_are_renewed_at_staggered_batches():
    rows = tf.range(1000, dtype=tf.int64)
    keys = [synthetic_keys(rows, 1000, tf.constant(step, tf.int64), RENEW_EVERY).numpy()
            for step in (0, 1, RENEW_EVERY)]
    assert (keys[0] >= 0).all() and len(np.unique(keys[0])) == 1000
    renewed_next_batch = np.mean(keys[0] != keys[1])
    assert 0 < renewed_next_batch < 0.05  # about 1 / RENEW_EVERY of the rows
    assert (keys[0] != keys[2]).all()  # every row renewed within RENEW_EVERY batches


def test_an_api_that_cannot_hold_a_dynamic_table_is_refused(runs, tmp_path, capsys):
    code = cli.main(["train", "--config", runs["config"], "--model-dir", str(tmp_path / "run"),
                     "--embedding-api", "stock"])
    assert code != 0
    assert "Table user is dynamic" in capsys.readouterr().err


@pytest.mark.parametrize("change, message", [
    ({"renew_every": 5, "dynamic": None}, "renew_every must be an int >= 0, and > 0 only"),
    ({"dynamic": [2]}, "dynamic must be a JSON object"),
])
def test_invalid_dynamic_settings_name_the_table(change, message):
    value = copy.deepcopy(DYNAMIC_CONFIG)
    value["tables"][0].update(change)
    with pytest.raises(ValueError, match=rf"tables\['user'\]\.{message}"):
        DataSpec.from_json({key: value[key] for key in ("tables", "features", "num_dense")})


def test_an_invalid_dynamic_option_names_the_table(tmp_path, capsys):
    value = copy.deepcopy(DYNAMIC_CONFIG)
    value["tables"][0]["dynamic"] = {"admit_after": 0}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(value))
    assert cli.main(["train", "--config", str(config), "--model-dir",
                     str(tmp_path / "run")]) != 0
    assert "tables['user'].dynamic: " in capsys.readouterr().err
