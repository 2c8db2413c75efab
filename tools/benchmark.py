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
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from importlib import metadata
from typing import Any, Sequence

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The checkout's tf_embedding, also when another copy is installed.
sys.path.insert(0, REPO_ROOT)

import benchmark_limit  # pylint: disable=wrong-import-position
import benchmark_variants as bv  # pylint: disable=wrong-import-position

GIB = 1 << 30
FULL = dict(tables=8, vocab=1_000_000, dim=64, batch=4096, ids_per_sample=20, steps=10,
            warmup=3, rounds=3, batches=4, distribution="zipf,uniform")
QUICK = dict(tables=2, vocab=20_000, dim=16, batch=256, ids_per_sample=5, steps=3, warmup=1,
             rounds=2, batches=2, distribution="zipf,uniform")
# Peak RSS may exceed tables + slots by at most this much (the performance issue's target; the
# earlier kernels issue allowed 1.5 GiB).
RSS_BUDGET = 1.0 * GIB
# Other processes using this many cores while a variant is timed mark its row as contended.
CONTENDED_CORES = 0.2
MIN_CPU_WINDOW = 0.25
DISTRIBUTIONS = ("zipf", "uniform")
# The phases whose steps --steps-per-call loops; serving lookups are timed per call, as a server
# calls them, and parts per call, as the step they are part of.
LOOPED_PHASES = ("forward", "train")
THREADS = "1,2"


# ---------------------------------------------------------------------------------------------
# Inputs


def make_ids(workload: bv.Workload, distribution: str, batches: int,
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
# Worker: one process, one or more (variant, distribution) jobs


def _max_rss() -> int:
    """Peak RSS of this process in bytes (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def _reset_peak_rss() -> bool:
    """Restarts the peak RSS count (Linux >= 4.0), so the steps get a peak of their own."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _busy_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat. Steal is time
    the hypervisor gave this machine's CPUs to other guests."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


class OtherProcessesCpu:
    """Cores that processes other than this one and its finished children used since creation.

    /proc/stat counts in clock ticks (10 ms): windows under MIN_CPU_WINDOW give None.
    """

    def __init__(self):
        self._start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float, float]:
        busy, steal = _busy_cpu_seconds()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = time.process_time() + children.ru_utime + children.ru_stime
        return busy, steal, own, time.perf_counter()

    def cores(self) -> tuple[float | None, float | None]:
        """(others, steal) in cores."""
        busy, steal, own, wall = (b - a for a, b in zip(self._start, self._sample()))
        if wall < MIN_CPU_WINDOW:
            return None, None
        return min(max(0.0, (busy - own) / wall), os.cpu_count()), steal / wall


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


def measure(variant: bv.Variant, ctx: bv.Context, steps: int, warmup: int, rounds: int,
            limit: PairedLimit | None) -> dict[str, Any]:
    """Builds the variant, runs its warm-up steps, then `rounds` rounds of timed steps, each
    followed by a timing of the native limit (`limit`, if given), and reports times and memory.

    Memory: the process peak (`ru_maxrss`) over everything, and what the steps alone add to the
    RSS the variant had once built (its temporaries, tracing included).
    """
    setup = variant.setup(ctx)
    setup_rss, setup_peak = _current_rss(), _max_rss()
    steps_peak_measured = _reset_peak_rss()
    for i in range(warmup):
        setup.step(i)

    times, cpu_times, paired, window_cores, wall = [], [], [], [], 0.0
    for r in range(rounds):
        # Only while our steps run: the limit's program, a live child, would count as another
        # process.
        others = OtherProcessesCpu()
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
    steps_peak = _max_rss()

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
    bv.import_tensorflow()


def workload_of(args: argparse.Namespace) -> bv.Workload:
    """The workload `parse_args` gave (the reference one, or --quick's, unless flags change it)."""
    return bv.Workload(args.tables, args.vocab, args.dim, args.batch, args.ids_per_sample,
                       args.seed)


