"""Where a step of `tf-embedding train` goes, and the whole job's speed against stock TensorFlow:
the main job run with a timed window of its steps, then TensorFlow's profiler on for a window,
and the profiled time split by what it was for.

    python tools/profile_main_job.py [--start 0] [--seconds 10] [train flags...]
    python tools/profile_main_job.py --variants stock,sharded,replicated,keras [--rounds 2] \\
        [train flags...]
    python tools/profile_main_job.py --variants sharded@../old-checkout,sharded [train flags...]

One job (no --variants) runs with the given `train` flags (default: the job's defaults, with
--progress none and a temporary --model-dir) until the profile is taken, then stops as Ctrl-C
stops it (with a checkpoint, without evaluation or export). Between its first and second
checkpoints (steps --checkpoint-every to twice that, one checkpoint save included, as in the
job) it is timed: examples/s, and the process's CPU time per example. --start seconds after the
second checkpoint the profiler records --seconds; the report gives, per training step (the
train step calls it holds):

- wall: the window's length over those steps;
- the Python thread: inside the step's tf.function call (`train_step`, or Keras' train
  function for --embedding-api keras), in the input pipeline's `next()` (tf.data), and the rest
  (the loop, progress);
- the step's ops, CPU time summed over TensorFlow's threads, by the part of the model they
  belong to (their name scopes and op types): embedding (the engine's ops: enqueue, dequeue,
  apply_gradients; stock TF's lookups and their Adagrad), dense model (forward and backward),
  dense optimizer, metrics, other; and the ops tf.data's threads run (the input pipeline, which
  runs beside the step on the same cores).

With --variants, each round runs one such job per `--embedding-api` value, each in a fresh
process, in the given order and then reversed (ABBA), and the report pairs them: examples/s and
its ratio to the `stock` job of the same round (or, without a `stock` variant, to the first
variant's), median over rounds, the CPU µs per example (unprofiled), and the profiled CPU µs per
example by part. `others` is the cores other processes used while the round's jobs ran (from
/proc/stat). A variant `API@DIR` runs the job of the checkout in DIR (its `tf_embedding`, built,
imported instead of this one's; this file's timing and flags), so a change is timed against
the code before it: a setting of PYTHONPATH would not do, as this tool puts its own checkout
first on the path.
"""

import argparse
import collections
import glob
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The checkout's tf_embedding, also when another copy is installed (--source puts another first).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchmark_machine as machine  # pylint: disable=wrong-import-position

# Op categories, first match wins: (category, pattern on "scope/op:OpType").
CATEGORIES = (
    ("embedding", re.compile(r"(^|/)(enqueue|dequeue|apply_gradients|embedding)[^/]*/|:Tfe|"
                             r"Queue|:Assert")),
    ("dense optimizer", re.compile(r"(^|/)(adam|adagrad|sgd|optimizer)[^/]*/", re.I)),
    ("metrics", re.compile(r"(^|/)(running_metrics|metrics|auc|mean)[^/]*/", re.I)),
    ("dense model", re.compile(r"(^|/)(ranking_model|gradient_tape|gradients)[^/]*/|"
                               r"MatMul|BiasAdd|Relu|Sigmoid", re.I)),
)
PARTS = tuple(category for category, _ in CATEGORIES) + ("other", "input pipeline")
# The tf.functions one training step is a call of: the custom loop's, Keras' model.fit's.
STEP_FUNCTIONS = ("train_step", "multi_step_on_iterator")


def _category(op_name: str) -> str:
    for category, pattern in CATEGORIES:
        if pattern.search(op_name):
            return category
    return "other"


