"""Where a step of `tf-embedding train` goes: the main job run in this process, TensorFlow's
profiler on for a window of its steps, and the profiled time split by what it was for.

    python tools/profile_main_job.py [--start 0] [--seconds 10] [train flags...]

The job runs with the given `train` flags (default: its defaults, with --steps 1200 and
--progress none and a temporary --model-dir). --start seconds after the run's first checkpoint
(step --checkpoint-every, 500 by default: the window then holds training steps however long the
job took to start) the profiler records --seconds of it; the report gives, per training step
(the train step calls it holds):

- wall: the window's length over those steps;
- the Python thread: inside the train step's tf.function call (`train_step`), in the input
  pipeline's `next()` (tf.data), and the rest (the loop, progress);
- the step's ops, CPU time summed over TensorFlow's threads, by the part of the model they
  belong to (their name scopes and op types): embedding (the engine's ops: enqueue, dequeue,
  apply_gradients), dense model (forward and backward), dense optimizer, metrics, other; and
  the ops tf.data's threads run (the input pipeline, which runs beside the step on the same
  cores).
"""

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import threading
import time
from typing import Iterator

# Op categories, first match wins: (category, pattern on "scope/op:OpType").
CATEGORIES = (
    ("embedding", re.compile(r"(^|/)(enqueue|dequeue|apply_gradients|embedding)[^/]*/|:Tfe|"
                             r"Queue|:Assert")),
    ("dense optimizer", re.compile(r"(^|/)(adam|adagrad|sgd|optimizer)[^/]*/", re.I)),
    ("metrics", re.compile(r"(^|/)(running_metrics|metrics|auc|mean)[^/]*/", re.I)),
    ("dense model", re.compile(r"(^|/)(ranking_model|gradient_tape|gradients)[^/]*/|"
                               r"MatMul|BiasAdd|Relu|Sigmoid", re.I)),
)


def _category(op_name: str) -> str:
    for category, pattern in CATEGORIES:
        if pattern.search(op_name):
            return category
    return "other"


def _profile_later(logdir: str, model_dir: str, start: float,
                   seconds: float) -> threading.Thread:
    """Records `seconds` of TensorFlow's profile, `start` seconds after the job in `model_dir`
    saved its first checkpoint, in a thread."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf_embedding.job.options import checkpoint_dir  # pylint: disable=import-outside-toplevel

    def run() -> None:
        while tf.train.latest_checkpoint(checkpoint_dir(model_dir)) is None:
            time.sleep(0.05)
        time.sleep(start)
        tf.profiler.experimental.start(logdir)
        time.sleep(seconds)
        tf.profiler.experimental.stop()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _events(logdir: str) -> Iterator[tuple[str, str, float]]:
    """(thread line, event name, duration in ms) of every event the profiler recorded."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=import-outside-toplevel
    path = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                yield (line.name, plane.event_metadata[event.metadata_id].name,
                       event.duration_ps / 1e9)


def report(logdir: str, wall_ms: float) -> str:
    """The tables of the module docstring, from the profile in `logdir` of `wall_ms`."""
    python = collections.Counter()
    ops = collections.Counter()
    steps = 0
    for line, name, ms in _events(logdir):
        if line == "python":
            if name == "train_step":
                python["train_step call"] += ms
                steps += 1
            elif name.startswith("Iterator::") and name.count("::") == 1:
                python["input next()"] += ms
        elif re.match(r"^[\w/.-]+:\w+$", name):
            # tf.data's threads run the input pipeline's ops (the synthetic data's generator).
            ops["input pipeline" if line.startswith("tf_data") else _category(name)] += ms
    if steps == 0:
        raise ValueError("no train step in the profile: raise --seconds")
    lines = [f"{steps} steps profiled, {wall_ms / steps:.2f} ms wall per step", "",
             "| Python thread, per step | ms |", "|---|---:|"]
    call, data = python["train_step call"] / steps, python["input next()"] / steps
    lines += [f"| train_step call | {call:.2f} |", f"| input pipeline next() | {data:.2f} |",
              f"| the rest (loop, progress) | {max(wall_ms / steps - call - data, 0):.2f} |",
              "", "| ops, CPU ms per step | ms | share |", "|---|---:|---:|"]
    total = sum(ops.values())
    for category, ms in ops.most_common():
        lines.append(f"| {category} | {ms / steps:.2f} | {ms / total:.0%} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 0: the 700 steps the default 1200 leave after the first checkpoint outlast the default
    # 10 s window (a 10 s delay did not: the job ended before the profile).
    parser.add_argument("--start", type=float, default=0.0,
                        help="seconds after the run's first checkpoint before the profiler "
                             "starts")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds profiled")
    args, train_flags = parser.parse_known_args()
    from tf_embedding.job import cli  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as scratch:
        flags = ["--steps", "1200", "--progress", "none", "--model-dir",
                 os.path.join(scratch, "run")] + train_flags
        # The job's model directory as its command line gives it (the flags may name another).
        model_dir = cli.parse(["train", *flags])[1].model_dir
        logdir = os.path.join(scratch, "profile")
        thread = _profile_later(logdir, model_dir, args.start, args.seconds)
        status = cli.main(["train", *flags])
        if status != 0 or thread.is_alive():
            print("the job ended before the profile did: raise --steps or lower --start",
                  file=sys.stderr)
            return 1
        print(report(logdir, args.seconds * 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
