"""The tables tools/benchmark.py prints: the results (`report`: one `Row` per variant,
distribution and thread count, against its baseline and the native limit), the native limit's
own (`limit_report`), the breakdown of a step into its parts, and the targets."""

from __future__ import annotations

import dataclasses
import os
import statistics
from typing import Any, Sequence

import benchmark_limit
import benchmark_machine as machine
import benchmark_registry as registry

GIB = 1 << 30
# Peak RSS may exceed tables + slots by at most this much (the performance issue's target; the
# earlier kernels issue allowed 1.5 GiB).
RSS_BUDGET = 1.0 * GIB


def others_cell(others: float | None, steal: float | None, mark: str = "") -> str:
    """Cores other processes used (and steal); * marks contention."""
    if others is None:
        return "-"
    contended = others + (steal or 0) >= machine.CONTENDED_CORES
    return f"{mark}{others:.2f}" + ("*" if contended else "")


@dataclasses.dataclass
class Row:
    """One (variant, distribution, thread count): its runs (one per --repeat), represented by
    the fastest."""

    distribution: str
    variant: registry.Variant
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
            return others_cell(self.result["others_cores"], self.result["steal_cores"])
        return others_cell(self.result["worker_others_cores"],
                           self.result["worker_steal_cores"], "~")


@dataclasses.dataclass
class NativeLimit:
    """The native limit on one distribution's ids, and the cores other processes used while it
    ran."""

    run: benchmark_limit.Run
    others_cores: float | None
    steal_cores: float | None


def gib(n: float) -> str:
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


def limit_report(limits: dict[str, NativeLimit], workload: registry.Workload) -> list[str]:
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
                      others_cell(limit.others_cores, limit.steal_cores)]
            body.append(cells)
    run = next(iter(limits.values())).run
    lines = [
        f"Native limit: {os.path.relpath(benchmark_limit.SOURCE, machine.REPO_ROOT)} on the "
        f"same ids ({benchmark_limit.command_line()}; {run.isa} code); "
        f"{gib(2 * run.table_bytes)} GiB "
        f"of tables and accumulators advised onto 2 MiB pages, {gib(run.huge_page_bytes)} GiB "
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


def report(rows: list[Row], limits: dict[str, NativeLimit], workload: registry.Workload
           ) -> list[str]:
    """The results table, the native limit, the breakdown (if measured) and the targets."""
    body, checks = [], []
    for r in rows:
        if r.variant.phase != "part":
            cells, check = _result_cells(r, rows, workload.batch)
            body.append(cells)
            if check:
                checks.append(check == "ok")
    lines = table(["dist", "phase", "variant", "thr", "samples/s", "vs stock", "paired",
                   "of limit", "of fused", "par eff", "ms/step", "IQR", "CPU ms",
                   "tables+slots GiB", "peak RSS GiB", "over GiB", "steps GiB", "others",
                   "check"], body)
    lines += ["", "Variants:"]
    for v in dict.fromkeys(r.variant for r in rows if r.variant.phase != "part"):
        lines.append(f"  {v.name:15} {v.description}{' [baseline]' if v.baseline else ''}")
    lines += ["", *_column_notes(), "", *limit_report(limits, workload)]
    lines += _breakdown(rows)
    targets = _targets(rows, workload.batch)
    if targets:
        lines += ["", "Targets:", *targets]
    if checks and not all(checks):
        lines += ["", "WARNING: some variants disagree with their baseline (check column)."]
    return lines


def _find(rows: list[Row], distribution: str, phase: str, threads: int, **flag: bool
          ) -> Row | None:
    """The first measured row of `distribution`, `phase` and `threads` whose variant has the
    one attribute `flag` names set to its value (e.g. `baseline=True`)."""
    key, value = next(iter(flag.items()))
    return next((r for r in rows if r.ok and r.distribution == distribution
                 and r.variant.phase == phase and r.threads == threads
                 and getattr(r.variant, key) == value), None)


def _one_thread(rows: list[Row], r: Row) -> float | None:
    """The 1-thread median step time of r's variant and distribution."""
    return next((o.seconds for o in rows if o.ok and o.variant == r.variant
                 and o.distribution == r.distribution and o.threads == 1), None)


def _result_cells(r: Row, rows: list[Row], batch: int) -> tuple[list[str], str]:
    """A row of the results table, and its check against its baseline ("" if none)."""
    v = r.variant
    if not r.ok:
        return [r.distribution, v.phase, v.name, str(r.threads), "FAILED"] + [""] * 14, ""
    baseline = _find(rows, r.distribution, v.phase, r.threads, baseline=True)
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
    over = r.result["peak_rss"] - r.result["model_bytes"]
    added = r.result["steps_added_rss"]
    return [r.distribution, v.phase, v.name, str(r.threads), f"{sps:,.0f}", ratio,
            paired_ratio, share, fused_share,
            _efficiency(_one_thread(rows, r), r.threads, r.seconds),
            f"{1000 * r.seconds:.1f}", f"{100 * r.spread:.0f}%",
            f"{1000 * r.cpu_seconds:.1f}", gib(r.result["model_bytes"]),
            gib(r.result["peak_rss"]), f"{over / GIB:+.2f}",
            "-" if added is None else f"{max(added, 0) / GIB:+.2f}", r.others, check], check


def _column_notes() -> list[str]:
    """What the results table's columns mean."""
    return [
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
        f"{machine.MIN_CPU_WINDOW:g} s, so over the whole worker); * = contended (others + "
        f"steal >= {machine.CONTENDED_CORES}).",
        "check: the result's checksum agrees with the baseline's (forward: activations; "
        "train: the touched rows after training).",
    ]


def _breakdown(rows: list[Row]) -> list[str]:
    """The parts' table (--breakdown), each part against the step it is part of; none without
    parts."""
    parts = [r for r in rows if r.variant.phase == "part"]
    if not parts:
        return []
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
    return ["", "Breakdown (each part timed alone on precomputed inputs):", "",
            *table(["dist", "step", "part", "thr", "ms/step", "of step", "CPU ms",
                    "of step CPU", "others"], body)]


def _targets(rows: list[Row], batch: int) -> list[str]:
    """Each target row's speed-up over its baseline and its memory against RSS_BUDGET, then
    the rows' paired speed-ups over the others they name (`Variant.versus`)."""
    targets = []
    for r in rows:
        v = r.variant
        if v.target is None or not r.ok:
            continue
        label = f"{r.distribution:8} {v.name:14} {r.threads} thr"
        baseline = _find(rows, r.distribution, v.phase, r.threads, baseline=True)
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
    return targets
