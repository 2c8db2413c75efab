#!/usr/bin/env python3
"""A user's step against TensorFlow's per-call floor and the native limit, in one process.

    python tools/step_floor.py                 # sparse, ragged, dense; zipf, uniform; 1, 2 threads
    python tools/step_floor.py --kinds sparse --distribution zipf --threads 2 --phases forward
    python tools/step_floor.py --quick --steps 3 --rounds 1   # a smoke run (seconds)

For each input kind (`sparse`: SparseTensors, `ragged`: RaggedTensors, `dense`: int64 tensors of
one id per sample, the only dense features the embedding APIs pool), distribution, thread count
and phase, one worker process, pinned as tools/benchmark.py pins its workers, builds on the
benchmark's reference workload and ids:

  step   the benchmark's `sharded-forward` or `sharded-train` variant of that kind (one
         tf.function call: `TPUEmbedding.enqueue` + `dequeue`, + `apply_gradients` to train);
  floor  a tf.function taking the same features and returning a constant: what TensorFlow's
         call of such a step costs by itself (`benchmark_step_variants.call_floor_setup`);
  limit  the native limit (tools/benchmark_limit.py) on the same ids and CPUs, its phase as the
         benchmark compares the row with (forward gather-sum; training in API order), at its
         fastest prefetch distance, kept running beside the worker.

Each round times `--steps` pairs of calls, step then floor on the same batch (the order swapped
every pair), then the limit's phase over as many steps; for SparseTensor input also the
limit's phase reading the same SparseTensor (its indices and values, where the plain limit
reads the ids alone: `benchmark_limit.SPARSE_INPUT_PHASES`). Per round: the median step, floor and
pair difference (step - floor), and the limit. The table gives the medians over the rounds and
shares of the limit (its time over ours, as the benchmark's *of limit*): the whole step's,
and the step's without the floor (`limit / (step - floor)`): how near our own work is to the
limit once TensorFlow's per-call cost, which the limit does not pay, is left out; for
SparseTensor input the latter against the sparse-input limit too. `others` is
the cores other processes used while the worker timed (from /proc/stat, as the benchmark
measures it; `-`: rounds too short to measure); a `*` marks a row timed while they used 0.2
cores or more.

Dense rows run on ids of one per sample (`--ids-per-sample 1`), their own ids and limit.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark  # pylint: disable=wrong-import-position
import benchmark_limit  # pylint: disable=wrong-import-position
import benchmark_machine as machine  # pylint: disable=wrong-import-position
import benchmark_report  # pylint: disable=wrong-import-position
import benchmark_registry as registry  # pylint: disable=wrong-import-position
import benchmark_step_variants as step_variants  # pylint: disable=wrong-import-position
from benchmark_variants import VARIANTS  # pylint: disable=wrong-import-position
import benchmark_worker  # pylint: disable=wrong-import-position

PHASES = ("forward", "train")


def step_variant(phase: str, kind: str) -> str:
    """The benchmark's sharded variant of `phase` taking `kind` features."""
    return f"sharded-{phase}" + ("" if kind == "sparse" else f"-{kind}")


def time_rounds(job: dict[str, Any], workload: registry.Workload, threads: int, steps: int,
                warmup: int, rounds: int) -> dict[str, Any]:
    """In a worker process: the step, the floor and the limit of one job, round by round."""
    ctx = registry.Context(workload, np.load(job["ids"]))
    step = VARIANTS[step_variant(job["phase"], job["kind"])].setup(ctx)
    floor = step_variants.call_floor_setup(ctx, job["kind"])
    setups = (step, floor)
    for setup in setups:
        for i in range(warmup):
            setup.step(i)
    limit_phase = benchmark_limit.LIMIT_PHASES[job["phase"]]
    phases = {limit_phase: job["prefetch"]}
    if job["kind"] == "sparse":
        phases[benchmark_limit.SPARSE_INPUT_PHASES[limit_phase]] = job["sparse_prefetch"]
    timed = []
    with benchmark_limit.Rounds(job["ids"], workload.vocab, workload.dim, [threads], steps,
                                warmup, registry.LEARNING_RATE, registry.INITIAL_ACCUMULATOR,
                                sorted(set(phases.values()))) as rounds_of_limit:
        limit = benchmark_worker.PairedLimit(rounds_of_limit, threads, phases)
        for r in range(rounds):
            # Only while our calls run: the limit's program, a live child, counts as another.
            others = machine.OtherProcessesCpu()
            seconds: tuple[list[float], list[float]] = ([], [])
            for i in range(warmup + r * steps, warmup + (r + 1) * steps):
                for k in ((0, 1) if i % 2 else (1, 0)):
                    start = time.perf_counter()
                    setups[k].step(i)
                    seconds[k].append(time.perf_counter() - start)
            others_cores, _ = others.cores()
            limit_seconds = limit.seconds()
            timed.append({"step": statistics.median(seconds[0]),
                          "floor": statistics.median(seconds[1]),
                          "difference": statistics.median(
                              s - f for s, f in zip(*seconds)),
                          "limit": limit_seconds[limit_phase],
                          "sparse_limit": limit_seconds.get(
                              benchmark_limit.SPARSE_INPUT_PHASES[limit_phase]),
                          "others_cores": others_cores})
    return {**job, "rounds": timed}


