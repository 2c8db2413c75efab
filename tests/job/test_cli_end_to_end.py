"""`tf-embedding` end to end on a small synthetic log: train, interrupt, resume, evaluate,
export, and score the export with `predict` and with plain TensorFlow. Runs use the default
(sharded) embedding unless they say otherwise; one straight run uses the replicated one, and a
straight run and an interrupted-then-resumed run use the Keras layer with `model.fit`
(`--embedding-api keras`); two straight runs are compiled (`--jit-compile`), one per API that
takes it (sharded, keras)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job import cli, evaluation

from helpers.job_runs import CONFIG, checkpoint_values, generate_examples, run_python

pytestmark = [pytest.mark.integration, pytest.mark.slow]


STOP_AT = 70


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A straight run, a run stopped at STOP_AT then resumed, a straight run with
    `--embedding-api replicated`, and a straight and a stopped-then-resumed run with
    `--embedding-api keras`, and a compiled straight run of each API that takes
    `--jit-compile`; all to CONFIG's steps."""
    root = tmp_path_factory.mktemp("runs")
    config = root / "config.json"
    config.write_text(json.dumps(CONFIG))
    straight, resumed, replicated, keras, keras_resumed = (
        str(root / name)
        for name in ("straight", "resumed", "replicated", "keras", "keras_resumed"))
    common = ["train", "--config", str(config), "--model-dir"]
    # In a fresh interpreter, to see what the default path imports (this session imports
    # tf_keras for other tests).
    modules = json.loads(run_python(f"""
        import json, sys
        from tf_embedding.job import cli
        assert cli.main({common + [straight]!r}) == 0
        print(json.dumps(sorted(sys.modules)))
    """).splitlines()[-1])
    assert cli.main(common + [resumed, "--stop-at-step", str(STOP_AT)]) == 0
    stopped = {"checkpoint": tf.train.latest_checkpoint(os.path.join(resumed, "checkpoints")),
               "exported": os.path.exists(os.path.join(resumed, "export"))}
    assert cli.main(common + [resumed, "--resume"]) == 0
    assert cli.main(common + [replicated, "--embedding-api", "replicated"]) == 0
    # In a fresh interpreter, to see Keras' progress output.
    keras_output = run_python(f"""
        from tf_embedding.job import cli
        assert cli.main({common + [keras, "--embedding-api", "keras",
                                   "--progress", "lines"]!r}) == 0
    """)
    keras_common = common + [keras_resumed, "--embedding-api", "keras"]
    assert cli.main(keras_common + ["--stop-at-step", str(STOP_AT)]) == 0
    keras_stopped = tf.train.latest_checkpoint(os.path.join(keras_resumed, "checkpoints"))
    assert cli.main(keras_common + ["--resume"]) == 0
    compiled = {api: str(root / f"compiled_{api}") for api in ("sharded", "keras")}
    for api, model_dir in compiled.items():
        assert cli.main(common + [model_dir, "--embedding-api", api, "--jit-compile"]) == 0
    return {"config": str(config), "straight": straight, "resumed": resumed,
            "replicated": replicated, "keras": keras, "keras_resumed": keras_resumed,
            **{f"compiled_{api}": model_dir for api, model_dir in compiled.items()},
            "root": root, "stopped": stopped, "straight_modules": modules,
            "keras_output": keras_output, "keras_stopped": keras_stopped}


def test_default_run_does_not_import_tf_keras(runs):
    assert "tf_embedding.sharded" in runs["straight_modules"]
    assert "tf_keras" not in runs["straight_modules"]


def test_interrupted_run_stopped_with_a_checkpoint_and_no_export(runs):
    assert runs["stopped"]["checkpoint"].endswith(f"ckpt-{STOP_AT}")
    assert not runs["stopped"]["exported"]


def test_resumed_run_matches_the_straight_run(runs):
    straight = checkpoint_values(runs["straight"])
    resumed = checkpoint_values(runs["resumed"])
    assert straight.keys() == resumed.keys()
    assert any(key.startswith("embedding/user/") for key in straight)
    for key in straight:
        np.testing.assert_array_equal(straight[key], resumed[key], err_msg=key)
    metrics = [json.load(open(os.path.join(runs[k], "metrics.json")))
               for k in ("straight", "resumed")]
    assert metrics[0]["auc"] == metrics[1]["auc"]
    assert metrics[0]["steps"] == CONFIG["steps"]


@pytest.mark.parametrize("run", ["straight", "replicated", "keras", "compiled_sharded",
                                 "compiled_keras"])
