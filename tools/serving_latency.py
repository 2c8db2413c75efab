#!/usr/bin/env python3
"""Serving latency: one call of each serving lookup at small batches, p50 and p99, in one process.

    python tools/serving_latency.py                        # batch 1, 64, 512; zipf; 1 thread
    python tools/serving_latency.py --threads 2 --distribution uniform --calls 500
    python tools/serving_latency.py --quick --calls 20     # a smoke run (seconds)

The rows are tools/benchmark.py's serving variants on its reference tables (8 x 1,000,000 x 64,
one SparseTensor feature of `--ids-per-sample` ids per sample per table): `stock-serving` (stock
TF's `TPUEmbeddingForServing.embedding_lookup` in a tf.function), and exported to a SavedModel by
another process, loaded here and called as a server calls it: `stock-serving-export` (stock
TF's lookup), `serving-export` and `serving-export-xla` (ours). The process is pinned to
`--threads` CPUs with as many TensorFlow threads, as the benchmark pins its workers.

Per batch size, every call times one request: the lookup of one batch (8 batches of fresh ids,
cycled), returned to Python as numpy, so a call is what a client of the loaded function waits
for. The rows' calls alternate (a round-robin over the rows whose order turns every call), so a
change of the machine's speed falls on all of them alike. Before timing, every row's outputs
are checked against stock's (relative 1e-5) on every batch and warmed up. *vs stock export*
divides `stock-serving-export`'s p50 by the row's: loading costs a call of a restored function
more than a tf.function's, so a server's baseline is stock's export.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark  # pylint: disable=wrong-import-position
import benchmark_machine as machine  # pylint: disable=wrong-import-position
import benchmark_report  # pylint: disable=wrong-import-position
import benchmark_registry as registry  # pylint: disable=wrong-import-position
import benchmark_serving_variants as serving_variants  # pylint: disable=wrong-import-position
import benchmark_worker  # pylint: disable=wrong-import-position

# Each row: whether its lookup is exported and loaded, and its jit_compile (None: stock TF's).
ROWS = {"stock-serving": (False, None), "stock-serving-export": (True, None),
        "serving-export": (True, False), "serving-export-xla": (True, True)}
# The row the others are compared with: what a server running stock TF's export runs.
BASELINE = "stock-serving-export"
HEADER = ["batch", "variant", "p50 ms", "p99 ms", "mean ms", "vs stock export (p50)"]
# Batches of fresh ids per batch size, cycled.
BATCHES = 8


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="1,64,512",
                        help="comma-separated batch sizes (samples per request)")
    parser.add_argument("--threads", type=int, default=1, help="CPUs and TensorFlow threads")
    parser.add_argument("--distribution", default="zipf", choices=benchmark.DISTRIBUTIONS)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per row and batch")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls of each first")
    parser.add_argument("--ids-per-sample", type=int,
                        help="ids per sample per table (default: the benchmark's)")
    parser.add_argument("--quick", action="store_true",
                        help="tools/benchmark.py's --quick tables (small, for a smoke run)")
    args = parser.parse_args(argv)
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        parser.error(f"--batch-sizes: not comma-separated integers: {args.batch_sizes!r}")
    if min(args.batch_sizes) < 1 or args.calls < 1 or args.warmup < 1 or args.threads < 1:
        parser.error("--batch-sizes, --calls, --warmup and --threads must be at least 1")
    if args.threads > len(os.sched_getaffinity(0)):
        parser.error(f"--threads {args.threads}: this process may use "
                     f"{len(os.sched_getaffinity(0))} CPUs")
    return args


def make_lookups(workload: registry.Workload) -> dict[str, Callable[[list[Any]], Any]]:
    """Each row's lookup on `workload`'s tables (filled alike)."""
    return {name: (serving_variants.exported_serving_lookup(workload, jit_compile) if exported
                   else serving_variants.stock_serving_lookup(workload))
            for name, (exported, jit_compile) in ROWS.items()}


def check_outputs(lookups: dict[str, Callable[[list[Any]], Any]], ctx: registry.Context) -> None:
    """Every row's activations equal stock's on every batch (up to the order of additions)."""
    for b in range(ctx.num_batches):
        expected = [a.numpy() for a in lookups["stock-serving"](ctx.batch(b))]
        for name, lookup in lookups.items():
            for actual, wanted in zip(lookup(ctx.batch(b)), expected):
                np.testing.assert_allclose(actual.numpy(), wanted, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{name}, batch {b}")


def time_calls(lookups: dict[str, Callable[[list[Any]], Any]], ctx: registry.Context, calls: int,
               warmup: int) -> dict[str, list[float]]:
    """Seconds of each row's calls, the rows' calls alternating."""
    names = list(lookups)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + calls):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            features = ctx.batch(i)
            start = time.perf_counter()
            for activations in lookups[name](features):
                activations.numpy()
            if i >= warmup:
                seconds[name].append(time.perf_counter() - start)
    return seconds


def summarise(batch: int, seconds: dict[str, list[float]]) -> list[list[str]]:
    stock_p50 = float(np.percentile(seconds[BASELINE], 50))
    rows = []
    for name, values in seconds.items():
        p50, p99 = np.percentile(values, [50, 99])
        rows.append([str(batch), name, f"{1e3 * p50:.3f}", f"{1e3 * p99:.3f}",
                     f"{1e3 * np.mean(values):.3f}", f"{stock_p50 / p50:.2f}x"])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    defaults = benchmark.parse_args(
        [*(["--quick"] if args.quick else []),
         *(["--ids-per-sample", str(args.ids_per_sample)] if args.ids_per_sample else [])])
    workload = benchmark.workload_of(defaults)
    benchmark_worker.start_worker(args.threads)
    now = datetime.datetime.now(datetime.timezone.utc)
    print(f"serving_latency: {args.calls} timed calls per row and batch size after "
          f"{args.warmup} warm-up calls, {args.distribution} ids; {now:%Y-%m-%d %H:%M} UTC")
    print(*machine.machine_info([args.threads], 0), sep="\n")
    print(f"workload: {workload.tables} tables x {workload.vocab:,} x {workload.dim}, "
          f"{workload.ids_per_sample} ids per sample per table", flush=True)
    lookups = make_lookups(workload)
    rows = []
    for batch in args.batch_sizes:
        sized = dataclasses.replace(workload, batch=batch)
        ctx = registry.Context(sized, benchmark.make_ids(sized, args.distribution, BATCHES,
                                                   defaults.zipf_alpha))
        check_outputs(lookups, ctx)
        rows += summarise(batch, time_calls(lookups, ctx, args.calls, args.warmup))
    print("\n".join(benchmark_report.table(HEADER, rows, left=2)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
