"""tools/dynamic_benchmark.py --quick fills a dynamic table and prints each step's paired ratio.

Timings of a smoke run on a tiny workload mean nothing, so nothing here asserts on them.
"""

import os
import re
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_run_prints_every_step():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "dynamic_benchmark.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # 70% of the quick capacity (20,000) admitted by the fill, before anything is timed.
    assert "filled:   {'step': 11, 'occupied': 14000," in out
    rows = re.findall(r"^\| (training step|forward step|training step, every key new|"
                      r"exported lookup \(SavedModel\)) \| [\d.]+ \| [\d.]+ \| [\d.]+x \|$",
                      out, flags=re.MULTILINE)
    assert rows == ["training step", "forward step", "training step, every key new",
                    "exported lookup (SavedModel)"]