def _watch(logdir: str, model_dir: str, start: float, seconds: float,
           timed: dict[str, float]) -> threading.Thread:
    """In a thread: times the job in `model_dir` from its first checkpoint to its second
    (`timed`: seconds, process CPU seconds), then, `start` seconds later, records `seconds` of
    TensorFlow's profile, then stops the job as Ctrl-C does."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf_embedding.job.options import checkpoint_dir  # pylint: disable=import-outside-toplevel

    def next_checkpoint(after: str | None) -> str:
        while (latest := tf.train.latest_checkpoint(checkpoint_dir(model_dir))) in (None, after):
            time.sleep(0.02)
        return latest

    def run() -> None:
        first = next_checkpoint(None)
        wall, cpu = time.perf_counter(), time.process_time()
        next_checkpoint(first)
        timed.update(seconds=time.perf_counter() - wall, cpu_seconds=time.process_time() - cpu)
        time.sleep(start)
        tf.profiler.experimental.start(logdir)
        time.sleep(seconds)
        tf.profiler.experimental.stop()
        signal.raise_signal(signal.SIGINT)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _events(logdir: str) -> Iterator[tuple[str, str, float]]:
    """(thread line, event name, duration in ms) of every event the profiler recorded."""
    from tensorflow.tsl.profiler.protobuf import (  # pylint: disable=import-outside-toplevel
        xplane_pb2)
    path = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                yield (line.name, plane.event_metadata[event.metadata_id].name,
                       event.duration_ps / 1e9)


def profile(logdir: str, wall_ms: float) -> dict[str, Any]:
    """The profile in `logdir` of `wall_ms`, per step: {"steps", "wall", "python": {part: ms},
    "ops": {part: CPU ms}}."""
    python = collections.Counter()
    ops = collections.Counter()
    steps = 0
    for line, name, ms in _events(logdir):
        if line == "python":
            if name in STEP_FUNCTIONS:
                python["train_step call"] += ms
                steps += 1
            elif name.startswith("Iterator::") and name.count("::") == 1:
                python["input pipeline next()"] += ms
        elif re.match(r"^[\w/.-]+:\w+$", name):
            # tf.data's threads run the input pipeline's ops (the synthetic data's generator).
            ops["input pipeline" if line.startswith("tf_data") else _category(name)] += ms
    if steps == 0:
        raise ValueError("no train step in the profile: raise --seconds")
    python["the rest (loop, progress)"] = max(
        wall_ms - python["train_step call"] - python["input pipeline next()"], 0.0)
    return {"steps": steps, "wall": wall_ms / steps,
            "python": {part: ms / steps for part, ms in python.items()},
            "ops": {part: ms / steps for part, ms in ops.most_common()}}


def report(result: dict[str, Any]) -> str:
    """One job's tables (the module docstring)."""
    lines = [f"{result['examples_per_second']:.0f} examples/s over {result['timed_steps']} "
             f"steps, {result['cpu_us_per_example']:.1f} CPU µs per example",
             f"{result['steps']} steps profiled, {result['wall']:.2f} ms wall per step", "",
             "| Python thread, per step | ms |", "|---|---:|"]
    lines += [f"| {part} | {ms:.2f} |" for part, ms in result["python"].items()]
    lines += ["", "| ops, CPU ms per step | ms | share |", "|---|---:|---:|"]
    total = sum(result["ops"].values())
    lines += [f"| {part} | {ms:.2f} | {ms / total:.0%} |" for part, ms in result["ops"].items()]
    return "\n".join(lines)


def run_job(args: argparse.Namespace, train_flags: list[str]) -> dict[str, Any]:
    """Runs, times and profiles one job (the module docstring); returns its figures."""
    from tf_embedding.job import cli  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as scratch:
        flags = ["--progress", "none", "--model-dir", os.path.join(scratch, "run")] + train_flags
        options = cli.parse(["train", *flags])[1]
        if not options.stop_at_step:
            flags += ["--steps", str(10 ** 9)]  # the profile stops it
        logdir = os.path.join(scratch, "profile")
        timed: dict[str, float] = {}
        thread = _watch(logdir, options.model_dir, args.start, args.seconds, timed)
        status = cli.main(["train", *flags])
        # 130: stopped by the profile's end, as Ctrl-C stops it.
        if status not in (0, 130) or thread.is_alive():
            raise RuntimeError("the job ended before the profile did: raise --stop-at-step or "
                               "lower --start")
        examples = options.checkpoint_every * options.batch_size
        return {"embedding_api": options.embedding_api, "timed_steps": options.checkpoint_every,
                "examples_per_second": examples / timed["seconds"],
                "cpu_us_per_example": timed["cpu_seconds"] / examples * 1e6,
                "batch_size": options.batch_size, **profile(logdir, args.seconds * 1e3)}


