"""`tf-embedding train --mixed-precision bfloat16`: the ranking model computes in bfloat16 with
float32 weights and logit, trains to the float32 run's AUC (within 0.003) in the sharded, Keras
and stock paths, exports, refuses a resume in the other precision, and warns on CPUs without
bfloat16 instructions (as `lscpu` reports them)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job import cli
from tf_embedding.job import model as model_lib
from tf_embedding.job.data.spec import DataSpec, FeatureSpec, TableSpec

from helpers.job_runs import CONFIG

SPEC = DataSpec(tables=(TableSpec("t", 10, "sum"),),
                features=(FeatureSpec("b", "t"), FeatureSpec("a", "t")), num_dense=3)


def _inputs(rows: int = 64) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    rng = np.random.default_rng(0)
    return (tf.constant(rng.normal(size=[rows, 3]), tf.float32),
            {name: tf.constant(rng.normal(size=[rows, 4]), tf.float32) for name in "ab"})


@pytest.mark.unit
def test_the_bfloat16_model_computes_in_bfloat16_with_float32_weights_and_logit():
    ours = model_lib.RankingModel(SPEC, 4, [8], [16], compute_dtype="bfloat16")
    reference = model_lib.RankingModel(SPEC, 4, [8], [16])
    dense, activations = _inputs()
    ours((dense, activations))
    reference((dense, activations))
    reference.set_weights(ours.get_weights())
    hidden = ours.bottom.layers + ours.top.layers[:-1]
    assert {layer.compute_dtype for layer in hidden} == {"bfloat16"}
    assert {variable.dtype for variable in ours.variables} == {"float32"}
    with tf.GradientTape() as tape:
        tape.watch(activations)
        logits = ours((dense, activations))
    assert logits.dtype == tf.float32
    # The embeddings' activation gradients, which the tables train on, are float32.
    assert {g.dtype for g in tape.gradient(logits, activations).values()} == {tf.float32}
    expected = reference((dense, activations)).numpy()
    assert not np.array_equal(logits.numpy(), expected)  # rounded to bfloat16 on the way
    np.testing.assert_allclose(logits.numpy(), expected, atol=0.05 * np.abs(expected).max())


@pytest.mark.unit
def test_bfloat16_instructions_are_read_from_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 avx512f amx_bf16\n")
    assert model_lib.bfloat16_instructions(str(cpuinfo)) == ["amx_bf16"]
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 avx512f\n")
    assert model_lib.bfloat16_instructions(str(cpuinfo)) == []
    assert model_lib.bfloat16_instructions(str(tmp_path / "missing")) == []


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed_precision_runs")
    config = root / "config.json"
    config.write_text(json.dumps(CONFIG))
    dirs, stderr = {}, {}
    for api in ("sharded", "keras", "stock"):
        for precision in ("none", "bfloat16"):
            name = f"{api}_{precision}"
            dirs[name] = str(root / name)
            # A subprocess: the warning goes to its stderr, and Keras' state stays its own.
            result = subprocess.run(
                [sys.executable, "-m", "tf_embedding", "train", "--config", str(config),
                 "--embedding-api", api, "--mixed-precision", precision,
                 "--model-dir", dirs[name]],
                capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, result.stderr[-3000:]
            stderr[name] = result.stderr
    return {"config": str(config), "dirs": dirs, "stderr": stderr}


def _metrics(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "metrics.json")) as f:
        return json.load(f)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("api", ["sharded", "keras", "stock"])
def test_bfloat16_trains_to_the_float32_auc(runs, api):
    bf16 = _metrics(runs["dirs"][f"{api}_bfloat16"])
    f32 = _metrics(runs["dirs"][f"{api}_none"])
    assert bf16["auc"] != f32["auc"]  # the runs differ: bfloat16 was used
    assert abs(bf16["auc"] - f32["auc"]) <= 0.003


@pytest.mark.integration
@pytest.mark.slow
def test_the_bfloat16_export_scores_like_the_float32_one(runs, tmp_path):
    records = tmp_path / "eval.tsv"
    assert cli.main(["generate", "--config", runs["config"], "--output", str(records),
                     "--examples", "2000"]) == 0
    scores = {}
    for precision in ("none", "bfloat16"):
        model = tf.saved_model.load(os.path.join(runs["dirs"][f"sharded_{precision}"], "export"))
        lines = tf.constant(records.read_text().splitlines())
        scores[precision] = model.signatures["serve_tsv"](lines=lines)["probability"].numpy()
    np.testing.assert_allclose(scores["bfloat16"], scores["none"], atol=0.05)


@pytest.mark.integration
@pytest.mark.slow
def test_the_warning_follows_the_cpus_bfloat16_flags(runs):
    flags = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    has_bfloat16 = any(flag in flags.split() for flag in model_lib.BFLOAT16_FLAGS)
    for name, stderr in runs["stderr"].items():
        warned = "has no bfloat16 instructions" in stderr
        assert warned == (name.endswith("bfloat16") and not has_bfloat16), name


@pytest.mark.integration
@pytest.mark.slow
def test_a_resume_in_the_other_precision_is_refused(runs, tmp_path):
    model_dir = str(tmp_path / "run")
    common = ["train", "--config", runs["config"], "--model-dir", model_dir]
    assert cli.main(common + ["--stop-at-step", "5"]) == 0
    with pytest.raises(ValueError, match="mixed_precision is 'bfloat16' but the run being "
                                         "resumed used 'none'"):
        from tf_embedding.job import training  # pylint: disable=import-outside-toplevel
        _, options, spec = cli.parse(common + ["--resume", "--mixed-precision", "bfloat16"])
        training.train(options, spec)