def run_worker(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    threads = spec["threads"]
    start_worker(threads, spec["inter_op_threads"])
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf_embedding import _loader  # pylint: disable=import-outside-toplevel

    workload = bv.Workload(**spec["workload"])
    # Python, TensorFlow, Keras and tf_embedding loaded, nothing built yet.
    import_rss = _current_rss()
    results = []
    failed = False
    for job in spec["jobs"]:
        result = dict(job)
        try:
            variant = bv.VARIANTS[job["variant"]]
            steps_per_call = spec["steps_per_call"] if variant.phase in LOOPED_PHASES else 1
            ctx = bv.Context(workload, np.load(job["inputs"]), steps_per_call)
            with contextlib.ExitStack() as stack:
                limit = None
                if "limit_prefetch" in job:
                    prefetch = job["limit_prefetch"]
                    limit = PairedLimit(stack.enter_context(benchmark_limit.Rounds(
                        job["inputs"], workload.vocab, workload.dim, [threads], spec["steps"],
                        spec["warmup"], bv.LEARNING_RATE, bv.INITIAL_ACCUMULATOR,
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


# ---------------------------------------------------------------------------------------------
# Orchestrator


def _run(command: Sequence[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=True,
                              cwd=REPO_ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine_info(threads: Sequence[int], inter: int) -> list[str]:
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    isas = [name for flag, name in (("avx2", "AVX2"), ("avx512f", "AVX-512F")) if flag in flags]
    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
                break
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            l3 = f", L3 {f.read().strip()}"
    except OSError:
        l3 = ""
    cpus = len(os.sched_getaffinity(0))
    dirty = len(_run(["git", "status", "--porcelain"]).splitlines())
    revision = _run(["git", "rev-parse", "--short", "HEAD"]) or "unknown"
    versions = []
    for package in ("tensorflow", "tensorflow-cpu", "keras", "numpy"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            pass

    return [
        f"machine:  {model}, {cpus} CPUs usable (of {os.cpu_count()}){l3}, {mem} RAM, "
        f"{platform.system()} {platform.release()}",
        f"vectors:  CPU has {', '.join(isas) or 'neither AVX2 nor AVX-512F'}; "
        f"TF_EMBEDDING_SIMD={os.environ.get('TF_EMBEDDING_SIMD', 'unset (widest)')}",
        f"software: Python {platform.python_version()}, {', '.join(versions)}",
        f"source:   {revision}" + (f" + {dirty} uncommitted paths" if dirty else ""),
        f"threads:  {', '.join(map(str, threads))}: each row's worker pinned to that many CPUs, "
        f"intra-op threads as many, inter-op " + (str(inter) if inter else "as many"),
    ]


def _others_cell(others: float | None, steal: float | None, mark: str = "") -> str:
    """Cores other processes used (and steal); * marks contention."""
    if others is None:
        return "-"
    return f"{mark}{others:.2f}" + ("*" if others + (steal or 0) >= CONTENDED_CORES else "")


@dataclasses.dataclass
class Row:
    """One (variant, distribution, thread count): its runs (one per --repeat), represented by
    the fastest."""

    distribution: str
    variant: bv.Variant
    threads: int
    runs: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        return all("error" not in run for run in self.runs)

    @property
    def result(self) -> dict[str, Any]:
        # Contention only ever adds time, so the fastest run is the least disturbed one.
        return min(self.runs, key=lambda run: statistics.median(run["step_seconds"]))

    @property
    def seconds(self) -> float:
        return statistics.median(self.result["step_seconds"])

    @property
    def cpu_seconds(self) -> float:
        return statistics.median(self.result["step_cpu_seconds"])

    def samples_per_second(self, batch: int) -> float:
        return batch / self.seconds

    def share_of_limit(self, phase: str) -> float:
        """Samples/s as a share of the native limit phase `phase`'s: the median, over every
        round of every run, of the limit's step time timed right after the round over ours in
        the round. Paired so: this machine's memory speed drifts within minutes (the limit's
        own 2-thread Zipf gather has ranged over 4.3-9.2 ms in one hour), and a ratio of two
        timings taken moments apart cancels the drift that a comparison with one fastest
        timing would keep."""
        return statistics.median(paired["limit_seconds"][phase] / paired["step_seconds"]
                                 for run in self.runs for paired in run["paired_rounds"])

    def paired_speed_up(self, baseline: "Row") -> float:
        """Samples/s over `baseline`'s, each as its share of the limit phase both are paired
        with: the two rows run minutes apart, and the machine's memory speed can move by 2x in
        between (on 2026-11-26 the limit's 1-thread Zipf gather took 10.1 ms after one round of
        a serving row and 19.8 ms after the next)."""
        phase = benchmark_limit.LIMIT_PHASES[self.variant.phase]
        return self.share_of_limit(phase) / baseline.share_of_limit(phase)

    @property
    def spread(self) -> float:
        """Interquartile range of the step times over their median."""
        times = self.result["step_seconds"]
        if len(times) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(times, n=4)
        return (q3 - q1) / self.seconds

    @property
    def others(self) -> str:
        """Cores other processes used while this row was timed (~: over its worker's life, the
        timed window being too short); * marks contention."""
        if self.result["others_cores"] is not None:
            return _others_cell(self.result["others_cores"], self.result["steal_cores"])
        return _others_cell(self.result["worker_others_cores"],
                            self.result["worker_steal_cores"], "~")


@dataclasses.dataclass
class NativeLimit:
    """The native limit on one distribution's ids, and the cores other processes used while it
    ran."""

    run: benchmark_limit.Run
    others_cores: float | None
    steal_cores: float | None


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 3) -> list[str]:
    """A Markdown table whose columns line up in a terminal too; the first `left` columns are
    labels (left-aligned), the others numbers."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(
            str(c).ljust(w) if i < left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    return [line(header), "|" + "|".join(
        "-" * (w + 1) + ":" if i >= left else ":" + "-" * (w + 1)
        for i, w in enumerate(widths)) + "|", *map(line, rows)]


def _efficiency(one_thread: float | None, threads: int, seconds: float) -> str:
    """Parallel efficiency t1 / (N * tN); blank for the 1-thread row or without one."""
    if threads == 1 or one_thread is None:
        return ""
    return f"{100 * one_thread / (threads * seconds):.0f}%"


def limit_report(limits: dict[str, NativeLimit], workload: bv.Workload) -> list[str]:
    """The native limit of each distribution and thread count."""
    gathered = workload.tables * workload.lookups * workload.dim * 4
    body = []
    for distribution, limit in limits.items():
        one = limit.run.limits.get(1)
        for threads, at in sorted(limit.run.limits.items()):
            cells = [distribution, str(threads)]
            for phase in ("forward", "train_in_api_order", "train"):
                seconds = at.phase(phase).seconds
                cells += [f"{workload.batch / seconds:,.0f}", f"{1000 * seconds:.2f}",
                          str(at.phase(phase).best_prefetch)]
                if phase == "forward":
                    cells.append(f"{gathered / seconds / 1e9:.1f}")
                cells.append(_efficiency(one and one.phase(phase).seconds, threads, seconds))
            cells += [f"{at.read_bytes_per_second / 1e9:.1f}",
                      f"{at.rmw_bytes_per_second / 1e9:.1f}",
                      _others_cell(limit.others_cores, limit.steal_cores)]
            body.append(cells)
    run = next(iter(limits.values())).run
    lines = [
        f"Native limit: {os.path.relpath(benchmark_limit.SOURCE, REPO_ROOT)} on the same ids "
        f"({benchmark_limit.command_line()}; {run.isa} code); {_gib(2 * run.table_bytes)} GiB "
        f"of tables and accumulators advised onto 2 MiB pages, {_gib(run.huge_page_bytes)} GiB "
        f"granted; each phase at its fastest prefetch distance of "
        f"{', '.join(map(str, benchmark_limit.PREFETCH_DISTANCES))} rows ahead:",
        "",
        *table(["dist", "thr", "forward samples/s", "ms/step", "prefetch", "rows GB/s", "eff",
                "train samples/s", "ms/step", "prefetch", "eff",
                "fused train samples/s", "ms/step", "prefetch", "eff", "read GB/s", "rmw GB/s",
                "others"], body, left=2),
        "",
        "forward: per table and sample, the sum of its looked-up rows; rows GB/s: the bytes of "
        "those rows per second.",
        "train: that gather-sum, then per table the lookups deduplicated, the cotangent (the "
        "activations, as the variants' loss gives) summed per unique id, and exact Adagrad on "
        "each touched row (acc += g^2; w -= lr g / sqrt(acc)); in the order of an embedding "
        "API's step, which a model between lookup and update imposes: every table's gather-sum, "
        "then the updates.",
        "fused train: the same work with each table updated right after its own gather-sum, "
        "which finds the table's touched rows still in the caches: faster, but no training "
        "step with a model between its lookups and its updates can order its work so.",
        "read / rmw: STREAM-style sum over the tables / `x *= s` over the accumulators (bytes "
        "read + written), fastest of 3.",
        "eff: parallel efficiency t1 / (N x tN); others: cores other processes used during the "
        "whole program.",
    ]
    return lines


def report(rows: list[Row], limits: dict[str, NativeLimit], workload: bv.Workload) -> list[str]:
    """The results table, the native limit, the breakdown (if measured) and the targets."""
    batch = workload.batch

    def find(distribution: str, phase: str, threads: int, **flag: bool) -> Row | None:
        key, value = next(iter(flag.items()))
        return next((r for r in rows if r.ok and r.distribution == distribution
                     and r.variant.phase == phase and r.threads == threads
                     and getattr(r.variant, key) == value), None)

    def one_thread(r: Row) -> float | None:
        """The 1-thread median step time of r's variant and distribution."""
        return next((o.seconds for o in rows if o.ok and o.variant == r.variant
                     and o.distribution == r.distribution and o.threads == 1), None)

    lines, body = [], []
    checks = []
    for r in rows:
        v = r.variant
        if v.phase == "part":
            continue
        if not r.ok:
            body.append([r.distribution, v.phase, v.name, str(r.threads), "FAILED"] + [""] * 14)
            continue
        baseline = find(r.distribution, v.phase, r.threads, baseline=True)
        sps = r.samples_per_second(batch)
        ratio = f"{sps / baseline.samples_per_second(batch):.2f}x" if baseline else ""
        paired_ratio = f"{r.paired_speed_up(baseline):.2f}x" if baseline else ""
        shares = {phase: f"{100 * r.share_of_limit(phase):.0f}%"
                  for phase in benchmark_limit.compared_phases(v.phase)}
        share = shares[benchmark_limit.LIMIT_PHASES[v.phase]]
        fused_share = shares.get(benchmark_limit.FUSED_TRAIN_PHASE, "")
        check = ""
        if r.result["checksum"] is not None and baseline and baseline.result["checksum"]:
            relative = abs(r.result["checksum"] / baseline.result["checksum"] - 1)
            check = "ok" if relative < 1e-4 else f"DIFF {relative:.1e}"
            checks.append(check == "ok")
        over = r.result["peak_rss"] - r.result["model_bytes"]
        added = r.result["steps_added_rss"]
        body.append([r.distribution, v.phase, v.name, str(r.threads), f"{sps:,.0f}", ratio,
                     paired_ratio, share, fused_share,
                     _efficiency(one_thread(r), r.threads, r.seconds),
                     f"{1000 * r.seconds:.1f}", f"{100 * r.spread:.0f}%",
                     f"{1000 * r.cpu_seconds:.1f}", _gib(r.result["model_bytes"]),
                     _gib(r.result["peak_rss"]), f"{over / GIB:+.2f}",
                     "-" if added is None else f"{max(added, 0) / GIB:+.2f}", r.others, check])
    lines += table(["dist", "phase", "variant", "thr", "samples/s", "vs stock", "paired",
                    "of limit", "of fused", "par eff", "ms/step", "IQR", "CPU ms",
                    "tables+slots GiB", "peak RSS GiB", "over GiB", "steps GiB", "others",
                    "check"], body)
    lines += ["", "Variants:"]
    for v in dict.fromkeys(r.variant for r in rows if r.variant.phase != "part"):
        lines.append(f"  {v.name:15} {v.description}{' [baseline]' if v.baseline else ''}")
    lines += [
        "",
        "thr: threads (CPUs the worker is pinned to, TensorFlow's intra- and inter-op threads).",
        "vs stock: against the phase's baseline variant of the same distribution and threads; "
        "paired: the same through the paired limit (of limit over the baseline's of limit), "
        "which cancels the drift of the machine's memory speed between the two rows' runs.",
        "of limit: share of the native limit's samples/s on the same ids and threads (forward "
        "and serve: its gather-sum; train: its gather-sum + deduplicated Adagrad step in API "
        "order), paired: the median over the row's rounds (every run) of the limit's step "
        "time, timed right after the round on the same CPUs at the table below's fastest "
        "prefetch distance, over ours in the round; of fused: the same for a training row "
        "against the limit's fused train step.",
        "par eff: parallel efficiency, t1 / (N x tN) with the 1-thread row of the same variant "
        "and distribution (100%: linear scaling).",
        "ms/step: median wall time; IQR: its interquartile range; CPU ms: median CPU time of a "
        "step, all threads.",
        "over: peak RSS - tables - slots (Python and TensorFlow, inputs, initialisation, "
        "temporaries); steps: RSS the warm-up and timed steps add to the built variant.",
        "others: cores used by other processes while timed (~: timed steps under "
        f"{MIN_CPU_WINDOW:g} s, so over the whole worker); * = contended (others + steal >= "
        f"{CONTENDED_CORES}).",
        "check: the result's checksum agrees with the baseline's (forward: activations; "
        "train: the touched rows after training).",
        "",
        *limit_report(limits, workload),
    ]

    parts = [r for r in rows if r.variant.phase == "part"]
    if parts:
        body = []
        for r in parts:
            whole = next((w for w in rows if w.ok and w.distribution == r.distribution
                          and w.threads == r.threads and w.variant.name == r.variant.part_of),
                         None)
            if not r.ok:
                body.append([r.distribution, r.variant.part_of, r.variant.name, str(r.threads),
                             "FAILED"] + [""] * 4)
                continue
            body.append([r.distribution, r.variant.part_of, r.variant.name, str(r.threads),
                         f"{1000 * r.seconds:.1f}",
                         f"{100 * r.seconds / whole.seconds:.0f}%" if whole else "",
                         f"{1000 * r.cpu_seconds:.1f}",
                         f"{100 * r.cpu_seconds / whole.cpu_seconds:.0f}%" if whole else "",
                         r.others])
        lines += ["", "Breakdown (each part timed alone on precomputed inputs):", ""]
        lines += table(["dist", "step", "part", "thr", "ms/step", "of step", "CPU ms",
                        "of step CPU", "others"], body)

    targets = []
    for r in rows:
        v = r.variant
        if v.target is None or not r.ok:
            continue
        label = f"{r.distribution:8} {v.name:14} {r.threads} thr"
        baseline = find(r.distribution, v.phase, r.threads, baseline=True)
        if baseline:
            ratio = r.samples_per_second(batch) / baseline.samples_per_second(batch)
            paired = r.paired_speed_up(baseline)
            passed = min(ratio, paired) >= v.target
            targets.append(f"{label} speed-up {ratio:5.2f}x, paired {paired:5.2f}x (target >= "
                           f"{v.target:g}x both): {'PASS' if passed else 'FAIL'}")
        over = r.result["peak_rss"] - r.result["model_bytes"]
        passed = over <= RSS_BUDGET
        targets.append(f"{label} peak RSS - tables - slots {over / GIB:.2f} GiB "
                       f"(target <= {RSS_BUDGET / GIB:g} GiB): {'PASS' if passed else 'FAIL'}")
    for r in rows:
        for name, target in r.variant.versus:
            other = next((o for o in rows if o.ok and o.variant.name == name
                          and o.distribution == r.distribution and o.threads == r.threads),
                         None)
            if not r.ok or other is None:
                continue
            ratio = other.seconds / r.seconds
            paired = r.paired_speed_up(other)
            passed = min(ratio, paired) >= target
            targets.append(f"{r.distribution:8} {r.variant.name} over {name} {r.threads} thr: "
                           f"{ratio:5.2f}x, paired {paired:5.2f}x (target >= {target:g}x "
                           f"both): {'PASS' if passed else 'FAIL'}")
    if targets:
        lines += ["", "Targets:", *targets]
    if checks and not all(checks):
        lines += ["", "WARNING: some variants disagree with their baseline (check column)."]
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
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


def select_variants(args: argparse.Namespace) -> list[bv.Variant]:
    if args.variants:
        names = args.variants.split(",")
        unknown = [n for n in names if n not in bv.VARIANTS]
        if unknown:
            raise SystemExit(f"unknown variants {unknown}; --list-variants shows them")
    else:
        names = [n for n, v in bv.VARIANTS.items() if v.default]
    if args.breakdown:
        names += [n for n, v in bv.VARIANTS.items() if v.part_of and n not in names]
    # Registry order: baselines sit next to the variants they are compared with.
    return [v for n, v in bv.VARIANTS.items() if n in names]


def run_workers(args: argparse.Namespace, workload: bv.Workload, jobs: list[dict[str, Any]],
                scratch: str) -> list[dict[str, Any]]:
    if args.shared_process:
        # A process has one Keras and one thread count: variants needing tf_keras, and each
        # thread count, share a process of their own.
        groups = [group for threads in args.threads for legacy in (False, True)
                  if (group := [j for j in jobs if j["threads"] == threads
                                and bv.VARIANTS[j["variant"]].legacy_keras == legacy])]
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
        if bv.VARIANTS[group[0]["variant"]].legacy_keras:
            env["TF_USE_LEGACY_KERAS"] = "1"
        others = OtherProcessesCpu()
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


def limit_prefetch(limit: NativeLimit, variant: bv.Variant, threads: int) -> dict[str, int]:
    """{limit phase: prefetch distance} of the phases a row of `variant` is compared with, each
    at its fastest distance in the run's first limit."""
    return {p: limit.run.limits[threads].phase(p).best_prefetch
            for p in benchmark_limit.compared_phases(variant.phase)}


def _job_key(job: dict[str, Any]) -> tuple[str, str, int]:
    return job["variant"], job["distribution"], job["threads"]


def run_limit(args: argparse.Namespace, workload: bv.Workload, ids_path: str) -> NativeLimit:
    """The native limit on the ids in `ids_path`, at every thread count of the run."""
    others = OtherProcessesCpu()
    run = benchmark_limit.run(ids_path, workload.vocab, workload.dim, args.threads, args.steps,
                              args.warmup, bv.LEARNING_RATE, bv.INITIAL_ACCUMULATOR,
                              args.timeout)
    return NativeLimit(run, *others.cores())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(args.worker)
    if args.list_variants:
        for v in bv.VARIANTS.values():
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
    load_start = os.getloadavg()
    run_others = OtherProcessesCpu()
    now = datetime.datetime.now(datetime.timezone.utc)
    header = [
        f"tf_embedding benchmark, {now:%Y-%m-%d %H:%M} UTC",
        f"command:  {command}",
        *machine_info(args.threads, args.inter_op_threads),
        f"workload: {workload.tables} tables x {workload.vocab:,} x {workload.dim} float32 "
        f"({_gib(workload.table_bytes)} GiB; Adagrad slots as much again), batch "
        f"{workload.batch}, {workload.ids_per_sample} ids per sample per table, sum combiner, "
        f"Adagrad lr {bv.LEARNING_RATE}",
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
    print("\n".join(header), flush=True)

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
        results = run_workers(args, workload, jobs * args.repeat, scratch)

    load_end = os.getloadavg()
    others_cores, steal_cores = run_others.cores()
    first = next((r for r in results if "tf_version" in r), {})
    runs: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in results:
        runs.setdefault((r["distribution"], r["variant"], r["threads"]), []).append(r)
    rows = [Row(distribution, bv.VARIANTS[name], threads, group)
            for (distribution, name, threads), group in runs.items()]
    lines = report(rows, limits, workload)
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


if __name__ == "__main__":
    sys.exit(main())
