"""Counting XLA's compiles: a script run in a process of its own, as XLA_FLAGS are read once
per process, with XLA dumping every module it compiles."""

import os
import subprocess
import sys


def run_counting_compiles(script: str, dump_dir) -> tuple[list[int], set[int], str, int]:
    """Runs `script`, which prints its batches' id counts on one line and a verdict on the
    next, as its last output. Returns the counts, their powers-of-two buckets, the verdict and
    the number of modules XLA compiled."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300,
                            env={**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump_dir}"})
    assert result.returncode == 0, result.stderr[-5000:]
    counts, verdict = result.stdout.split("\n")[-3:-1]
    counts = [int(count) for count in counts.split()]
    buckets = {1 << (count - 1).bit_length() for count in counts}
    compiles = [name for name in os.listdir(dump_dir)
                if name.endswith(".before_optimizations.txt")]
    return counts, buckets, verdict, len(compiles)
