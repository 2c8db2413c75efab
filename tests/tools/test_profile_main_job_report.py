"""tools/profile_main_job.py's paired report: each variant's examples/s over the stock job's of
the same round, medians over rounds, and the profiled parts per example."""

import os
import re
import sys

import pytest

from helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))
import profile_main_job  # pylint: disable=wrong-import-position

pytestmark = pytest.mark.unit


def _job(api: str, round_number: int, rate: float, embedding_ms: float) -> dict:
    return {"embedding_api": api, "round": round_number, "examples_per_second": rate,
            "cpu_us_per_example": 1e6 / rate, "batch_size": 1000, "others": 0.5,
            "python": {"the rest (loop, progress)": 1.0},
            "ops": {"embedding": embedding_ms, "dense model": 4.0}}


def test_ratios_pair_each_job_with_the_stock_job_of_its_round():
    # The machine got twice as fast in round 1: paired by round, sharded is 2x stock in both,
    # where the ratio of the medians over the rounds would not be.
    results = [_job("stock", 0, 100.0, 8.0), _job("sharded", 0, 200.0, 2.0),
               _job("sharded", 1, 400.0, 2.0), _job("stock", 1, 200.0, 8.0),
               _job("stock", 2, 100.0, 8.0), _job("sharded", 2, 200.0, 2.0)]
    report = profile_main_job.paired_report(results)
    rows = {row[0]: row for row in re.findall(r"^\| (\w+) \| (.*) \|$", report, re.M)}
    sharded = rows["sharded"][1].split(" | ")
    assert sharded[:2] == ["200", "2.00x"]  # median examples/s, paired ratio
    # Parts: CPU µs per example (ms per step over 1000 examples); embedding, then dense model.
    assert sharded[4:6] == ["2.0", "4.0"]
    assert rows["stock"][1].split(" | ")[1] == "1.00x"


def test_without_a_stock_job_the_first_variant_is_the_baseline():
    # A change against the checkout before it: `sharded@DIR` first, then this checkout's.
    results = [dict(_job("sharded", 0, 100.0, 2.0), variant="sharded@../before"),
               dict(_job("sharded", 0, 150.0, 1.0), variant="sharded")]
    report = profile_main_job.paired_report(results)
    assert "x sharded@../before" in report
    rows = dict(re.findall(r"^\| (\S+) \| \S+ \| (\S+) \|", report, re.M))
    assert rows == {"sharded@../before": "1.00x", "sharded": "1.50x"}
