#!/usr/bin/env python3
"""Throughput and peak memory of tf_embedding's fused ops against stock TensorFlow, in one run.

    python tools/benchmark.py                      # the reference workload, zipf and uniform ids
    python tools/benchmark.py --quick              # a smoke run of every variant (seconds)
    python tools/benchmark.py --breakdown          # adds the per-phase parts of ours-train
    python tools/benchmark.py --repeat 3           # fastest of 3 runs: steadier on a busy machine
    python tools/benchmark.py --threads 2          # only 2 threads (default: 1 and 2)
    python tools/benchmark.py --list-variants

Every (variant, distribution, thread count) runs in a fresh worker process (this script with
--worker), so its peak RSS (`ru_maxrss`) is its own and no variant's memory or allocator state
distorts another.
The orchestrator writes the batches once (numpy, fixed seed) and every worker turns the same ids
into the same SparseTensors. Each worker builds its variables, runs `--warmup` untimed steps
(tracing included), then `--rounds` rounds of `--steps` steps timed one by one, and reports the
median; input generation is not timed, our CSR conversion is (it is part of the forward pass). With
`--steps-per-call N` a forward or train "step" of those counts is one tf.function call running N
steps in a loop over a tf.data iterator of the batches (the loop of TPU embedding code), and
times are per step.

A worker with N threads is pinned to N CPUs and runs TensorFlow's intra-op and inter-op pools
with N threads; rows with more than one thread give their parallel efficiency against the
1-thread row. Samples/s are compared with the stock-TF baseline of the same phase, distribution
and thread count measured in the same run, and with the native limit of the same ids and thread
count (benchmark_limit.py: plain C++ doing the phase's work on this machine), timed once for the
limit table and, kept running beside each worker on its CPUs, again right after each of its
rounds: a row's share of the limit is the median of those paired ratios. While a worker times
its steps it also measures the CPU that other processes used (from /proc/stat), so a row
measured on a busy machine is marked as such. See docs/performance.md for results.

The parts: benchmark_variants.py (what is measured), benchmark_worker.py (a worker process),
benchmark_report.py (the tables), benchmark_machine.py (the machine, its other processes' CPU,
memory) and benchmark_limit.py (the native limit); this script runs them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Sequence

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The checkout's tf_embedding, also when another copy is installed.
sys.path.insert(0, REPO_ROOT)

import benchmark_limit  # pylint: disable=wrong-import-position
import benchmark_machine as machine  # pylint: disable=wrong-import-position
import benchmark_report  # pylint: disable=wrong-import-position
import benchmark_registry as registry  # pylint: disable=wrong-import-position
from benchmark_variants import VARIANTS  # pylint: disable=wrong-import-position
import benchmark_worker  # pylint: disable=wrong-import-position

FULL = dict(tables=8, vocab=1_000_000, dim=64, batch=4096, ids_per_sample=20, steps=10,
            warmup=3, rounds=3, batches=4, distribution="zipf,uniform")
QUICK = dict(tables=2, vocab=20_000, dim=16, batch=256, ids_per_sample=5, steps=3, warmup=1,
             rounds=2, batches=2, distribution="zipf,uniform")
DISTRIBUTIONS = ("zipf", "uniform")
THREADS = "1,2"


# ---------------------------------------------------------------------------------------------
# Inputs


def make_ids(workload: registry.Workload, distribution: str, batches: int,
             zipf_alpha: float) -> np.ndarray:
    """ids[b, t, sample, k], int64, reproducible from the seed.

    Zipf: rank r in [0, vocab) has probability proportional to 1 / (r + 1)^alpha, and ranks map
    to ids through a fixed random permutation per table, so hot rows are spread over the table as
    hashed ids are (not packed at its start, which would flatter every cache).
    """
    w = workload
    shape = (batches, w.batch, w.ids_per_sample)
    ids = np.empty((batches, w.tables, w.batch, w.ids_per_sample), np.int64)
    if distribution == "zipf":
        weights = np.arange(1, w.vocab + 1, dtype=np.float64) ** -zipf_alpha
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
    for t in range(w.tables):
        rng = np.random.default_rng([w.seed, DISTRIBUTIONS.index(distribution), t])
        if distribution == "zipf":
            ranks = np.minimum(np.searchsorted(cdf, rng.random(shape), side="right"),
                               w.vocab - 1)
            ids[:, t] = rng.permutation(w.vocab)[ranks]
        else:
            ids[:, t] = rng.integers(0, w.vocab, shape)
    return ids


def unique_fraction(ids: np.ndarray) -> float:
    """Mean share of distinct ids among one table's lookups in one batch."""
    return float(np.mean([np.unique(ids[b, t]).size / ids[b, t].size
                          for b in range(ids.shape[0]) for t in range(ids.shape[1])]))


