"""`tf-embedding train` on a parameter-server cluster and `tf-embedding cluster`: which TF_CONFIG
and --embedding-api a cluster run accepts; a loopback run of 2 ps tasks and 1 worker against the
same run in one process (the reference: the same batches in the same order, so the same model up
to the float rounding of tables split in blocks), and one stopped with SIGINT."""

import json
import os
import re
import sys

import pytest
import tensorflow as tf

from tf_embedding.cluster import local_cluster, server
from tf_embedding.job import cli, cluster, evaluation, launcher, training

from helpers.cluster_command import CONFIG, run_cluster
from helpers.job_runs import run_python

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CLUSTER = {"chief": ["10.0.0.1:2222"], "ps": ["10.0.0.2:2222", "10.0.0.3:2222"],
           "worker": ["10.0.0.4:2222"]}


def options(*argv: str):
    return cli.parse(["train", "--model-dir", "unused", *argv])[1]


@pytest.mark.parametrize("text", [None, "", "  ", "{}", json.dumps({"cluster": {}}),
                                  json.dumps({"task": {"type": "chief", "index": 0}})])
def test_tf_config_naming_no_cluster_trains_in_this_process(text):
    environ = {} if text is None else {"TF_CONFIG": text}
    execution = cluster.execution_for(options(), sys.stdout, environ)
    assert type(execution) is training.Execution  # pylint: disable=unidiomatic-typecheck


BAD_CONFIGS = [
    ("{cluster", server.ConfigError, "TF_CONFIG is not valid JSON"),
    (json.dumps({"cluster": {"ps": "10.0.0.2:2222"}, "task": {"type": "chief", "index": 0}}),
     server.ConfigError, "cluster entry 'ps' must be a list"),
    (json.dumps({"cluster": CLUSTER}), server.ConfigError, 'TF_CONFIG needs "task"'),
    (local_cluster.tf_config(CLUSTER, "worker", 0), server.ConfigError,
     "task type 'worker' is not run by tf-embedding train, which runs ('chief',) tasks. "
     "tf-embedding train is the cluster's chief (the coordinator); every ps and worker task "
     "runs `python -m tf_embedding.server`."),
    (local_cluster.tf_config(CLUSTER, "chief", 1), server.ConfigError,
     "task index 1 is not an index of the 1 'chief' task(s)"),
    (local_cluster.tf_config({"chief": CLUSTER["chief"]}, "chief", 0), ValueError,
     "TF_CONFIG names a cluster without worker tasks: tf-embedding train trains on a "
     "parameter-server cluster (a chief, ps and worker tasks), on a multi-worker one"),
]


@pytest.mark.parametrize("text, error, message", BAD_CONFIGS)
def test_bad_tf_config_is_a_clear_error(text, error, message):
    with pytest.raises(error) as raised:
        cluster.execution_for(options(), sys.stdout, {"TF_CONFIG": text})
    assert message in str(raised.value)


@pytest.mark.parametrize("flags, reason", [
    (("--embedding-api", "keras"), "Keras 3's model.fit, which has no parameter-server support"),
    (("--embedding-api", "keras-rs"),
     "Keras 3's model.fit, which has no parameter-server support"),
    (("--embedding-api", "replicated"), "keeps every table in one variable"),
    (("--jit-compile",), "a compiled step reads the variables of its own device only")])
