"""Writes the golden files of tests/golden/data/ (README.md there): what today's code writes,
kept so that every later change is tested against it. Do not regenerate them casually: a change
that breaks them breaks users' files.

    .venv/bin/python tests/golden/make_golden.py --from-head [--force]

`--from-head` runs the generator on `git archive HEAD` of tf_embedding/ (with the working tree's
built op library, refused when cc/ or setup.py differ from HEAD), so that the files are what
the commit in manifest.json writes, whatever other uncommitted work is in the tree. Without it,
the importable tf_embedding writes them. Existing files are kept unless `--force`.

Deterministic: fixed tables, inputs and seeds; the same code writes the same values.
"""

import argparse
import gzip
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position

import golden_fixture as fx  # pylint: disable=wrong-import-position

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT = fx.DATA  # --output


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()


def _rerun_from_head(argv: list[str]) -> int:
    """Runs this script again on HEAD's tf_embedding/ (and the working tree's op library)."""
    if _git("status", "--porcelain", "--", "cc", "setup.py", "BUILD", "copts.bzl"):
        sys.exit("cc/ or setup.py differ from HEAD: the built op library is not HEAD's")
    with tempfile.TemporaryDirectory(prefix="golden_head_") as source:
        archive = subprocess.run(["git", "archive", "HEAD", "tf_embedding"], cwd=REPO,
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", source], input=archive, check=True)
        for built in ("_ops.so", "_build_info.py"):
            shutil.copy(REPO / "tf_embedding" / built, pathlib.Path(source) / "tf_embedding")
        env = {**os.environ, "PYTHONPATH": source, "GOLDEN_SOURCE": "HEAD"}
        return subprocess.run([sys.executable, __file__, *argv], env=env, check=False).returncode


def _provenance() -> dict:
    import tf_embedding  # pylint: disable=import-outside-toplevel
    source = pathlib.Path(tf_embedding.__file__).parent
    from_head = os.environ.get("GOLDEN_SOURCE") == "HEAD"
    dirty = "" if from_head else _git("status", "--porcelain", "--", "tf_embedding", "cc")
    return {"commit": _git("rev-parse", "--short", "HEAD"),
            "source": "git archive HEAD" if from_head else str(source),
            "uncommitted_changes_in_source": bool(dirty),
            "tensorflow": tf.__version__, "keras": tf.keras.__version__,
            "python": platform.python_version()}


def _save(embedding, name: str) -> str:
    prefix = OUT / fx.CHECKPOINTS[name]
    return tf.train.Checkpoint(embedding=embedding).save(str(prefix)[:-len("-1")])


def sharded_checkpoint() -> str:
    """TPUEmbedding, default strategy: two Adagrad steps of TF's protocol (enqueue, dequeue
    under a tape, apply_gradients) on loss = sum(activations * cotangents)."""
    embedding = fx.make("sharded")
    for step in (0, 1):
        ids, weights = fx.features(step)
        cotangents = fx.cotangents(step)
        embedding.enqueue(ids, weights, training=True)
        with tf.GradientTape() as tape:
            activations = embedding.dequeue()
            tape.watch(activations)
            loss = tf.add_n([tf.reduce_sum(activations[name] * cotangents[name])
                             for name in activations])
        embedding.apply_gradients(tape.gradient(loss, activations))
    return _save(embedding, "sharded"), embedding


def _train_v0(embedding, keras_optimizer) -> None:
    """Two steps of TF's documented V0 loop: the tables' IndexedSlices gradients of
    loss = sum(activations * cotangents), applied by a Keras optimizer."""
    embedding.build()
    tables = list(embedding.embedding_tables.values())
    for step in (0, 1):
        ids, weights = fx.features(step)
        cotangents = fx.cotangents(step)
        with tf.GradientTape() as tape:
            activations = embedding(ids, weights)
            loss = tf.add_n([tf.reduce_sum(activations[name] * cotangents[name])
                             for name in activations])
        keras_optimizer.apply_gradients(zip(tape.gradient(loss, tables), tables))


def v0_checkpoint() -> str:
    """TPUEmbeddingV0 with its own Adagrad slots: the tables trained by Keras 3's SGD (which
    has no slots), then the slots given fixed values (a V0 loop never changes them itself)."""
    embedding = fx.make("v0")
    _train_v0(embedding, tf.keras.optimizers.SGD(fx.ADAGRAD["learning_rate"]))
    rng = np.random.default_rng(5)
    for slots in embedding.table_variables().values():
        slots["accumulators"].assign(
            rng.uniform(0.1, 1.0, slots["accumulators"].shape).astype(np.float32))
    return _save(embedding, "v0"), embedding


def v0_keras_slots_checkpoint() -> str:
    """TPUEmbeddingV0 whose slots are Keras 3 Adagrad's, trained by it for two steps."""
    embedding, keras_optimizer = fx.v0_with_keras_slots()
    _train_v0(embedding, keras_optimizer)
    return _save(embedding, "v0_keras_slots"), embedding


def serving_checkpoint() -> str:
    """TPUEmbeddingForServing with Adagrad slots, every variable given fixed values."""
    embedding = fx.make("serving")
    rng = np.random.default_rng(7)
    for slots in embedding.variables.values():
        for variable in slots.values():
            variable.assign(rng.uniform(0.1, 1.0, variable.shape).astype(np.float32))
    return _save(embedding, "serving"), embedding


def checkpoints(expected: dict, manifest: dict) -> None:
    manifest["checkpoints"] = {}
    for kind, write in (("sharded", sharded_checkpoint), ("v0", v0_checkpoint),
                        ("v0_keras_slots", v0_keras_slots_checkpoint),
                        ("serving", serving_checkpoint)):
        prefix, embedding = write()
        assert prefix == str(OUT / fx.CHECKPOINTS[kind]), prefix
        manifest["checkpoints"][kind] = {
            "path": fx.CHECKPOINTS[kind], "class": type(embedding).__name__,
            "keys": {key: shape for key, shape in tf.train.list_variables(prefix)}}
        for key, value in fx.checkpoint_tensors(prefix).items():
            expected[f"{kind}/tensor/{key}"] = value
        for name, value in fx.lookup(kind, embedding).items():
            expected[f"{kind}/lookup/{name}"] = value


def keras_file(expected: dict) -> None:
    """A functional model around the Keras layer, fitted two steps and saved; then what it
    predicts, its layer's state, and the same after one more step on batch 2."""
    tf.keras.utils.set_random_seed(0)
    model = fx.keras_model()
    for step in (0, 1):
        model.fit(fx.keras_features(step), fx.keras_labels(step), batch_size=fx.BATCH,
                  epochs=1, verbose=0, shuffle=False)
    path = OUT / fx.KERAS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(path))
    expected["keras/predict"] = model.predict(fx.keras_features(2), verbose=0)
    for key, value in fx.keras_state(model).items():
        expected[f"keras/state/{key}"] = value
    model.fit(fx.keras_features(2), fx.keras_labels(2), batch_size=fx.BATCH, epochs=1,
              verbose=0, shuffle=False)
    expected["keras/after_step/predict"] = model.predict(fx.keras_features(2), verbose=0)
    for key, value in fx.keras_state(model).items():
        expected[f"keras/after_step/state/{key}"] = value