def test_evaluation_is_close_to_bayes(runs, run):
    metrics = json.load(open(os.path.join(runs[run], "metrics.json")))
    assert metrics["examples"] == CONFIG["eval_examples"]
    assert metrics["auc"] > 0.7
    assert metrics["bayes_auc"] - metrics["auc"] < 0.03
    # 160 steps of CONFIG's small log leave the log loss above Bayes by a margin that moves
    # with the sample drawn: 0.024 with the CDF sampler, 0.038 with the alias sampler (the same
    # distribution, checked in test_synthetic_sampling.py, other draws).
    assert metrics["log_loss"] < metrics["bayes_log_loss"] + 0.05


# Each API's uncompiled run and where its tables are in the checkpoint.
_UNCOMPILED = {"sharded": ("straight", "embedding"), "keras": ("keras", "embedding/_tpu_embedding")}


@pytest.mark.parametrize("api", sorted(_UNCOMPILED))
def test_a_compiled_run_trains_what_the_uncompiled_run_trains(runs, api):
    """The embedding ops compile to the uncompiled kernels, and the Keras run's padded ids are
    pruned; XLA rounds the dense model's float math its own way, so the runs
    agree closely, not bit for bit."""
    uncompiled, tables_at = _UNCOMPILED[api]
    got, want = (checkpoint_values(runs[k]) for k in (f"compiled_{api}", uncompiled))
    assert got.keys() == want.keys()
    for table in CONFIG["tables"]:
        key = f"{tables_at}/{table['name']}/.ATTRIBUTES/VARIABLE_VALUE"
        np.testing.assert_allclose(got[key], want[key], atol=2e-3, err_msg=key)
    metrics = [json.load(open(os.path.join(runs[k], "metrics.json")))
               for k in (f"compiled_{api}", uncompiled)]
    assert abs(metrics[0]["auc"] - metrics[1]["auc"]) < 0.002
    assert metrics[0]["steps"] == CONFIG["steps"]


@pytest.mark.parametrize("api", ["replicated", "keras-rs"])
def test_jit_compile_is_refused_where_the_step_cannot_compile(api, tmp_path, capsys):
    assert cli.main(["train", "--model-dir", str(tmp_path), "--embedding-api", api,
                     "--jit-compile"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"tf-embedding: error: --jit-compile with --embedding-api {api}: ")
    assert error.rstrip().endswith("Use --embedding-api sharded or keras.")


def test_both_embedding_apis_train_alike(runs):
    """Same Adagrad on the same gradients (tf_keras' adds an epsilon of 1e-7 to the root)."""
    sharded, replicated = (checkpoint_values(runs[k]) for k in ("straight", "replicated"))
    for table in CONFIG["tables"]:
        key = f"embedding/{table['name']}/.ATTRIBUTES/VARIABLE_VALUE"
        np.testing.assert_allclose(sharded[key], replicated[key], atol=1e-4, err_msg=key)


@pytest.mark.parametrize("run", ["straight", "replicated"])
def test_export_holds_the_trained_tables_and_no_slots(runs, run):
    trained = checkpoint_values(runs[run])
    exported = tf.train.load_checkpoint(os.path.join(runs[run], "export", "variables",
                                                     "variables"))
    tables = {name for name in exported.get_variable_to_shape_map()
              if name.startswith("embedding/")}
    assert tables == {f"embedding/{t['name']}/.ATTRIBUTES/VARIABLE_VALUE"
                      for t in CONFIG["tables"]}
    for name in tables:
        np.testing.assert_array_equal(exported.get_tensor(name), trained[name], err_msg=name)


def test_keras_run_shows_keras_progress_and_resumes_exactly(runs):
    # --progress lines: Keras' one-line epoch summary (verbose=2) over the whole run.
    summary = [line for line in runs["keras_output"].splitlines()
               if line.startswith(f"{CONFIG['steps']}/{CONFIG['steps']} - ")]
    assert len(summary) == 1 and " - auc: " in summary[0] and " - loss: " in summary[0]
    assert runs["keras_stopped"].endswith(f"ckpt-{STOP_AT}")
    straight = checkpoint_values(runs["keras"])
    resumed = checkpoint_values(runs["keras_resumed"])
    assert straight.keys() == resumed.keys()
    assert straight["step/.ATTRIBUTES/VARIABLE_VALUE"] == CONFIG["steps"]
    for key in straight:
        np.testing.assert_array_equal(straight[key], resumed[key], err_msg=key)


def test_keras_run_trains_what_the_custom_loop_trains(runs):
    """The layer runs the sharded engine's fused Adagrad on the same gradients, and Keras' Adam
    the same dense updates: the same tables, accumulators and test metrics (bit for bit when
    measured; a tolerance for float noise)."""
    sharded, keras = (checkpoint_values(runs[k]) for k in ("straight", "keras"))
    for table in CONFIG["tables"]:
        for suffix in ("", ".Saccumulators"):
            key = f"{table['name']}{suffix}/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_allclose(keras[f"embedding/_tpu_embedding/{key}"],
                                       sharded[f"embedding/{key}"], rtol=0, atol=1e-6,
                                       err_msg=key)
    metrics = [json.load(open(os.path.join(runs[k], "metrics.json")))
               for k in ("straight", "keras")]
    assert abs(metrics[0]["auc"] - metrics[1]["auc"]) < 1e-4
    assert abs(metrics[0]["log_loss"] - metrics[1]["log_loss"]) < 1e-5


