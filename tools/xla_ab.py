#!/usr/bin/env python3
"""A compiled step against its uncompiled twin in one process: time ratio and identical results.

    python tools/xla_ab.py                    # the XLA speed table's five steps, zipf and uniform
    python tools/xla_ab.py --variants sharded-train --distribution zipf --threads 2 --steps 60
    python tools/xla_ab.py --quick --steps 3  # a smoke run on the benchmark's --quick workload

For each benchmark variant V given (tools/benchmark_variants.py) and its compiled twin V-xla
(the same step under `tf.function(jit_compile=True)`, or Keras' `jit_compile=True`), one process
per distribution and thread count, pinned to that many CPUs with as many intra- and inter-op
threads, builds both on the benchmark's reference workload and ids (tables filled alike), runs
`--warmup` steps of each, then `--steps` pairs of steps: batch i through one and then the other,
the order swapped every pair. Each row prints the two median step times and the median of the
pairs' time ratios (compiled over uncompiled): both steps see the same minutes of a machine whose
memory speed drifts, which separate benchmark workers do not (tools/benchmark.py pairs each row
with the native limit instead). Then it compares the two results' checksums (`Setup.checksum`:
the float64 sum of squares of batch 0's activations, or of the rows batch 0 touches after the
same training steps): the compiled step runs the same kernels (docs/xla.md), so they must be
equal, not merely close (tests/sharded/test_xla.py compares the tables themselves bit for bit).

Each ratio is printed beside its target (1.10 for a forward step, 1.15 for a training step);
the exit status is 1 if any row's checksums differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark  # pylint: disable=wrong-import-position
import benchmark_machine as machine  # pylint: disable=wrong-import-position
import benchmark_registry as registry  # pylint: disable=wrong-import-position
from benchmark_variants import VARIANTS  # pylint: disable=wrong-import-position
import benchmark_worker  # pylint: disable=wrong-import-position

# The steps of docs/xla.md's speed table, each with a compiled twin named `{name}-xla`.
DEFAULT_VARIANTS = ("sharded-forward", "keras-layer-forward", "v0-forward", "sharded-train",
                    "keras-layer-fit")
# The largest compiled / uncompiled time the XLA issue allows, by phase.
TARGETS = {"forward": 1.10, "train": 1.15}


def run_pair(variant: str, ids_path: str, workload: registry.Workload, threads: int, steps: int,
             warmup: int) -> dict[str, Any]:
    """In a worker process: times `variant` and its twin alternately, compares their results."""
    benchmark_worker.start_worker(threads)
    ctx = registry.Context(workload, np.load(ids_path))
    names = (variant, f"{variant}-xla")
    setups = [VARIANTS[name].setup(ctx) for name in names]
    for setup in setups:
        for i in range(warmup):
            setup.step(i)
    seconds: list[list[float]] = [[], []]
    for i in range(warmup, warmup + steps):
        for k in ((0, 1) if i % 2 else (1, 0)):
            start = time.perf_counter()
            setups[k].step(i)
            seconds[k].append(time.perf_counter() - start)
    checksums = [setup.checksum() for setup in setups]
    ratios = np.array(seconds[1]) / np.array(seconds[0])
    return {"ms": [float(np.median(s)) * 1e3 for s in seconds],
            "ratio": float(np.median(ratios)),
            "ratio_iqr": [float(q) for q in np.percentile(ratios, [25, 75])],
            "checksums": checksums}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="uncompiled variants, each with a registered `-xla` twin")
    parser.add_argument("--distribution", default=",".join(benchmark.DISTRIBUTIONS))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--steps", type=int, default=40, help="timed pairs of steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="tools/benchmark.py's --quick workload instead of the reference one")
    parser.add_argument("--worker", nargs=4, metavar=("VARIANT", "IDS", "THREADS", "RESULT"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # The benchmark's reference (or --quick) workload, and its check of the thread counts.
    defaults = benchmark.parse_args([*(["--quick"] if args.quick else []),
                                     "--threads", args.threads])
    workload = benchmark.workload_of(defaults)
    if args.worker:
        variant, ids_path, threads, result_path = args.worker
        result = run_pair(variant, ids_path, workload, int(threads), args.steps, args.warmup)
        with open(result_path, "w") as f:
            json.dump(result, f)
        return 0

    variants = args.variants.split(",")
    for name in variants:
        if name not in VARIANTS or f"{name}-xla" not in VARIANTS:
            raise SystemExit(f"{name}: not a benchmark variant with a compiled twin {name}-xla")
    distributions = args.distribution.split(",")
    if any(d not in benchmark.DISTRIBUTIONS for d in distributions):
        raise SystemExit(f"--distribution takes {', '.join(benchmark.DISTRIBUTIONS)}")
    print(f"xla_ab: {args.steps} pairs of steps after {args.warmup} warm-up steps each, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(*machine.machine_info(defaults.threads, 0), sep="\n")
    print("| step | ids | thr | uncompiled ms | compiled ms | compiled / uncompiled (IQR) "
          "| target | same results |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    failed = False
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="tfe_xla_ab_") as scratch:
        for distribution in distributions:
            ids_path = os.path.join(scratch, f"{distribution}.npy")
            np.save(ids_path, benchmark.make_ids(workload, distribution, defaults.batches,
                                                 defaults.zipf_alpha))
            for name in variants:
                for threads in defaults.threads:
                    result_path = os.path.join(scratch, "result.json")
                    subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps),
                         "--warmup", str(args.warmup), *(["--quick"] if args.quick else []),
                         "--worker", name, ids_path, str(threads), result_path],
                        env=env, check=True)
                    with open(result_path) as f:
                        r = json.load(f)
                    target = TARGETS[VARIANTS[name].phase]
                    same = r["checksums"][0] == r["checksums"][1]
                    failed |= not same
                    low, high = r["ratio_iqr"]
                    print(f"| `{name}` | {distribution} | {threads} | {r['ms'][0]:.1f} | "
                          f"{r['ms'][1]:.1f} | {r['ratio']:.2f}x ({low:.2f}-{high:.2f}) | "
                          f"{target:.2f}x | {'yes' if same else 'NO: ' + str(r['checksums'])} |",
                          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
