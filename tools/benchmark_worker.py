"""One worker process of tools/benchmark.py (`benchmark.py --worker SPEC`): pinned to its CPUs
with TensorFlow's thread pools as large (`start_worker`), it builds each job's variant and times
its steps (`measure`), each round paired with a timing of the native limit (`PairedLimit`), and
writes the results where the orchestrator reads them (`run_worker`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
import traceback
from typing import Any

import numpy as np

import benchmark_limit
import benchmark_machine as machine
import benchmark_registry as registry
from benchmark_variants import VARIANTS

# The phases whose steps --steps-per-call loops; serving lookups are timed per call, as a server
# calls them, and parts per call, as the step they are part of.
LOOPED_PHASES = ("forward", "train")


@dataclasses.dataclass(frozen=True)
class PairedLimit:
    """The native limit a worker times after each of its rounds: the program kept running on the
    row's ids and threads, and the phases compared with the row at their prefetch distances."""

    rounds: benchmark_limit.Rounds
    threads: int
    prefetch: dict[str, int]

    def seconds(self) -> dict[str, float]:
        """{limit phase: its median step time}, timed now."""
        run = self.rounds.next_run().limits[self.threads]
        return {p: run.phase(p).seconds_by_prefetch[d] for p, d in self.prefetch.items()}


def measure(variant: registry.Variant, ctx: registry.Context, steps: int, warmup: int, rounds: int,
            limit: PairedLimit | None) -> dict[str, Any]:
    """Builds the variant, runs its warm-up steps, then `rounds` rounds of timed steps, each
    followed by a timing of the native limit (`limit`, if given), and reports times and memory.

    Memory: the process peak (`ru_maxrss`) over everything, and what the steps alone add to the
    RSS the variant had once built (its temporaries, tracing included).
    """
    setup = variant.setup(ctx)
    setup_rss, setup_peak = machine.current_rss(), machine.max_rss()
    steps_peak_measured = machine.reset_peak_rss()
    for i in range(warmup):
        setup.step(i)

    times, cpu_times, paired, window_cores, wall = [], [], [], [], 0.0
    for r in range(rounds):
        # Only while our steps run: the limit's program, a live child, would count as another
        # process.
        others = machine.OtherProcessesCpu()
        round_start = time.perf_counter()
        round_times = []
        for i in range(warmup + r * steps, warmup + (r + 1) * steps):
            start, cpu_start = time.perf_counter(), time.process_time()
            setup.step(i)
            round_times.append((time.perf_counter() - start) / setup.steps_per_call)
            cpu_times.append((time.process_time() - cpu_start) / setup.steps_per_call)
        wall += time.perf_counter() - round_start
        window_cores.append(others.cores())
        times += round_times
        if limit:
            paired.append({"step_seconds": statistics.median(round_times),
                           "limit_seconds": limit.seconds()})
    others_cores, steal_cores = (
        (None, None) if any(c is None for c, _ in window_cores)
        else (statistics.mean(c for c, _ in window_cores),
              statistics.mean(s for _, s in window_cores)))
    steps_peak = machine.max_rss()

    return {
        "step_seconds": times,
        # CPU time of all this process's threads: less sensitive than wall time to other
        # processes taking cores, though not to their use of caches and memory bandwidth.
        "step_cpu_seconds": cpu_times,
        "model_bytes": setup.model_bytes,
        "setup_rss": setup_rss,
        "setup_peak_rss": setup_peak,
        "peak_rss": max(setup_peak, steps_peak),
        "steps_added_rss": (steps_peak - setup_rss
                            if steps_peak_measured and setup_rss is not None else None),
        # Cores busy outside this process while it was timed (other users, the kernel).
        "others_cores": others_cores,
        "steal_cores": steal_cores,
        "own_cores": sum(cpu_times) / wall,
        # Per round: our median step and the limit timed right after it.
        "paired_rounds": paired,
        "checksum": setup.checksum() if setup.checksum else None,
    }


def start_worker(threads: int, inter_op_threads: int | None = None) -> None:
    """Pins this (worker) process to `threads` CPUs and imports TensorFlow with that many
    intra-op threads and `inter_op_threads` (None: as many) inter-op ones."""
    # Pinned, so a row's thread count is the cores it can use: TensorFlow's own threads (the
    # executor, the Python thread) would otherwise spread a 1-thread row over more cores.
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    # Thread pools are fixed when TensorFlow's context starts, so before any op runs.
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads or threads)
    registry.import_tensorflow()


def run_worker(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    threads = spec["threads"]
    start_worker(threads, spec["inter_op_threads"])
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf_embedding import _loader  # pylint: disable=import-outside-toplevel

    workload = registry.Workload(**spec["workload"])
    # Python, TensorFlow, Keras and tf_embedding loaded, nothing built yet.
    import_rss = machine.current_rss()
    results = []
    failed = False
    for job in spec["jobs"]:
        result = dict(job)
        try:
            variant = VARIANTS[job["variant"]]
            steps_per_call = spec["steps_per_call"] if variant.phase in LOOPED_PHASES else 1
            ctx = registry.Context(workload, np.load(job["inputs"]), steps_per_call)
            with contextlib.ExitStack() as stack:
                limit = None
                if "limit_prefetch" in job:
                    prefetch = job["limit_prefetch"]
                    limit = PairedLimit(stack.enter_context(benchmark_limit.Rounds(
                        job["inputs"], workload.vocab, workload.dim, [threads], spec["steps"],
                        spec["warmup"], registry.LEARNING_RATE, registry.INITIAL_ACCUMULATOR,
                        sorted(set(prefetch.values())))), threads, prefetch)
                result.update(measure(variant, ctx, spec["steps"], spec["warmup"],
                                      spec["rounds"], limit))
        except Exception:  # pylint: disable=broad-except
            # Reported in the table; the other jobs of a shared process still run.
            result["error"] = traceback.format_exc()
            failed = True
        result.update(tf_version=tf.__version__, ops_library=_loader.library_path(),
                      import_rss=import_rss)
        results.append(result)
        with open(spec["results"], "w") as f:
            json.dump(results, f)
    return 1 if failed else 0