def test_keras_export_holds_the_trained_tables_and_scores_like_the_model(runs):
    trained = checkpoint_values(runs["keras"])
    export = os.path.join(runs["keras"], "export")
    exported = tf.train.load_checkpoint(os.path.join(export, "variables", "variables"))
    tables = {name for name in exported.get_variable_to_shape_map()
              if name.startswith("embedding/")}
    # Stock keys and no slots, as the other APIs export.
    assert tables == {f"embedding/{t['name']}/.ATTRIBUTES/VARIABLE_VALUE"
                      for t in CONFIG["tables"]}
    for name in tables:
        np.testing.assert_array_equal(
            exported.get_tensor(name),
            trained[name.replace("embedding/", "embedding/_tpu_embedding/", 1)], err_msg=name)
    # The held-out examples the run evaluated its model on, scored by plain TensorFlow.
    records = str(runs["root"] / "keras_eval.tfrecord")
    assert cli.main(["generate", "--config", runs["config"], "--output", records,
                     "--format", "tfrecord", "--examples", str(CONFIG["eval_examples"])]) == 0
    scored = json.loads(run_python(f"""
        import json, sys
        import tensorflow as tf
        model = tf.saved_model.load({export!r})
        examples = tf.constant([r.numpy() for r in tf.data.TFRecordDataset({records!r})])
        labels = tf.io.parse_example(
            examples, {{"label": tf.io.FixedLenFeature([], tf.int64)}})["label"]
        out = model.signatures["serving_default"](examples=examples)
        assert not any(m.split(".")[0] == "tf_embedding" for m in sys.modules)
        print(json.dumps({{"labels": labels.numpy().tolist(),
                          "probability": out["probability"].numpy().tolist(),
                          "valid": out["valid"].numpy().tolist()}}))
    """).splitlines()[-1])
    assert len(scored["labels"]) == CONFIG["eval_examples"] and all(scored["valid"])
    metrics = json.load(open(os.path.join(runs["keras"], "metrics.json")))
    assert abs(evaluation.roc_auc(scored["labels"], scored["probability"]) - metrics["auc"]) < 1e-4
    assert abs(evaluation.log_loss(scored["labels"], scored["probability"])
               - metrics["log_loss"]) < 1e-5


def test_resume_refuses_changed_options_and_fresh_runs_refuse_used_dirs(runs, capsys):
    common = ["train", "--config", runs["config"], "--model-dir", runs["straight"]]
    assert cli.main(common + ["--resume", "--learning-rate", "0.5"]) == 2
    assert "learning_rate" in capsys.readouterr().err
    assert cli.main(common + ["--resume", "--embedding-api", "replicated"]) == 2
    assert "embedding_api" in capsys.readouterr().err
    assert cli.main(common) == 2
    assert "--resume" in capsys.readouterr().err


def test_resume_without_a_checkpoint_says_there_is_nothing_to_resume(tmp_path, capsys):
    """--resume of a directory without a run, or of a run killed before its first checkpoint
    (only its config.json written): one clear line, status 2, nothing written."""
    model_dir = tmp_path / "run"
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    common = ["train", "--config", str(tmp_path / "config.json"), "--model-dir", str(model_dir),
              "--resume"]
    assert cli.main(common) == 2
    assert f"--resume: no run to resume in {model_dir}" in capsys.readouterr().err
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    assert cli.main(common) == 2
    assert (f"tf-embedding: error: --resume: the run in {model_dir} has no checkpoint yet (it "
            "stopped before its first); run without --resume to start it from the beginning"
            in capsys.readouterr().err)
    assert os.listdir(model_dir) == ["config.json"]


