"""The lab's traffic model (tools/netlab/model.py): its bytes per step are the ones measured on
loopback clusters (docs/parameter_server_traffic.md, "Measured"), and its step time adds the links'
time, the round trips and the compute as the model says."""

import os
import sys

import pytest

from helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))

from netlab import model  # pylint: disable=wrong-import-position

pytestmark = pytest.mark.unit

# tools/ps_benchmark.py's defaults: 2 tables of 100,000 x 64, batch 1024, 20 uniform ids.
DEFAULT = model.Workload(tables=2, vocabulary=100_000, dim=64, batch=1024, ids_per_sample=20)


@pytest.mark.parametrize("traffic, num_ps, down_mb, up_mb", [
    ("rows", 1, 0.87, 0.53), ("partial", 1, 0.87, 0.53),
    ("rows", 2, 9.78, 9.48), ("partial", 2, 1.41, 1.05),
    ("rows", 4, 9.78, 9.49), ("partial", 4, 2.50, 2.10)])
def test_step_bytes_are_the_measured_ones(traffic, num_ps, down_mb, up_mb):
    """Within 1.5% of the TCP payload measured with `ss` (which includes the chief's dispatch)."""
    down, up = model.step_bytes(DEFAULT, traffic, num_ps)
    assert down / 1e6 == pytest.approx(down_mb, rel=0.015)
    assert up / 1e6 == pytest.approx(up_mb, rel=0.015)


def test_unique_ids_of_uniform_draws():
    """The expected distinct count of 20,480 uniform draws from 100,000 ids (about 18,500, as
    the docs say), and no more ids than draws or than the vocabulary."""
    assert DEFAULT.unique_ids() == pytest.approx(18_540, rel=0.002)
    assert model.Workload(1, 10**9, 8, 100, 1).unique_ids() == pytest.approx(100, rel=1e-6)
    assert model.Workload(1, 10, 8, 1000, 10).unique_ids() == pytest.approx(10)


def test_step_time_adds_links_round_trips_and_compute():
    """One worker pays down and up in turn on its own link; with more workers than PS tasks a PS
    link carries several workers' shares of both directions, in turn, and bounds the step."""
    frame_rate = 100e6 / 8 * model.SEGMENT / model.FRAME  # payload bytes/s at 100 Mbit/s
    one_worker = model.step_seconds(6e6, 4e6, 100.0, num_ps=2, num_workers=1,
                                    round_trip=1e-3, compute=0.05)
    assert one_worker == pytest.approx(10e6 / frame_rate + 3e-3 + 0.05)
    crowded = model.step_seconds(6e6, 4e6, 100.0, num_ps=1, num_workers=4, round_trip=0.0,
                                 compute=0.0)
    assert crowded == pytest.approx(4 * 10e6 / frame_rate)
    # As many workers as PS tasks: each PS link carries one worker's bytes, as its own link does.
    even = model.step_seconds(6e6, 4e6, 100.0, num_ps=2, num_workers=2, round_trip=0.0,
                              compute=0.0)
    assert even == pytest.approx(10e6 / frame_rate)


def test_whole_tables_on_several_tasks_pipeline_their_transfers():
    """Tasks of whole tables of their own: the larger direction plus one task's share of the
    smaller (the sum for one task, the larger direction alone as tasks grow)."""
    frame_rate = 100e6 / 8 * model.SEGMENT / model.FRAME
    for tasks, seconds in ((1, 10e6), (2, 8e6), (4, 7e6)):
        assert model.step_seconds(6e6, 4e6, 100.0, num_ps=tasks, num_workers=1, round_trip=0.0,
                                  compute=0.0, independent_tasks=tasks) == pytest.approx(
                                      seconds / frame_rate)


def test_whole_tables_count_as_the_busiest_tasks_share():
    """Tables whole on tasks count as equal tasks by the busiest one's share: 4 tables on 2 or 4
    tasks as 2 or 4, 3 tables on 2 tasks as 1.5 (one task holds 2 of 3), more tasks than tables
    as the tables."""
    assert model.whole_table_tasks(4, 2) == 2
    assert model.whole_table_tasks(4, 4) == 4
    assert model.whole_table_tasks(3, 2) == 1.5
    assert model.whole_table_tasks(2, 4) == 2
