"""What the `tf-embedding` end-to-end tests share: the small synthetic log's job config, a fresh
interpreter to run code in, and a run's checkpointed values."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import tensorflow as tf

CONFIG = {
    "batch_size": 512, "steps": 160, "checkpoint_every": 50, "eval_examples": 16384,
    "embedding_dim": 8, "bottom_mlp": "16", "top_mlp": "32", "progress": "none",
    "embedding_learning_rate": 2.0, "learning_rate": 0.005,
    "tables": [
        {"name": "user", "vocabulary_size": 3000, "combiner": "sum", "head_size": 100},
        {"name": "item", "vocabulary_size": 1000, "combiner": "mean", "head_size": 100},
        {"name": "term", "vocabulary_size": 300, "combiner": "sqrtn"},
        {"name": "hour", "vocabulary_size": 24, "zipf_alpha": 0.3}],
    "features": [
        {"name": "user_id", "table": "user"}, {"name": "item_id", "table": "item"},
        {"name": "history", "table": "item", "max_ids": 4, "effect_scale": 0.5},
        {"name": "terms", "table": "term", "weighted": True, "max_ids": 3},
        {"name": "hour", "table": "hour", "effect_scale": 0.5}],
    "num_dense": 2,
}


def run_python(code: str, env: dict | None = None) -> str:
    """Runs code in a fresh interpreter and returns its stdout."""
    # A hang guard, not a speed check: a training run takes ~30 s idle, far more on a loaded
    # 2-core machine (was 120 s).
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, env={**os.environ, **(env or {})}, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def checkpoint_values(model_dir: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    # save_counter counts saves, which differ between the runs by design.
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def generate_examples(config: str, root, examples: int) -> tuple[str, str]:
    """(TSV file, TFRecord file) of the same `examples` held-out examples of `config`'s run,
    written by `tf-embedding generate` into `root`."""
    from tf_embedding.job import cli  # pylint: disable=import-outside-toplevel
    tsv, records = str(root / "eval.tsv"), str(root / "eval.tfrecord")
    for path, fmt in ((tsv, "tsv"), (records, "tfrecord")):
        assert cli.main(["generate", "--config", config, "--output", path, "--format", fmt,
                         "--examples", str(examples), "--batch-size", "300"]) == 0
    return tsv, records