def _run_child(args: argparse.Namespace, variant: str, train_flags: list[str],
               scratch: str) -> dict[str, Any]:
    """One job of `variant` (`API` or `API@DIR`) in a fresh process: its figures."""
    embedding_api, _, source = variant.partition("@")
    path = os.path.join(scratch, "job.json")
    command = [sys.executable, os.path.abspath(__file__), "--json", path, "--start",
               str(args.start), "--seconds", str(args.seconds), *train_flags,
               "--embedding-api", embedding_api] + (["--source", source] if source else [])
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{result.stderr[-3000:]}")
    with open(path) as f:
        return dict(json.load(f), variant=variant)


def run_paired(args: argparse.Namespace, train_flags: list[str]) -> list[dict[str, Any]]:
    """Every round's jobs, the variants in order then reversed; each with the round number and
    the cores other processes used during its round."""
    variants = args.variants.split(",")
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for round_number in range(args.rounds):
            others = machine.OtherProcessesCpu()
            order = variants if round_number % 2 == 0 else variants[::-1]
            jobs = [_run_child(args, variant, train_flags, scratch) for variant in order]
            cores = others.cores()[0]
            for job in jobs:
                job.update(round=round_number, others=cores)
                print(f"round {round_number}: {job['variant']} "
                      f"{job['examples_per_second']:.0f} examples/s", file=sys.stderr)
            results += jobs
    return results


def paired_report(results: list[dict[str, Any]]) -> str:
    """One row per variant: medians over the rounds, the ratio to the `stock` job (else to the
    first variant) paired by round, and the profiled CPU µs per example by part."""
    by_variant: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for result in results:
        by_variant[result.get("variant", result["embedding_api"])].append(result)
    baseline = "stock" if "stock" in by_variant else next(iter(by_variant), "")
    base = {r["round"]: r["examples_per_second"] for r in by_variant.get(baseline, [])}
    parts = [part for part in PARTS if any(part in r["ops"] for r in results)]
    header = (["variant", "examples/s", f"x {baseline}", "CPU µs/example",
               "loop ms/step"] + [f"{part} µs/ex" for part in parts] + ["others"])
    rows = []
    for variant, runs in by_variant.items():
        def median(value: Any) -> float:
            return statistics.median(value(r) for r in runs)
        ratio = (f"{median(lambda r: r['examples_per_second'] / base[r['round']]):.2f}x"
                 if base else "-")
        others = [r["others"] for r in runs if r["others"] is not None]
        rows.append([variant, f"{median(lambda r: r['examples_per_second']):.0f}", ratio,
                     f"{median(lambda r: r['cpu_us_per_example']):.1f}",
                     f"{median(lambda r: r['python']['the rest (loop, progress)']):.2f}"]
                    + [f"{median(lambda r: r['ops'].get(p, 0.0) / r['batch_size'] * 1e3):.1f}"
                       for p in parts]
                    + [f"{max(others):.2f}" if others else "-"])
    lines = [f"{len(results) // max(len(by_variant), 1)} rounds; medians over them; profiled "
             "parts are CPU µs per example under the profiler (which slows the step)", "",
             "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=float, default=0.0,
                        help="seconds after the run's second checkpoint before the profiler "
                             "starts")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds profiled")
    parser.add_argument("--variants", default="",
                        help="--embedding-api values to compare in paired rounds, e.g. "
                             "stock,sharded,replicated,keras; API@DIR runs the checkout in DIR")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of --variants")
    parser.add_argument("--json", default="", help=argparse.SUPPRESS)  # a paired run's child
    parser.add_argument("--source", default="", help=argparse.SUPPRESS)  # its checkout
    args, train_flags = parser.parse_known_args()
    if args.source:
        sys.path.insert(0, os.path.abspath(args.source))
    if args.variants:
        print("\n".join(machine.machine_info([os.cpu_count()], 0)[:4]))
        print(paired_report(run_paired(args, train_flags)))
        return 0
    try:
        result = run_job(args, train_flags)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
