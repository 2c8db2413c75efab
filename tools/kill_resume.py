"""kill -9 `tf-embedding train` at random moments, resume each run, and check that it ends
bit-identical to an unkilled run.

    python tools/kill_resume.py --moments 10 [--steps 60 --checkpoint-every 10 --seed 0]

First one run trains to the end untouched (the reference; its wall clock bounds the moments).
Then, for each moment t drawn uniformly from [0, that wall clock], a fresh run is killed with
SIGKILL t seconds after it started (while importing, building, training or writing a
checkpoint, wherever it is), and run again with `--resume` until it exits with status 0 (without
`--resume` if it was killed before its first checkpoint, as that run has nothing to resume). Its
final checkpoint must hold the reference's values bit for bit (save_counter aside: it counts
saves). Exit status 1 if any does not. Runs in one process each; small flags keep a moment to a
few seconds.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

# A small run: a few seconds of training on top of TensorFlow's start-up.
CONFIG = {
    "batch_size": 256, "eval_examples": 1024, "embedding_dim": 4, "bottom_mlp": "8",
    "top_mlp": "16", "progress": "none", "learning_rate": 0.005,
    "tables": [
        {"name": "user", "vocabulary_size": 2000, "combiner": "sum", "head_size": 50},
        {"name": "item", "vocabulary_size": 500, "combiner": "mean", "head_size": 50}],
    "features": [
        {"name": "user_id", "table": "user"}, {"name": "item_id", "table": "item"},
        {"name": "history", "table": "item", "max_ids": 4, "effect_scale": 0.5}],
    "num_dense": 2,
}


def train(config: str, model_dir: str, resume: bool) -> subprocess.Popen:
    """`python -m tf_embedding train` of this checkout, started."""
    return subprocess.Popen(
        [sys.executable, "-m", "tf_embedding", "train", "--config", config, "--model-dir",
         model_dir, *(["--resume"] if resume else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ})


def has_checkpoint(model_dir: str) -> bool:
    return os.path.exists(os.path.join(model_dir, "checkpoints", "checkpoint"))


def checkpoint_values(model_dir: str) -> dict[str, np.ndarray]:
    """The final checkpoint's values, save_counter (which counts saves) aside."""
    import tensorflow as tf  # only once the runs are done: it is slow to import
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def killed_then_resumed(config: str, model_dir: str, moment: float) -> tuple[bool, int]:
    """Kills a fresh run `moment` s in, then resumes until it ends; (killed, resumes)."""
    process = train(config, model_dir, resume=False)
    try:
        status = process.wait(moment)
        killed = False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        status, killed = None, True
    resumes = 0
    while status != 0:
        if resumes == 5:
            raise RuntimeError(f"{model_dir}: still failing after 5 resumes:\n"
                               f"{process.stderr.read()[-2000:]}")
        process = train(config, model_dir, resume=has_checkpoint(model_dir))
        status = process.wait()
        resumes += 1
    return killed, resumes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moments", type=int, default=10, help="kills (each a fresh run)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="of the kill moments")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="kill_resume_")
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump({**CONFIG, "steps": args.steps, "checkpoint_every": args.checkpoint_every}, f)
    start = time.monotonic()
    reference = train(config, os.path.join(work, "reference"), resume=False)
    if reference.wait() != 0:
        raise RuntimeError(reference.stderr.read()[-2000:])
    wall = time.monotonic() - start
    print(f"reference run: {wall:.1f} s; kill moments drawn from [0, {wall:.1f}] s", flush=True)
    expected = checkpoint_values(os.path.join(work, "reference"))
    draw = random.Random(args.seed)
    moments = sorted(draw.uniform(0, wall) for _ in range(args.moments))
    failures = 0
    for number, moment in enumerate(moments):
        model_dir = os.path.join(work, f"moment{number}")
        killed, resumes = killed_then_resumed(config, model_dir, moment)
        values = checkpoint_values(model_dir)
        same = values.keys() == expected.keys() and all(
            np.array_equal(values[key], expected[key]) for key in expected)
        failures += not same
        print(f"kill at {moment:5.1f} s: {'killed' if killed else 'had finished'}, "
              f"{resumes} resume(s), "
              f"{'bit-identical' if same else 'DIFFERENT'}", flush=True)
    print(f"{args.moments - failures} of {args.moments} killed runs bit-identical to the "
          f"reference ({work})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