def run_worker(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    benchmark_worker.start_worker(spec["threads"])
    results = [time_rounds(job, registry.Workload(**job["workload"]), spec["threads"],
                           spec["steps"], spec["warmup"], spec["rounds"])
               for job in spec["jobs"]]
    with open(spec["results"], "w") as f:
        json.dump(results, f)
    return 0


@dataclasses.dataclass(frozen=True)
class Row:
    """One job's rounds, summarised by medians over the rounds."""

    job: dict[str, Any]

    def median(self, key: str) -> float | None:
        """The median over the rounds (None: not timed for this row)."""
        values = [r[key] for r in self.job["rounds"]]
        return None if None in values else statistics.median(values)

    def share(self, key: str, limit: str = "limit") -> str:
        """The limit's time over ours (`key`: "step" or "difference"; `limit`: "limit" or
        "sparse_limit"), median of the rounds; "-" if that limit was not timed or a round's
        difference was not positive (the step no slower than the floor)."""
        rounds = self.job["rounds"]
        if any(r[key] <= 0 or r[limit] is None for r in rounds):
            return "-"
        return f"{100 * statistics.median(r[limit] / r[key] for r in rounds):.0f}%"

    def cells(self) -> list[str]:
        job = self.job
        others = [r["others_cores"] for r in job["rounds"] if r["others_cores"] is not None]
        others_cell = "-" if not others else (
            f"{statistics.mean(others):.2f}"
            + ("*" if statistics.mean(others) >= machine.CONTENDED_CORES else ""))
        ms = ["-" if self.median(k) is None else f"{1e3 * self.median(k):.2f}"
              for k in ("step", "floor", "difference", "limit", "sparse_limit")]
        return [job["phase"], job["kind"], job["distribution"], str(job["threads"]), *ms,
                self.share("step"), self.share("difference"),
                self.share("difference", "sparse_limit"), others_cell]


HEADER = ["phase", "input", "ids", "thr", "step ms", "floor ms", "step - floor ms", "limit ms",
          "sparse-input limit ms", "step of limit", "step - floor of limit",
          "step - floor of sparse-input limit", "others"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(step_variants.INPUT_KINDS),
                        help="comma-separated input kinds: " + ", ".join(step_variants.INPUT_KINDS))
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="comma-separated: " + ", ".join(PHASES))
    parser.add_argument("--distribution", default=",".join(benchmark.DISTRIBUTIONS))
    parser.add_argument("--threads", default=benchmark.THREADS)
    parser.add_argument("--steps", type=int, default=20, help="pairs of calls per round")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds, each followed by a timing of the limit")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls of each first")
    parser.add_argument("--quick", action="store_true",
                        help="tools/benchmark.py's --quick workload, one process per thread "
                             "count")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag, allowed in (("kinds", tuple(step_variants.INPUT_KINDS)), ("phases", PHASES),
                          ("distribution", benchmark.DISTRIBUTIONS)):
        values = getattr(args, flag).split(",")
        unknown = [v for v in values if v not in allowed]
        if unknown:
            parser.error(f"--{flag}: unknown {', '.join(unknown)}; choose from "
                         f"{', '.join(allowed)}")
        setattr(args, flag, values)
    if min(args.steps, args.rounds, args.warmup) < 1:
        parser.error("--steps, --rounds and --warmup must be at least 1 (the first call traces)")
    return args


