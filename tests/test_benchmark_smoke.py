"""tools/benchmark.py --quick runs every default variant and prints its table.

Timings of a smoke run on a tiny workload mean nothing, so nothing here asserts on them.
"""

import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))

import benchmark_variants  # pylint: disable=wrong-import-position


def test_quick_run_prints_every_variant():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "benchmark.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO_ROOT,
        # A few seconds on an idle machine; generous so a busy CI machine does not flake.
        timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "load average at start" in out and "load average at end" in out
    header = next(line for line in out.splitlines() if line.startswith("| dist"))
    for column in ("samples/s", "vs stock", "of gather", "peak RSS GiB", "over GiB"):
        assert column in header
    rows = [line for line in out.splitlines() if line.startswith("| zipf") or
            line.startswith("| uniform")]
    expected = [name for name, v in benchmark_variants.VARIANTS.items() if v.default]
    for distribution in ("zipf", "uniform"):
        names = [row.split("|")[3].strip() for row in rows
                 if row.split("|")[1].strip() == distribution]
        assert names == expected
    assert "FAILED" not in out and "DIFF" not in out
    assert "Targets:" in out


def test_ps_benchmark_prints_samples_and_bytes_for_each_traffic():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "ps_benchmark.py"), "--num-ps", "2",
         "--tables", "1", "--vocabulary", "1000", "--dim", "16", "--batch", "256",
         "--ids-per-sample", "4", "--steps", "2", "--warmup", "1"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)  # a hang guard
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines()
            if line.startswith("| ") and "samples/s" not in line]
    assert [(row[0].strip(), row[1].strip()) for row in rows] == [
        ("one process", "-"), ("2", "rows"), ("2", "partial")]
    for row in rows[1:]:
        assert float(row[3]) > 0 and float(row[4]) > 0  # bytes down and up per step
