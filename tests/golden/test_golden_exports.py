"""The golden exports (tests/golden/README.md), written by an earlier commit, still work, in fresh
processes as users run them: the TPUEmbeddingForServing SavedModel loads in a TensorFlow that
never imports tf_embedding and gives the outputs it gave; the `tf-embedding train` model
directory's export scores with `tf-embedding predict` as it did, and `train --resume` restores
its checkpoint, evaluates to the same metrics and exports a model that scores the same. A
failure here breaks users' exports and runs: keep them readable instead of regenerating.
"""

import json
import pathlib
import shutil
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest

import golden_fixture as fx

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Runs in an isolated interpreter (-I: no PYTHONPATH, no current directory, so the repository
# is not importable): loads the SavedModel, calls both entry points on the stored inputs.
LOADER = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf

    export_dir, expected_path, outputs_path = sys.argv[1:4]
    data = np.load(expected_path)
    inputs = lambda name: data["saved_model/inputs/" + name]
    ragged = lambda prefix, dtype: tf.RaggedTensor.from_row_splits(
        tf.constant(inputs(prefix + "_values"), dtype), tf.constant(inputs(prefix + "_splits")))
    features = {
        "watched": ragged("watched", tf.int64),
        "favorited": tf.SparseTensor(inputs("favorited_indices"), inputs("favorited_values"),
                                     inputs("favorited_shape")),
        "friends": tf.constant(inputs("friends")),
    }
    loaded = tf.saved_model.load(export_dir)
    outputs = loaded.serve(features, ragged("weights", tf.float32))
    outputs["signature"] = loaded.signatures["serving_default"](
        friends=features["friends"])["output_0"]
    assert "tf_embedding" not in sys.modules, "loading imported tf_embedding"
    np.savez(outputs_path, **{name: value.numpy() for name, value in outputs.items()})
""")


def _run(args: list[str], cwd: pathlib.Path) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=900,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_serving_saved_model_loads_without_tf_embedding(tmp_path):
    outputs = tmp_path / "outputs.npz"
    _run([sys.executable, "-I", "-c", LOADER, str(fx.DATA / fx.SAVED_MODEL),
          str(fx.DATA / fx.EXPECTED), str(outputs)], tmp_path)
    with np.load(fx.DATA / fx.EXPECTED) as data:
        expected = {key.split("/")[-1]: data[key] for key in data.files
                    if key.startswith("saved_model/outputs/")}
    with np.load(outputs) as actual:
        assert sorted(actual.files) == sorted(expected)
        for name, value in expected.items():
            np.testing.assert_array_equal(actual[name], value, err_msg=name)


@pytest.fixture
def job_model(tmp_path) -> pathlib.Path:
    """The golden job's model directory, unpacked as tmp_path/job_model (its config.json names
    `job_model`, the --model-dir it was trained with, relative to the working directory)."""
    with tarfile.open(fx.DATA / fx.JOB_ARCHIVE) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "job_model"


def _predictions(export: pathlib.Path, cwd: pathlib.Path) -> str:
    output = cwd / "predictions.txt"
    _run([sys.executable, "-m", "tf_embedding", "predict", "--model", str(export),
          "--input", str(fx.DATA / fx.JOB_PREDICT_INPUT), "--output", str(output)], cwd)
    return output.read_text()


# The job's scores and metrics pass through the model's dense layers, whose matmul bits depend on
# the machine's vector ISA and oneDNN kernels (DESIGN.md's determinism promise covers this
# package's kernels): a run on another machine agrees up to float rounding.
DENSE_TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}


def _assert_same_scores(actual: str, expected: str) -> None:
    """One score a line (`nan` for a malformed line), equal up to the dense layers' rounding."""
    parse = lambda text: np.array([float(line) for line in text.splitlines()])
    np.testing.assert_allclose(parse(actual), parse(expected), **DENSE_TOLERANCE)


def test_the_job_export_scores_with_predict(job_model, tmp_path):
    expected = (fx.DATA / fx.JOB_PREDICTIONS).read_text()
    assert expected.splitlines()[-1] == "nan"  # the malformed last line
    _assert_same_scores(_predictions(job_model / "export", tmp_path), expected)


def test_the_job_resumes_from_its_checkpoint(job_model, tmp_path):
    """`train --resume` with the run's own options: nothing left to train, so it restores the
    checkpoint (every object matched), evaluates and exports again."""
    saved_metrics = json.loads((job_model / "metrics.json").read_text())
    shutil.copy(fx.DATA / fx.JOB_CONFIG, tmp_path / "job.json")
    stdout = _run([sys.executable, "-m", "tf_embedding", "train", "--config", "job.json",
                   "--model-dir", "job_model", *fx.JOB_FLAGS, "--resume"], tmp_path)
    assert "resumed job_model at step 2" in stdout
    metrics = json.loads((job_model / "metrics.json").read_text())
    assert sorted(metrics) == sorted(saved_metrics)
    for name, value in saved_metrics.items():
        if isinstance(value, float):
            assert metrics[name] == pytest.approx(value, rel=1e-6, abs=1e-6), name
        else:  # counts and the export's path
            assert metrics[name] == value, name
    scored = tmp_path / "rescored"
    scored.mkdir()
    _assert_same_scores(_predictions(job_model / "export", scored),
                        (fx.DATA / fx.JOB_PREDICTIONS).read_text())