# ---------------------------------------------------------------------------------------------
# Orchestrator


def workload_of(args: argparse.Namespace) -> registry.Workload:
    """The workload `parse_args` gave (the reference one, or --quick's, unless flags change it)."""
    return registry.Workload(args.tables, args.vocab, args.dim, args.batch, args.ids_per_sample,
                       args.seed)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.shared_process = args.shared_process or args.quick
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1 (the first step traces)")
    if args.steps_per_call < 1:
        parser.error("--steps-per-call must be at least 1")
    if args.repeat < 1 or args.rounds < 1:
        parser.error("--repeat and --rounds must be at least 1")
    try:
        args.threads = [int(n) for n in args.threads.split(",")]
    except ValueError:
        parser.error("--threads takes comma-separated numbers, e.g. 1,2")
    usable = len(os.sched_getaffinity(0))
    if any(not 1 <= n <= usable for n in args.threads):
        parser.error(f"--threads: each count must be from 1 to the {usable} usable CPUs")
    return args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Full defaults: {FULL}\n--quick defaults: {QUICK}")
    parser.add_argument("--tables", type=int)
    parser.add_argument("--vocab", type=int)
    parser.add_argument("--dim", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--ids-per-sample", type=int)
    parser.add_argument("--distribution", help="comma-separated: zipf, uniform")
    parser.add_argument("--zipf-alpha", type=float, default=1.05)
    parser.add_argument("--steps", type=int, help="timed steps (median reported)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (>= 1: tracing)")
    parser.add_argument("--steps-per-call", type=int, default=1,
                        help="forward and train steps per tf.function call, looping over a "
                             "tf.data iterator of the batches as TPU embedding loops do "
                             "(--steps and --warmup count calls; times are per step). Not for "
                             "the stock rows: inside the loop safe_embedding_lookup_sparse "
                             "gathers from a copy of the whole table (docs/archive/"
                             "benchmark_runs.md, 'Results on the AVX-512 machine, steps looped "
                             "in one call (--steps-per-call 8)')")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every job this many times, round robin; report the fastest")
    parser.add_argument("--rounds", type=int,
                        help="timed rounds per run, each of --steps steps and followed by a "
                             "timing of the native limit the row is a share of")
    parser.add_argument("--batches", type=int,
                        help="distinct precomputed batches, cycled through")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", help="comma-separated (default: every default variant)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the parts of ours-train (conversion, lookup, apply)")
    parser.add_argument("--quick", action="store_true",
                        help="small workload, all jobs in one worker process (smoke test)")
    parser.add_argument("--shared-process", action="store_true",
                        help="run every job in one worker (faster; peak RSS is then cumulative)")
    parser.add_argument("--threads", default=THREADS,
                        help="comma-separated thread counts; every row runs with each (its "
                             "worker pinned to that many CPUs, TF intra-op threads as many)")
    parser.add_argument("--inter-op-threads", type=int, default=0,
                        help="TF inter-op threads (0: the row's thread count)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds allowed per worker process")
    parser.add_argument("--json", help="also write every measurement to this file")
    parser.add_argument("--list-variants", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser


def select_variants(args: argparse.Namespace) -> list[registry.Variant]:
    if args.variants:
        names = args.variants.split(",")
        unknown = [n for n in names if n not in VARIANTS]
        if unknown:
            raise SystemExit(f"unknown variants {unknown}; --list-variants shows them")
    else:
        names = [n for n, v in VARIANTS.items() if v.default]
    if args.breakdown:
        names += [n for n, v in VARIANTS.items() if v.part_of and n not in names]
    # Registry order: baselines sit next to the variants they are compared with.
    return [v for n, v in VARIANTS.items() if n in names]


def run_workers(args: argparse.Namespace, workload: registry.Workload, jobs: list[dict[str, Any]],
                scratch: str) -> list[dict[str, Any]]:
    if args.shared_process:
        # A process has one Keras and one thread count: variants needing tf_keras, and each
        # thread count, share a process of their own.
        groups = [group for threads in args.threads for legacy in (False, True)
                  if (group := [j for j in jobs if j["threads"] == threads
                                and VARIANTS[j["variant"]].legacy_keras == legacy])]
    else:
        groups = [[job] for job in jobs]
    results = []
    for n, group in enumerate(groups):
        spec_path = os.path.join(scratch, f"worker{n}.json")
        results_path = os.path.join(scratch, f"results{n}.json")
        with open(spec_path, "w") as f:
            json.dump({"workload": dataclasses.asdict(workload), "jobs": group,
                       "steps": args.steps, "warmup": args.warmup,
                       "steps_per_call": args.steps_per_call, "rounds": args.rounds,
                       "results": results_path,
                       "threads": group[0]["threads"],
                       "inter_op_threads": args.inter_op_threads}, f)
        label = ", ".join(f"{j['variant']}/{j['distribution']}/{j['threads']}" for j in group)
        print(f"[{n + 1}/{len(groups)}] {label}", file=sys.stderr, flush=True)
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if VARIANTS[group[0]["variant"]].legacy_keras:
            env["TF_USE_LEGACY_KERAS"] = "1"
        others = machine.OtherProcessesCpu()
        try:
            process = subprocess.run([sys.executable, os.path.abspath(__file__),
                                      "--worker", spec_path], env=env, capture_output=True,
                                     text=True, timeout=args.timeout)
            log = process.stdout + process.stderr
        except subprocess.TimeoutExpired as e:
            log = f"timed out after {args.timeout:g} s\n{e.stderr or ''}"
        done = []
        if os.path.exists(results_path):
            with open(results_path) as f:
                done = json.load(f)
        for job in group[len(done):]:
            done.append({**job, "error": "worker died:\n" + log[-3000:]})
        # Over the worker's whole life: the fallback for timed windows too short to measure.
        worker_others, worker_steal = others.cores()
        for result in done:
            result.update(worker_others_cores=worker_others, worker_steal_cores=worker_steal)
        for result in done:
            if "error" in result:
                print(f"  {result['variant']}/{result['distribution']}/{result['threads']} "
                      f"failed:\n"
                      f"{result['error']}", file=sys.stderr, flush=True)
        results += done
    # In the jobs' order, whichever process ran them.
    order = {_job_key(job): n for n, job in enumerate(jobs)}
    return sorted(results, key=lambda r: order[_job_key(r)])


def limit_prefetch(limit: benchmark_report.NativeLimit, variant: registry.Variant,
                   threads: int) -> dict[str, int]:
    """{limit phase: prefetch distance} of the phases a row of `variant` is compared with, each
    at its fastest distance in the run's first limit."""
    return {p: limit.run.limits[threads].phase(p).best_prefetch
            for p in benchmark_limit.compared_phases(variant.phase)}


def _job_key(job: dict[str, Any]) -> tuple[str, str, int]:
    return job["variant"], job["distribution"], job["threads"]


def run_limit(args: argparse.Namespace, workload: registry.Workload, ids_path: str
              ) -> benchmark_report.NativeLimit:
    """The native limit on the ids in `ids_path`, at every thread count of the run."""
    others = machine.OtherProcessesCpu()
    run = benchmark_limit.run(ids_path, workload.vocab, workload.dim, args.threads, args.steps,
                              args.warmup, registry.LEARNING_RATE, registry.INITIAL_ACCUMULATOR,
                              args.timeout)
    return benchmark_report.NativeLimit(run, *others.cores())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return benchmark_worker.run_worker(args.worker)
    if args.list_variants:
        for v in VARIANTS.values():
            tags = [t for t, on in (("baseline", v.baseline), ("not default", not v.default))
                    if on]
            print(f"{v.name:18} {v.phase:8} {v.description}"
                  + (f" [{', '.join(tags)}]" if tags else ""))
        return 0

    workload = workload_of(args)
    distributions = args.distribution.split(",")
    if any(d not in DISTRIBUTIONS for d in distributions):
        raise SystemExit(f"--distribution takes {', '.join(DISTRIBUTIONS)}")
    variants = select_variants(args)
    command = " ".join(["python tools/benchmark.py", *map(shlex.quote, sys.argv[1:])])
    run_others = machine.OtherProcessesCpu()
    header = _header(args, workload, command)
    print("\n".join(header), flush=True)
    results, limits = _measure(args, workload, distributions, variants)

    load_end = os.getloadavg()
    others_cores, steal_cores = run_others.cores()
    first = next((r for r in results if "tf_version" in r), {})
    runs: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in results:
        runs.setdefault((r["distribution"], r["variant"], r["threads"]), []).append(r)
    rows = [benchmark_report.Row(distribution, VARIANTS[name], threads, group)
            for (distribution, name, threads), group in runs.items()]
    lines = benchmark_report.report(rows, limits, workload)
    print(f"TensorFlow {first.get('tf_version', '?')}, op library "
          f"{first.get('ops_library', '?')}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in load_end)}; other processes "
          f"used {others_cores:.2f} cores on average during the run (steal {steal_cores:.2f})\n")
    print("\n".join(lines), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, "header": header, "load_end": load_end,
                       "run_others_cores": others_cores, "run_steal_cores": steal_cores,
                       "limits": {d: dataclasses.asdict(limit) for d, limit in limits.items()},
                       "results": results}, f, indent=1)
    return 1 if any("error" in r for r in results) else 0


def _header(args: argparse.Namespace, workload: registry.Workload, command: str) -> list[str]:
    """The run's header: when, the command, the machine, the workload and how it is timed."""
    load_start = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc)
    return [
        f"tf_embedding benchmark, {now:%Y-%m-%d %H:%M} UTC",
        f"command:  {command}",
        *machine.machine_info(args.threads, args.inter_op_threads),
        f"workload: {workload.tables} tables x {workload.vocab:,} x {workload.dim} float32 "
        f"({benchmark_report.gib(workload.table_bytes)} GiB; Adagrad slots as much again), "
        f"batch {workload.batch}, {workload.ids_per_sample} ids per sample per table, sum "
        f"combiner, Adagrad lr {registry.LEARNING_RATE}",
        f"timing:   {args.warmup} warm-up + {args.rounds} x {args.steps} timed steps (median), "
        "the native limit timed after each round of steps"
        + (f"; forward and train: each of those a tf.function call of {args.steps_per_call} "
           "steps, times per step" if args.steps_per_call > 1 else "")
        + (f", fastest of {args.repeat} runs" if args.repeat > 1 else "")
        + f", {args.batches} distinct batches cycled, seed {args.seed}, "
        + ("all jobs in one process (peak RSS cumulative)" if args.shared_process
           else "one process per variant, distribution and thread count"),
        f"load average at start: {' '.join(f'{x:.2f}' for x in load_start)}",
    ]


