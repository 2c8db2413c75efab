"""tools/serving_latency.py --quick times stock's serving lookup and our two exports, loaded, at
each batch size, after checking that their activations agree; tools/serving_formulations.py
--quick times the stock-op candidates of each pooled kind.

Timings of a smoke run on a tiny workload mean nothing, so nothing here asserts on their values.
"""

import os
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))

import serving_formulations  # pylint: disable=wrong-import-position
import serving_latency  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_run_prints_p50_and_p99_per_row_and_batch_size():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "serving_latency.py"), "--quick",
         "--batch-sizes", "1,7", "--calls", "5", "--warmup", "2"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("|")]
    header, _, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert header == serving_latency.HEADER
    assert [(row[0], row[1]) for row in rows] == [
        (batch, name) for batch in ("1", "7") for name in serving_latency.ROWS]
    for row in rows:
        p50, p99 = float(row[2]), float(row[3])
        assert 0 < p50 <= p99
        assert row[5].endswith("x")


@pytest.mark.parametrize("flag,value,message", [
    ("--batch-sizes", "1,x", "--batch-sizes: not comma-separated integers"),
    ("--batch-sizes", "0", "must be at least 1"),
    ("--distribution", "normal", "invalid choice: 'normal'"),
])
def test_bad_flags_are_named(capsys, flag, value, message):
    with pytest.raises(SystemExit) as error:
        serving_latency.parse_args([flag, value])
    assert error.value.code == 2
    assert message in capsys.readouterr().err


def test_formulations_quick_run_checks_and_times_every_candidate():
    """tools/serving_formulations.py: every candidate of every pooled kind, checked against
    TF's own formulation of that kind before it is timed."""
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "serving_formulations.py"), "--quick",
         "--calls", "2"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("|")]
    header, _, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert header == serving_formulations.HEADER
    candidates = {(row[0], row[1], row[2]) for row in rows}
    for kind in ("sparse", "ragged"):
        for weighted in ("no", "yes"):
            assert {(kind, weighted, "stock"), (kind, weighted, "segment")} <= candidates
    # The unweighted SparseTensor reduction is TF's own op: TF's bits.
    assert ["sparse", "no", "segment"] in [row[:3] for row in rows if row[5] == "yes"]