def test_what_cannot_train_on_a_cluster_is_refused(flags, reason, monkeypatch, capsys,
                                                    tmp_path):
    start = f"{' '.join(flags)} cannot train on a cluster: "
    # Refused before connecting (nothing listens at CLUSTER's addresses) ...
    with pytest.raises(ValueError) as raised:
        cluster.execution_for(options(*flags), sys.stdout,
                              {"TF_CONFIG": local_cluster.tf_config(CLUSTER, "chief", 0)})
    assert str(raised.value).startswith(start)
    assert reason in str(raised.value)
    assert "in one process (tf-embedding train without TF_CONFIG)." in str(raised.value)
    # ... and by both commands, with status 2, before any task starts.
    monkeypatch.setenv("TF_CONFIG", local_cluster.tf_config(CLUSTER, "chief", 0))
    assert cli.main(["train", "--model-dir", str(tmp_path / "train"), *flags]) == 2
    monkeypatch.delenv("TF_CONFIG")
    assert cli.main(["cluster", "--num-ps", "2", "--model-dir", str(tmp_path / "cluster"),
                     *flags]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and all(line.startswith(f"tf-embedding: error: {start}")
                                    for line in errors), errors
    assert not os.listdir(tmp_path)


def test_cluster_command_arguments(capsys):
    assert launcher.train_argv(["--num-ps", "3", "--steps", "5", "--num-ps=2", "--resume"]) == [
        "--steps", "5", "--resume"]
    assert cli.main(["cluster", "--num-ps", "0"]) == 2
    assert "--num-ps must be at least 1, got 0" in capsys.readouterr().err
    # An abbreviation would not be recognised (and left out) by train_argv.
    with pytest.raises(SystemExit):
        cli.main(["cluster", "--num-p", "2"])
    assert "unrecognized arguments: --num-p 2" in capsys.readouterr().err


def printed_metrics(output: str) -> tuple[float, float]:
    auc, loss = re.search(r"model   AUC (\S+)   log loss (\S+)", output).groups()
    return float(auc), float(loss)


def test_cluster_run_trains_the_one_process_model_and_exports_it(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    status, output = run_cluster(["--num-ps", "2", "--config", str(config), "--model-dir",
                                  str(tmp_path / "cluster")])
    assert status == 0, output
    assert "training as the chief" in output
    auc, loss = printed_metrics(output)

    # The reference: the same run in this process.
    assert cli.main(["train", "--config", str(config), "--model-dir",
                     str(tmp_path / "one_process"), "--progress", "none"]) == 0
    reference = json.loads((tmp_path / "one_process" / "metrics.json").read_text())
    assert auc == pytest.approx(reference["auc"], abs=2e-4)
    assert loss == pytest.approx(reference["log_loss"], abs=2e-4)
    assert auc > 0.7  # and it learned something (the Bayes AUC is 0.78)

    # The export needs only stock TensorFlow, and scores the held-out examples as the
    # evaluation did.
    lines = tmp_path / "eval.tsv"
    assert cli.main(["generate", "--config", str(config), "--output", str(lines),
                     "--examples", str(CONFIG["eval_examples"])]) == 0
    scored = json.loads(run_python(f"""
        import json, sys
        import tensorflow as tf
        lines = open({str(lines)!r}).read().splitlines()
        model = tf.saved_model.load({str(tmp_path / "cluster" / "export")!r})
        out = model.signatures["serve_tsv"](lines=tf.constant(lines))
        assert bool(tf.reduce_all(out["valid"]))
        assert not any(m.split(".")[0] == "tf_embedding" for m in sys.modules)
        print(json.dumps({{"labels": [float(line.split()[0]) for line in lines],
                          "probability": out["probability"].numpy().tolist()}}))
    """, env={"TF_EMBEDDING_OPS_LIBRARY": "/nonexistent"}).splitlines()[-1])
    assert len(scored["labels"]) == CONFIG["eval_examples"]
    assert evaluation.roc_auc(scored["labels"], scored["probability"]) == pytest.approx(
        auc, abs=1e-4)


def test_ctrl_c_saves_a_checkpoint_and_stops_every_task(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "steps": 100000}))
    # SIGINT as a terminal's Ctrl-C sends it (to the command, which passes it on to the chief,
    # the tasks being in sessions of their own): the chief saves a checkpoint and says how to
    # go on, then every task is stopped (run_cluster checks that none is left).
    status, output = run_cluster(["--num-ps", "1", "--config", str(config), "--model-dir",
                                  str(tmp_path / "run")], interrupt_after="step 25/100000")
    assert status == 130, output
    stopped = re.search(r"stopped at step (\d+) with a checkpoint in \S+; run again with "
                        r"--resume to continue", output)
    assert stopped, output
    assert tf_checkpoint_step(tmp_path / "run") == int(stopped.group(1)) >= 25
    assert "the chief exited with status 130; stopping the ps and worker tasks" in output