def _measure(args: argparse.Namespace, workload: registry.Workload, distributions: list[str],
             variants: list[registry.Variant]
             ) -> tuple[list[dict[str, Any]], dict[str, benchmark_report.NativeLimit]]:
    """Every job's results (each run of it) and the native limit of each distribution: the ids
    written once per distribution, the limit timed on them, then the workers."""
    with tempfile.TemporaryDirectory(prefix="tfe_benchmark_") as scratch:
        jobs, limits = [], {}
        for distribution in distributions:
            ids = make_ids(workload, distribution, args.batches, args.zipf_alpha)
            path = os.path.join(scratch, f"{distribution}.npy")
            np.save(path, ids)
            label = (f"zipf (alpha {args.zipf_alpha:g}, ids permuted per table)"
                     if distribution == "zipf" else "uniform")
            print(f"ids:      {label}: {100 * unique_fraction(ids):.1f}% distinct per table "
                  f"per batch", flush=True)
            print(f"[limit] native limit on the {distribution} ids", file=sys.stderr, flush=True)
            limits[distribution] = run_limit(args, workload, path)
            jobs += [{"variant": v.name, "distribution": distribution, "threads": threads,
                      "inputs": path,
                      **({} if v.phase == "part" else
                         {"limit_prefetch": limit_prefetch(limits[distribution], v, threads)})}
                     for v in variants for threads in args.threads]
        # Round robin, so that a busy spell of the machine hits one run of each job, not all.
        return run_workers(args, workload, jobs * args.repeat, scratch), limits


if __name__ == "__main__":
    sys.exit(main())
