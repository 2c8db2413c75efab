"""tools/mw_benchmark.py on a tiny workload: a row per worker count, bytes per worker step that
only workers beyond the first send, and measured bytes within 10% of the traffic formula."""

import os
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

pytestmark = pytest.mark.cluster


def test_mw_benchmark_prints_samples_and_bytes_against_the_formula():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "mw_benchmark.py"), "--workers", "1",
         "2", "--tables", "2", "--vocabulary", "5000", "--dim", "16", "--batch", "512",
         "--ids-per-sample", "4", "--steps", "3", "--warmup", "1"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)  # a hang guard
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [[cell.strip() for cell in line.split("|")[1:-1]]
            for line in result.stdout.splitlines()
            if line.startswith("| ") and "samples/s" not in line]
    assert [row[0] for row in rows] == ["one process", "1", "2"], result.stdout
    assert float(rows[1][6]) < 0.01  # one worker exchanges nothing
    assert float(rows[2][6]) > 0 and 0.9 < float(rows[2][8]) < 1.1, result.stdout
