"""The machine tools/benchmark.py (and the tools built on it) measure on: what it is
(`machine_info`), the CPU other processes use meanwhile (`OtherProcessesCpu`), and this process's
resident memory (`max_rss`, `current_rss`, `reset_peak_rss`)."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import time
from importlib import metadata
from typing import Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Other processes using this many cores while a variant is timed mark its row as contended.
CONTENDED_CORES = 0.2
MIN_CPU_WINDOW = 0.25


def max_rss() -> int:
    """Peak RSS of this process in bytes (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def reset_peak_rss() -> bool:
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