def test_export_scores_match_between_predict_and_plain_tensorflow(runs):
    root = runs["root"]
    tsv, records = generate_examples(runs["config"], root, 600)
    with open(tsv, "a") as f:
        f.write("not\ta valid line\n")
    export = os.path.join(runs["straight"], "export")

    # predict with an op library that cannot load: it must not need it.
    outputs = {fmt: str(root / f"scores.{fmt}.txt") for fmt in ("tsv", "tfrecord")}
    run_python(f"""
        import sys
        from tf_embedding.job import cli
        for fmt, path, out in (("tsv", {tsv!r}, {outputs["tsv"]!r}),
                               ("tfrecord", {records!r}, {outputs["tfrecord"]!r})):
            assert cli.main(["predict", "--model", {export!r}, "--input", path,
                             "--format", fmt, "--output", out, "--batch-size", "256"]) == 0
        assert "tf_embedding._loader" not in sys.modules
    """, env={"TF_EMBEDDING_OPS_LIBRARY": "/nonexistent/_ops.so"})
    predicted = {fmt: np.array([float(v) for v in open(path)]) for fmt, path in outputs.items()}

    # Plain TensorFlow scores every record in one call, and again in predict's batches of 256.
    plain = json.loads(run_python(f"""
        import json, sys
        import tensorflow as tf
        model = tf.saved_model.load({export!r})
        lines = [l.rstrip("\\n") for l in open({tsv!r})]
        examples = [r.numpy() for r in tf.data.TFRecordDataset({records!r})]
        tsv = model.signatures["serve_tsv"](lines=tf.constant(lines))
        ex = model.signatures["serving_default"](examples=tf.constant(examples))
        def in_batches(signature, argument, records):
            return [p for i in range(0, len(records), 256) for p in signature(
                **{{argument: tf.constant(records[i:i + 256])}})["probability"].numpy().tolist()]
        assert not any(m.split(".")[0] == "tf_embedding" for m in sys.modules)
        print(json.dumps({{"tsv": tsv["probability"].numpy().tolist(),
                          "valid": tsv["valid"].numpy().tolist(),
                          "tfrecord": ex["probability"].numpy().tolist(),
                          "tsv_batched": in_batches(model.signatures["serve_tsv"], "lines", lines),
                          "tfrecord_batched": in_batches(model.signatures["serving_default"],
                                                         "examples", examples)}}))
    """))
    assert len(predicted["tsv"]) == 601 and len(predicted["tfrecord"]) == 600
    assert plain["valid"] == [True] * 600 + [False]
    assert np.isnan(predicted["tsv"][-1]) and np.isnan(plain["tsv"][-1])
    for fmt in ("tsv", "tfrecord"):
        # The same batches through the same graph on the same CPU: bit for bit.
        np.testing.assert_array_equal(np.float32(predicted[fmt]),
                                      np.float32(plain[f"{fmt}_batched"]))
        # One call on all records: the dense layers sum in another float32 order (it depends on
        # the batch size and vector width), measured up to 1.8e-7 (9 ulp) over batch sizes 1 to
        # 599 on AVX2; 1e-6 allows that and no real difference.
        np.testing.assert_allclose(np.float32(predicted[fmt]), np.float32(plain[fmt]),
                                   rtol=0, atol=1e-6)
    # The same examples score the same whichever format carried them.
    np.testing.assert_allclose(predicted["tsv"][:600], predicted["tfrecord"], rtol=1e-6)
    assert 0.0 < predicted["tfrecord"].min() and predicted["tfrecord"].max() < 1.0


def test_stats_reports_every_table_and_writes_a_png(runs, tmp_path, capsys):
    png = str(tmp_path / "stats.png")
    assert cli.main(["stats", "--config", runs["config"], "--batches", "4", "--num-shards", "4",
                     "--png", png]) == 0
    report = capsys.readouterr().out
    for table in CONFIG["tables"]:
        assert f"\n{table['name']} " in report
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("content", ["", "not\ta valid line\n"])
def test_training_input_without_examples_is_an_error_not_a_crash(runs, tmp_path, capsys,
                                                                  content):
    path = tmp_path / "input.tsv"
    path.write_text(content)
    assert cli.main(["train", "--config", runs["config"], "--data", "tsv", "--train-input",
                     str(path), "--model-dir", str(tmp_path / "run"), "--steps", "5"]) == 2
    assert "no examples" in capsys.readouterr().err


def test_help_lists_every_flag_with_its_default():
    _, subparsers = cli.build_parser()
    for name, parser in subparsers.items():
        text = " ".join(parser.format_help().split())
        flags = [a for a in parser._actions if a.dest != "help"]
        assert flags, name
        for action in flags:
            assert action.option_strings[0] in text, (name, action.dest)
            assert "(default: " in action.help, (name, action.dest)
        assert text.count("(default: ") == len(flags), name


def test_help_needs_no_tensorflow():
    out = run_python("""
        import sys
        from tf_embedding.job import cli
        cli.build_parser()
        print("tensorflow" in sys.modules)
    """)
    assert out.strip() == "False"
