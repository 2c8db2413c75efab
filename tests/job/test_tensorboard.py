"""`tf-embedding train` writes TensorBoard summaries (tf_embedding/job/summaries.py): read back
from the event files, for the custom loop and `model.fit`, straight and resumed, with a dynamic
table; and served by a real TensorBoard server, whose scalar HTTP API answers for the run."""

import copy
import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job import cli
from tf_embedding.job.data import sources

from helpers.job_runs import CONFIG

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS, EVERY, STOP_AT = 40, 10, 20
SUMMARY_CONFIG = dict(copy.deepcopy(CONFIG), steps=STEPS, summary_every=EVERY,
                      checkpoint_every=20, eval_examples=4096)
DYNAMIC_CONFIG = copy.deepcopy(SUMMARY_CONFIG)
DYNAMIC_CONFIG["tables"][0].update(vocabulary_size=1500, renew_every=15,
                                   dynamic={"admit_after": 2, "evict_after_steps": 20})
RUNS = {"loop": ([], SUMMARY_CONFIG), "keras": (["--embedding-api", "keras"], SUMMARY_CONFIG),
        "dynamic": ([], DYNAMIC_CONFIG)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tensorboard_runs")
    dirs = {}
    for name, (flags, config) in RUNS.items():
        path = root / f"{name}.json"
        path.write_text(json.dumps(config))
        common = ["train", "--config", str(path), *flags, "--model-dir"]
        dirs[name], dirs[f"{name}_config"] = str(root / name), str(path)
        assert cli.main(common + [dirs[name]]) == 0
        if name != "dynamic":
            dirs[f"{name}_resumed"] = str(root / f"{name}_resumed")
            assert cli.main(common + [dirs[f"{name}_resumed"], "--stop-at-step",
                                      str(STOP_AT)]) == 0
            assert cli.main(common + [dirs[f"{name}_resumed"], "--resume"]) == 0
    return dirs


def _scalars(model_dir: str, run: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of one TensorBoard run, over its event files in order."""
    values: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "tensorboard", run, "events.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                values.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor))))
    return values


def _metrics(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "metrics.json")) as f:
        return json.load(f)


def _lookups_per_example(config: str, first_batch: int, last_batch: int) -> dict[str, float]:
    """Each table's ids per example over training batches [first_batch, last_batch) of the run
    of `config` (a file), counted with numpy from the job's own input stream."""
    _, options, spec = cli.parse(["train", "--config", config])
    ids, examples = {table.name: 0 for table in spec.tables}, 0
    batches = sources.Source(options, spec).train(0).take(last_batch).skip(first_batch)
    for batch in batches:
        examples += len(batch["label"])
        for feature in spec.features:
            ids[feature.table] += batch["ids"][feature.name].flat_values.numpy().size
    return {table: count / examples for table, count in ids.items()}


@pytest.mark.parametrize("run", ["loop", "keras"])
def test_the_train_run_has_every_summary_at_every_multiple_of_summary_every(runs, run):
    scalars = _scalars(runs[run], "train")
    loss, auc = ("loss", "auc") if run == "loop" else ("batch_loss", "batch_auc")
    steps = list(range(EVERY, STEPS + 1, EVERY))
    tables = [table["name"] for table in CONFIG["tables"]]
    for tag in [loss, auc, "examples_per_second", "learning_rate/dense",
                "learning_rate/embedding", *(f"lookups_per_example/{t}" for t in tables)]:
        assert [step for step, _ in scalars[tag]] == steps, tag
    assert all(np.isfinite(value) and value > 0 for _, value in scalars[loss] + scalars[auc])
    assert all(value > 0 for _, value in scalars["examples_per_second"])
    assert [value for _, value in scalars["learning_rate/dense"]] == pytest.approx(
        [CONFIG["learning_rate"]] * len(steps))
    assert {value for _, value in scalars["learning_rate/embedding"]} == {
        CONFIG["embedding_learning_rate"]}


def test_lookups_per_example_are_the_input_streams_own(runs):
    """The first write covers batches 1..9 (the first step starts the clock), the next 10..19."""
    scalars = _scalars(runs["loop"], "train")
    for index, (first, last) in enumerate([(1, EVERY), (EVERY, 2 * EVERY)]):
        expected = _lookups_per_example(runs["loop_config"], first, last)
        for table, value in expected.items():
            assert scalars[f"lookups_per_example/{table}"][index][1] == pytest.approx(
                value, rel=1e-6), table
    # One id per example for the one-hot user table: whatever the batch.
    assert {value for _, value in scalars["lookups_per_example/user"]} == {1.0}
    # The Keras path counts the same stream the same way.
    keras = _scalars(runs["keras"], "train")
    assert keras["lookups_per_example/item"] == scalars["lookups_per_example/item"]


@pytest.mark.parametrize("run", ["loop", "keras"])
def test_a_resumed_run_continues_its_steps(runs, run):
    """Stopped at STOP_AT and resumed: every step written once, in order (Keras would number a
    second `fit`'s batches from 0 again), and the learning rates as the straight run's."""
    straight = _scalars(runs[run], "train")
    resumed = _scalars(runs[f"{run}_resumed"], "train")
    loss = "loss" if run == "loop" else "batch_loss"
    assert [step for step, _ in resumed[loss]] == list(range(EVERY, STEPS + 1, EVERY))
    assert resumed["learning_rate/dense"] == straight["learning_rate/dense"]
    if run == "keras":
        assert [step for step, _ in resumed["epoch_loss"]] == [STOP_AT, STEPS]


@pytest.mark.parametrize("run", ["loop", "keras", "dynamic"])
def test_the_eval_run_holds_the_evaluations_metrics(runs, run):
    scalars, metrics = _scalars(runs[run], "eval"), _metrics(runs[run])
    for name in ("auc", "log_loss", "examples", "click_rate"):
        assert scalars[name] == [(STEPS, pytest.approx(metrics[name], rel=1e-6))], name


def test_a_dynamic_table_writes_its_counts(runs):
    scalars, counts = _scalars(runs["dynamic"], "train"), _metrics(runs["dynamic"])
    counts = counts["dynamic_tables"]["user"]
    for name in ("occupied", "candidates", "admitted", "evicted", "refused"):
        written = scalars[f"dynamic/user/{name}"]
        assert [step for step, _ in written] == list(range(EVERY, STEPS + 1, EVERY))
        # Evaluation counts nothing: the last write is what metrics.json reports.
        assert written[-1][1] == counts[name], name
    admitted = [value for _, value in scalars["dynamic/user/admitted"]]
    assert admitted == sorted(admitted) and admitted[0] > 0
    assert not any(tag.startswith("dynamic/") for tag in _scalars(runs["loop"], "train"))


def test_no_summaries_with_summary_every_zero(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(SUMMARY_CONFIG, steps=3, eval_examples=512)))
    model_dir = str(tmp_path / "run")
    assert cli.main(["train", "--config", str(config), "--summary-every", "0",
                     "--model-dir", model_dir]) == 0
    assert not os.path.exists(os.path.join(model_dir, "tensorboard"))


def test_a_tensorboard_server_serves_the_runs_scalars(runs):
    """A real TensorBoard (the `job` extra), its scalar HTTP API asked for the run's loss."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir",
         os.path.join(runs["loop"], "tensorboard"), "--host", "127.0.0.1", "--port", "0",
         "--reload_interval", "1", "--load_fast", "false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        address = _server_address(server)
        expected = _scalars(runs["loop"], "train")["loss"]
        answer = _poll(f"{address}data/plugin/scalars/scalars?run=train&tag=loss")
        assert [(step, value) for _, step, value in answer] == [
            (step, pytest.approx(value)) for step, value in expected]
        runs_answer = json.loads(urllib.request.urlopen(f"{address}data/runs", timeout=10).read())
        assert sorted(runs_answer) == ["eval", "train"]
    finally:
        server.kill()
        server.wait(timeout=30)


def _server_address(server: subprocess.Popen) -> str:
    """The http://host:port/ TensorBoard prints once it listens (within 120 s)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if match := re.search(r"(http://127\.0\.0\.1:\d+/)", line):
            return match.group(1)
        if not line and server.poll() is not None:
            break
    raise AssertionError("TensorBoard did not start")


def _poll(url: str, seconds: float = 120) -> list:
    """The JSON answer at `url` once it is not empty: TensorBoard loads event files in the
    background."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            answer = json.loads(urllib.request.urlopen(url, timeout=10).read())
            if answer:
                return answer
        except urllib.error.HTTPError:  # the run or tag not loaded yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"TensorBoard answered nothing at {url}")
        time.sleep(0.5)