SPECS = ({"watched": tf.RaggedTensorSpec([None, None], tf.int64, 1, tf.int64),
          "favorited": tf.SparseTensorSpec([None, None], tf.int64),
          "friends": tf.TensorSpec([None], tf.int64)},
         tf.RaggedTensorSpec([None, None], tf.float32, 1, tf.int64))


class ServingModule(tf.Module):
    """The export: `serve` (every feature, watched's weights) and `serving_default`
    (friends only)."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    @tf.function(input_signature=SPECS)
    def serve(self, features, watched_weights):
        return self.embedding(features, {"watched": watched_weights, "favorited": None,
                                         "friends": None})

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="friends")])
    def serve_friends(self, friends):
        return self.embedding({"friends": friends})["friends"]


def saved_model(expected: dict) -> None:
    """TPUEmbeddingForServing without slots, the trained sharded checkpoint restored into it,
    exported with tf.saved_model.save; its inputs and outputs on batch 2."""
    import tf_embedding  # pylint: disable=import-outside-toplevel
    embedding = tf_embedding.TPUEmbeddingForServing(fx.feature_config(), optimizer=None)
    tf.train.Checkpoint(embedding=embedding).restore(
        str(OUT / fx.CHECKPOINTS["sharded"])).expect_partial()
    module = ServingModule(embedding)
    ids, weights = fx.features(2)
    outputs = module.serve(ids, weights["watched"])
    outputs["signature"] = module.serve_friends(ids["friends"])
    tf.saved_model.save(module, str(OUT / fx.SAVED_MODEL),
                        signatures={"serving_default": module.serve_friends})
    (OUT / fx.SAVED_MODEL / "assets").rmdir()  # empty; git keeps no empty directory
    watched, favorited = ids["watched"], ids["favorited"]
    arrays = {"watched_values": watched.flat_values, "watched_splits": watched.row_splits,
              "weights_values": weights["watched"].flat_values,
              "weights_splits": weights["watched"].row_splits,
              "favorited_indices": favorited.indices, "favorited_values": favorited.values,
              "favorited_shape": favorited.dense_shape, "friends": ids["friends"]}
    for name, value in arrays.items():
        expected[f"saved_model/inputs/{name}"] = np.asarray(value)
    for name, value in outputs.items():
        expected[f"saved_model/outputs/{name}"] = value.numpy()


def _command(args: list[str], cwd: pathlib.Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tf_embedding", *args], cwd=cwd,
                            capture_output=True, text=True, check=False)
    if result.returncode:
        sys.exit(f"tf-embedding {args[0]} failed:\n{result.stderr[-3000:]}")


def _reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def job_model(manifest: dict) -> None:
    """`tf-embedding train` of two steps on a tiny synthetic layout; its model directory (with
    its 1.3 MB export, 10x smaller gzipped) as one tar.gz; eight synthetic lines and a malformed
    one, and what `tf-embedding predict` scores them with the export."""
    job = OUT / "job"
    job.mkdir(parents=True, exist_ok=True)
    config = OUT / fx.JOB_CONFIG
    config.write_text(json.dumps(fx.JOB_LAYOUT, indent=2) + "\n")
    with tempfile.TemporaryDirectory(prefix="golden_job_") as work:
        work = pathlib.Path(work)
        shutil.copy(config, work / "job.json")  # relative paths only in the model directory
        _command(["train", "--config", "job.json", "--model-dir", "job_model", *fx.JOB_FLAGS],
                 work)
        _command(["generate", "--config", "job.json", "--batch-size", "8", "--examples", "8",
                  "--output", "lines.tsv"], work)
        lines = (work / "lines.tsv").read_text()
        (OUT / fx.JOB_PREDICT_INPUT).write_text(lines + "not a record\n")
        _command(["predict", "--model", "job_model/export", "--input",
                  str(OUT / fx.JOB_PREDICT_INPUT), "--output", "predictions.txt"], work)
        shutil.copy(work / "predictions.txt", OUT / fx.JOB_PREDICTIONS)
        with gzip.GzipFile(OUT / fx.JOB_ARCHIVE, "wb", compresslevel=9, mtime=0) as packed, \
                tarfile.open(fileobj=packed, mode="w") as archive:
            paths = sorted(p for p in (work / "job_model").rglob("*"))
            for path in [work / "job_model", *paths]:
                archive.add(path, arcname=str(path.relative_to(work)), recursive=False,
                            filter=_reset)
        manifest["job"] = {"command": ["tf-embedding", "train", "--config", "job.json",
                                       "--model-dir", "job_model", *fx.JOB_FLAGS],
                           "files": [str(p.relative_to(work)) for p in paths if p.is_file()]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-head", action="store_true",
                        help="generate with HEAD's tf_embedding/ (git archive)")
    parser.add_argument("--force", action="store_true", help="replace existing golden files")
    parser.add_argument("--output", type=pathlib.Path, default=fx.DATA,
                        help="directory to write (default: tests/golden/data); another one to "
                             "compare what today's code writes with the golden files")
    args = parser.parse_args(argv)
    if args.from_head:
        return _rerun_from_head([a for a in argv if a != "--from-head"])
    global OUT  # pylint: disable=global-statement
    OUT = args.output.resolve()
    if OUT.exists():
        if not args.force:
            sys.exit(f"{OUT} exists: golden files are not regenerated casually (README.md); "
                     "pass --force to replace them")
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    manifest, expected = _provenance(), {}
    checkpoints(expected, manifest)
    keras_file(expected)
    saved_model(expected)
    job_model(manifest)
    np.savez(OUT / fx.EXPECTED, **expected)
    (OUT / fx.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"wrote {OUT} (commit {manifest['commit']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
