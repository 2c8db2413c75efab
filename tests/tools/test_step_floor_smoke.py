"""tools/step_floor.py --quick times every input kind's forward and training step beside
TensorFlow's per-call floor and the native limit, and prints one row each.

Timings of a smoke run on a tiny workload mean nothing, so nothing here asserts on their values.
"""

import os
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))

import step_floor  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _rows(out: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in out.splitlines() if line.startswith("|")]
    header, _, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return header, rows


def test_quick_run_prints_a_row_per_phase_and_input_kind():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "step_floor.py"), "--quick",
         "--threads", "1", "--distribution", "zipf", "--steps", "2", "--rounds", "2",
         "--warmup", "1"],
        capture_output=True, text=True, cwd=REPO_ROOT,
        # Under a minute on an idle machine; generous so a busy CI machine does not flake.
        timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vectors:" in result.stdout and "2 rounds of 2 pairs of calls" in result.stdout
    header, rows = _rows(result.stdout)
    assert header == step_floor.HEADER
    assert [(row[0], row[1], row[2], row[3]) for row in rows] == [
        (phase, kind, "zipf", "1") for kind in ("sparse", "ragged", "dense")
        for phase in ("forward", "train")]
    for row in rows:
        step, floor, _, limit = (float(row[header.index(c)]) for c in
                                 ("step ms", "floor ms", "step - floor ms", "limit ms"))
        assert step > 0 and floor > 0 and limit >= 0
        assert row[header.index("step of limit")].endswith("%")
        # Only SparseTensor rows have the limit that reads the same SparseTensor.
        sparse_limit = row[header.index("sparse-input limit ms")]
        assert (float(sparse_limit) >= 0) if row[1] == "sparse" else sparse_limit == "-"


@pytest.mark.parametrize("flag,value,message", [
    ("--kinds", "sparse,csr", "--kinds: unknown csr; choose from sparse, ragged, dense"),
    ("--phases", "serve", "--phases: unknown serve; choose from forward, train"),
    ("--distribution", "normal", "--distribution: unknown normal; choose from zipf, uniform"),
    ("--rounds", "0", "--steps, --rounds and --warmup must be at least 1"),
])
def test_bad_flags_are_named(capsys, flag, value, message):
    with pytest.raises(SystemExit) as error:
        step_floor.parse_args([flag, value])
    assert error.value.code == 2
    assert message in capsys.readouterr().err
