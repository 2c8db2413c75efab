"""kill -9 `tf-embedding train` at random moments, resume each run, and check that it ends
bit-identical to an unkilled run.

    python tools/kill_resume.py --moments 10 [--during-writes 5] [--steps 60
                                --checkpoint-every 10 --seed 0]

First one run trains to the end untouched (the reference; its wall clock bounds the moments).
Then, for each moment t drawn uniformly from [0, that wall clock], a fresh run is killed with
SIGKILL t seconds after it started (while importing, building, training or writing a
checkpoint, wherever it is), and run again with `--resume` until it exits with status 0 (without
`--resume` if it was killed before its first checkpoint, as that run has nothing to resume). Its
final checkpoint must hold the reference's values bit for bit (save_counter aside: it counts
saves). Exit status 1 if any does not. Runs in one process each; small flags keep a moment to a
few seconds.

A random moment rarely falls inside a checkpoint write (a few milliseconds here), so
`--during-writes N` adds N runs each killed the moment a write is seen in progress: the
checkpoint directory is polled and the run killed as soon as the k-th write's temporary files
appear (k drawn from the run's writes). Each line says whether a write was in progress at the
kill: the names in the checkpoint directory that only a write in progress has.
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
from typing import Callable

import numpy as np

from tf_embedding.job.launcher import has_checkpoint
from tf_embedding.job.options import checkpoint_dir

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


def writes_in_progress(model_dir: str) -> list[str]:
    """The names in the checkpoint directory that exist only while a write is in progress:
    TF writes a checkpoint's shards under `<prefix>_temp/` and the `checkpoint` state file through
    a temporary file, then renames them into place."""
    try:
        names = os.listdir(checkpoint_dir(model_dir))
    except FileNotFoundError:
        return []
    return sorted(name for name in names if "_temp" in name or ".tmp" in name)


def checkpoint_values(model_dir: str) -> dict[str, np.ndarray]:
    """The final checkpoint's values, save_counter (which counts saves) aside."""
    import tensorflow as tf  # only once the runs are done: it is slow to import
    reader = tf.train.load_checkpoint(checkpoint_dir(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def kill_at_moment(process: subprocess.Popen, model_dir: str, moment: float) -> list[str] | None:
    """Kills `process` `moment` s in; the writes in progress then, or None if it had ended."""
    try:
        process.wait(moment)
        return None
    except subprocess.TimeoutExpired:
        return kill(process, model_dir)


def kill_in_write(process: subprocess.Popen, model_dir: str, write: int) -> list[str] | None:
    """Kills `process` as soon as its `write`-th checkpoint write (counting from 1) is seen in
    progress; the writes in progress then, or None if it ended first."""
    seen: set[str] = set()
    while process.poll() is None:
        in_progress = writes_in_progress(model_dir)
        seen.update(name for name in in_progress if name.endswith("_temp"))
        if len(seen) >= write:
            return kill(process, model_dir)
        time.sleep(0.0002)
    return None


def kill(process: subprocess.Popen, model_dir: str) -> list[str]:
    """SIGKILL; the writes in progress at that moment (the files stay as the kill left them)."""
    process.send_signal(signal.SIGKILL)
    process.wait()
    return writes_in_progress(model_dir)


def killed_then_resumed(config: str, model_dir: str,
                        killer: Callable[[subprocess.Popen, str], list[str] | None]
                        ) -> tuple[list[str] | None, int]:
    """Kills a fresh run by `killer`, then resumes until it ends; (the writes in progress at the
    kill or None if the run had ended, resumes)."""
    process = train(config, model_dir, resume=False)
    in_progress = killer(process, model_dir)
    status = None if in_progress is not None else process.returncode
    resumes = 0
    while status != 0:
        if resumes == 5:
            raise RuntimeError(f"{model_dir}: still failing after 5 resumes:\n"
                               f"{process.stderr.read()[-2000:]}")
        process = train(config, model_dir, resume=has_checkpoint(model_dir))
        status = process.wait()
        resumes += 1
    return in_progress, resumes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moments", type=int, default=10, help="kills (each a fresh run)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--during-writes", type=int, default=0,
                        help="further kills, each inside a checkpoint write")
    parser.add_argument("--seed", type=int, default=0, help="of the kill moments and writes")
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
    # (what the line says, how the run is killed)
    kills = [(f"kill at {moment:5.1f} s", lambda p, d, m=moment: kill_at_moment(p, d, m))
             for moment in sorted(draw.uniform(0, wall) for _ in range(args.moments))]
    # The writes of a run: one every --checkpoint-every steps, and the last.
    writes = -(-args.steps // args.checkpoint_every)
    kills += [(f"kill in write {write:2d}", lambda p, d, w=write: kill_in_write(p, d, w))
              for write in sorted(draw.randint(1, writes) for _ in range(args.during_writes))]
    failures = 0
    for number, (label, killer) in enumerate(kills):
        model_dir = os.path.join(work, f"run{number}")
        in_progress, resumes = killed_then_resumed(config, model_dir, killer)
        values = checkpoint_values(model_dir)
        same = values.keys() == expected.keys() and all(
            np.array_equal(values[key], expected[key]) for key in expected)
        failures += not same
        state = ("had finished" if in_progress is None else
                 f"killed in a write ({', '.join(in_progress)})" if in_progress else "killed")
        print(f"{label}: {state}, {resumes} resume(s), "
              f"{'bit-identical' if same else 'DIFFERENT'}", flush=True)
    print(f"{len(kills) - failures} of {len(kills)} killed runs bit-identical to the "
          f"reference ({work})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
