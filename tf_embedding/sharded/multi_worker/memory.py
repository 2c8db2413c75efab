"""How much memory this process can still take: what a whole table read onto every worker
(`WorkerBlockVariable.full_value`) is checked against."""

import os

_UNLIMITED = 1 << 62


def available_bytes() -> int:
    """The least of the machine's available memory (`MemAvailable`) and what this process's
    memory cgroup (v1 or v2) still allows."""
    return min(_meminfo_available(), _cgroup_available())


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _UNLIMITED


def _cgroup_available() -> int:
    """The memory cgroup's limit minus its usage, or unlimited where none is readable."""
    try:
        with open("/proc/self/cgroup") as cgroups:
            lines = [line.strip().split(":", 2) for line in cgroups]
    except OSError:
        return _UNLIMITED
    candidates = []
    for _, controllers, path in lines:
        if controllers == "":  # cgroup v2
            candidates.append((f"/sys/fs/cgroup{path}", "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            candidates.append((f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes",
                               "memory.usage_in_bytes"))
    available = _UNLIMITED
    for directory, limit_file, usage_file in candidates:
        try:
            with open(os.path.join(directory, limit_file)) as limit_text:
                limit = limit_text.read().strip()
            with open(os.path.join(directory, usage_file)) as usage_text:
                usage = int(usage_text.read().strip())
        except (OSError, ValueError):
            continue
        if limit != "max" and int(limit) < _UNLIMITED:
            available = min(available, int(limit) - usage)
    return available