def plan_jobs(args: argparse.Namespace, scratch: str) -> list[dict[str, Any]]:
    """Writes each (ids per sample, distribution)'s ids, times its native limit once to find
    each phase's fastest prefetch distance, and returns one job per row."""
    # The benchmark's workload (reference or --quick), its thread-count checks and limit run.
    defaults = benchmark.parse_args([*(["--quick"] if args.quick else []),
                                     "--threads", args.threads, "--warmup", str(args.warmup),
                                     "--steps", str(args.steps)])
    args.threads = defaults.threads
    jobs, limits = [], {}
    for kind in args.kinds:
        workload = benchmark.workload_of(defaults)
        if kind == "dense":
            workload = dataclasses.replace(workload, ids_per_sample=1)
        for distribution in args.distribution:
            path = os.path.join(scratch, f"{distribution}-{workload.ids_per_sample}.npy")
            if path not in limits:
                np.save(path, benchmark.make_ids(workload, distribution, defaults.batches,
                                                 defaults.zipf_alpha))
                print(f"[limit] native limit on the {distribution} ids, "
                      f"{workload.ids_per_sample} per sample", file=sys.stderr, flush=True)
                limits[path] = benchmark.run_limit(defaults, workload, path)
            for phase in args.phases:
                variant = VARIANTS[step_variant(phase, kind)]
                limit_phase = benchmark_limit.LIMIT_PHASES[phase]
                for threads in args.threads:
                    best = limits[path].run.limits[threads]
                    jobs.append({"phase": phase, "kind": kind, "distribution": distribution,
                                 "threads": threads, "ids": path,
                                 "workload": dataclasses.asdict(workload),
                                 "prefetch": benchmark.limit_prefetch(
                                     limits[path], variant, threads)[limit_phase],
                                 "sparse_prefetch": best.phase(
                                     benchmark_limit.SPARSE_INPUT_PHASES[limit_phase]
                                 ).best_prefetch})
    return jobs


def run_jobs(args: argparse.Namespace, jobs: list[dict[str, Any]], scratch: str
             ) -> list[dict[str, Any]]:
    """Each job in a worker process of its own (--quick: one per thread count)."""
    groups = ([[j for j in jobs if j["threads"] == n] for n in args.threads] if args.quick
              else [[job] for job in jobs])
    results = []
    for n, group in enumerate(g for g in groups if g):
        spec_path = os.path.join(scratch, f"worker{n}.json")
        results_path = os.path.join(scratch, f"results{n}.json")
        with open(spec_path, "w") as f:
            json.dump({"jobs": group, "threads": group[0]["threads"], "steps": args.steps,
                       "warmup": args.warmup, "rounds": args.rounds, "results": results_path},
                      f)
        print(f"[{n + 1}] " + ", ".join(f"{j['phase']}/{j['kind']}/{j['distribution']}/"
                                        f"{j['threads']}" for j in group),
              file=sys.stderr, flush=True)
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        worker = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                                 spec_path], env=env, capture_output=True, text=True)
        if worker.returncode != 0:
            raise SystemExit(f"worker {n + 1} failed:\n{worker.stderr[-3000:]}")
        with open(results_path) as f:
            results += json.load(f)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(args.worker)
    now = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="tfe_step_floor_") as scratch:
        jobs = plan_jobs(args, scratch)
        print(f"step_floor: {args.rounds} rounds of {args.steps} pairs of calls (step, floor) "
              f"after {args.warmup} warm-up calls each, the limit timed after each round; "
              f"{now:%Y-%m-%d %H:%M} UTC")
        print(*machine.machine_info(args.threads, 0), sep="\n")
        workload = registry.Workload(**jobs[0]["workload"])
        print(f"workload: {workload.tables} tables x {workload.vocab:,} x {workload.dim}, batch "
              f"{workload.batch}, {workload.ids_per_sample} ids per sample per table (dense "
              f"input: 1)", flush=True)
        rows = [Row(job).cells() for job in run_jobs(args, jobs, scratch)]
    print("\n".join(benchmark_report.table(HEADER, rows, left=4)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