def test_a_lost_ps_task_ends_the_run_with_one_line_and_resume_continues(tmp_path):
    """A ps task killed mid-run: the chief ends at once, saying which task to restart and to
    run again with --resume (no traceback, no TensorFlow log lines after it); the run resumed
    on a new cluster finishes from the last checkpoint."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "steps": 200, "checkpoint_every": 10}))
    model_dir = tmp_path / "run"
    status, output = run_cluster(["--num-ps", "2", "--config", str(config), "--model-dir",
                                  str(model_dir), "--max-restarts", "0"],
                                 kill_ps_after="step 30/200")
    assert status == 1, output
    lost = re.search(r"tf-embedding: error: lost /job:ps/replica:0/task:1 \(127\.0\.0\.1:\d+\): "
                     r"restart it, then run tf-embedding train again with --resume to continue "
                     r"from the last checkpoint in \S+", output)
    assert lost, output
    after = output[lost.end():].strip().splitlines()
    assert after == ["tf-embedding cluster: the chief exited with status 1; stopping the ps "
                     "and worker tasks",
                     "tf-embedding cluster: ps task 1 died, and --max-restarts 0 restarts were "
                     "used; giving up (raise --max-restarts, or find why it dies)"], output
    assert "Traceback" not in output and "Remote function on worker" not in output, output
    saved = tf_checkpoint_step(model_dir)
    assert saved >= 10

    config.write_text(json.dumps({**CONFIG, "steps": saved + 20}))
    status, output = run_cluster(["--num-ps", "2", "--config", str(config), "--model-dir",
                                  str(model_dir), "--resume"])
    assert status == 0, output
    assert f"step {saved + 20}/{saved + 20}" in output
    assert tf_checkpoint_step(model_dir) == saved + 20


@pytest.mark.parametrize("task_type", ["worker", "ps"])
def test_cluster_restarts_a_killed_task_and_the_run_completes(tmp_path, task_type):
    """kill -9 of the worker: restarted in place, TensorFlow's coordinator runs its steps again
    on it. kill -9 of ps task 1: the chief fails, the command starts the cluster anew and runs
    the chief again with --resume. Either way the run ends with status 0 at the last step."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "steps": 150, "checkpoint_every": 20}))
    model_dir = tmp_path / "run"
    status, output = run_cluster(["--num-ps", "2", "--config", str(config), "--model-dir",
                                  str(model_dir)], kill_ps_after="step 40/150", kill=task_type)
    assert status == 0, output
    index = int(task_type == "ps")
    assert (f"tf-embedding cluster: {task_type} task {index} died; restarting it (restart 1 of 3)"
            in output), output
    resumed = re.search(r"resumed \S+ at step (\d+)", output)
    if task_type == "ps":
        assert resumed and int(resumed.group(1)) >= 20, output
        assert output.count("starting 2 ps and 1 worker task(s)") == 2, output
    else:
        assert not resumed and output.count("starting 2 ps and 1 worker task(s)") == 1, output
    assert "step 150/150" in output and "exported SavedModel" in output, output
    if task_type == "ps":
        assert tf_checkpoint_step(model_dir) == 150
    else:
        # The step the killed worker had in flight runs again on its restart: at least once
        # (docs/parameter_server.md, "Retried steps"), so its first run may have counted too.
        assert tf_checkpoint_step(model_dir) in (150, 151)


def tf_checkpoint_step(model_dir) -> int:
    """The step of the latest checkpoint in `model_dir`."""
    latest = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    return int(latest.rsplit("-", 1)[1])
