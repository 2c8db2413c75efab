"""tools/benchmark.py --quick runs every default variant at 1 and 2 threads, and the native limit,
and prints their tables.

Timings of a smoke run on a tiny workload mean nothing, so nothing here asserts on them.
"""

import json
import os
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))

import benchmark_variants  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_run_prints_every_variant():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "benchmark.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO_ROOT,
        # About 2 minutes on an idle 2-core machine (2026-12, mostly tracing ~100 steps); the
        # suite runs a test process per core beside it, which has taken it past 5 minutes.
        timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "load average at start" in out and "load average at end" in out
    tables = _tables(out)
    header, rows = tables[0]
    assert header[:4] == ["dist", "phase", "variant", "thr"]
    for column in ("samples/s", "vs stock", "paired", "of limit", "par eff", "peak RSS GiB",
                   "over GiB"):
        assert column in header
    expected = [(name, threads) for name, v in benchmark_variants.VARIANTS.items() if v.default
                for threads in ("1", "2")]
    for distribution in ("zipf", "uniform"):
        assert [(row[2], row[3]) for row in rows if row[0] == distribution] == expected
    share, fused, efficiency = (header.index("of limit"), header.index("of fused"),
                                header.index("par eff"))
    for row in rows:
        assert row[share].endswith("%")
        # Only a training row has the fused train step to compare with.
        assert row[fused].endswith("%") == (row[1] == "train")
        assert row[efficiency].endswith("%") == (row[3] == "2")

    limit_header, limit_rows = next(t for t in tables if t[0][:3] == ["dist", "thr",
                                                                      "forward samples/s"])
    assert [(row[0], row[1]) for row in limit_rows] == [
        (d, n) for d in ("zipf", "uniform") for n in ("1", "2")]
    assert "fused train samples/s" in limit_header
    for row in limit_rows:
        assert float(row[limit_header.index("read GB/s")]) > 0
    assert "FAILED" not in out and "DIFF" not in out
    assert "Targets:" in out


def test_steps_per_call_loops_steps_in_one_call_and_keeps_results(tmp_path):
    """--steps-per-call runs the forward and train steps in a tf.function loop over a tf.data
    iterator: the checksums still agree with the baseline's (the same batches, in the same
    order), and the header says how the steps ran. Every round of steps is paired with a timing
    of the limit phases its row is a share of."""
    measurements = tmp_path / "measurements.json"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "benchmark.py"), "--quick",
         "--steps-per-call", "3", "--threads", "1", "--distribution", "zipf", "--rounds", "3",
         "--variants", "stock-forward,sharded-forward,stock-train,sharded-train",
         "--json", str(measurements)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "a tf.function call of 3 steps" in result.stdout
    assert "3 x 3 timed steps" in result.stdout
    header, rows = _tables(result.stdout)[0]
    assert sorted(row[2] for row in rows) == ["sharded-forward", "sharded-train",
                                              "stock-forward", "stock-train"]
    assert all(row[header.index("check")] == "ok" for row in rows)
    for run in json.loads(measurements.read_text())["results"]:
        assert len(run["step_seconds"]) == 9
        phases = {"forward"} if "forward" in run["variant"] else {"train", "train_in_api_order"}
        assert [set(paired["limit_seconds"]) for paired in run["paired_rounds"]] == [phases] * 3
        assert all(paired["step_seconds"] > 0 and min(paired["limit_seconds"].values()) > 0
                   for paired in run["paired_rounds"])


def test_keras_rs_fit_rows_run_and_print_their_paired_ratios():
    """The non-default model.train_on_batch rows (keras-rs's layer, ours, and the Keras layer)
    train the same rows as the baseline, and the targets give ours over the other two."""
    pytest.importorskip("keras_rs")
    rows_run = ["keras-rs-fit", "keras-rs-cpu-fit", "keras-layer-fit"]
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "benchmark.py"), "--quick",
         "--threads", "1", "--distribution", "zipf",
         "--variants", ",".join(["stock-train", *rows_run])],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    header, rows = _tables(result.stdout)[0]
    assert [row[2] for row in rows] == ["stock-train", *rows_run]
    assert all(row[header.index("check")] == "ok" for row in rows)
    for other, target in (("keras-rs-cpu-fit", "5x"), ("keras-layer-fit", "0.9x")):
        assert f"keras-rs-fit over {other} 1 thr:" in result.stdout
        assert f"(target >= {target} both)" in result.stdout


def _tables(out):
    """Every Markdown table of the output: (header cells, rows of cells)."""
    tables, current = [], None
    for line in out.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if current is None:
            current = (cells, [])
            tables.append(current)
        elif not line.startswith("|:") and not line.startswith("|-"):
            current[1].append(cells)
    return tables


@pytest.mark.cluster
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


def test_dense_inputs_run_on_one_id_per_sample():
    """The dense-input rows (a [batch, 1] feature per table, the only dense shape the embedding
    APIs pool) agree with the stock baseline's activations and updates."""
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "benchmark.py"), "--quick",
         "--threads", "1", "--ids-per-sample", "1", "--variants",
         "stock-forward,sharded-forward-dense,stock-train,sharded-train-dense"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    _, rows = _tables(result.stdout)[0]
    assert sorted(row[2] for row in rows) == sorted(
        ["stock-forward", "sharded-forward-dense", "stock-train", "sharded-train-dense"] * 2)
    assert "FAILED" not in result.stdout and "DIFF" not in result.stdout


def test_xla_ab_compares_compiled_and_uncompiled_steps():
    """tools/xla_ab.py runs a variant and its compiled twin in one process and finds equal
    checksums (timings of the tiny workload mean nothing)."""
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "xla_ab.py"), "--quick", "--steps", "2",
         "--warmup", "1", "--variants", "sharded-train", "--distribution", "zipf",
         "--threads", "1"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines()
            if line.startswith("| `")]
    assert [[cell.strip() for cell in row[:3]] for row in rows] == [
        ["`sharded-train`", "zipf", "1"]]
    assert rows[0][-1].strip() == "yes"
    assert rows[0][-2].strip() == "1.15x"
