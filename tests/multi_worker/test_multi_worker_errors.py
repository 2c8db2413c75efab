"""Bad input on one worker of a multi-worker TPUEmbedding: an id past its table, or a malformed
ragged batch or weights, in one worker's batch fails that step on every worker at once with one
InvalidArgumentError naming the table and the feature, no table changes, and the workers train
on afterwards, as one process that skips the step does."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import multi_worker
from helpers.multi_worker_training import bad_id_edit, train, whole_tables

pytestmark = pytest.mark.cluster

CASE = "adagrad:sparse:div:3"
MESSAGE = "Table video, feature watched: an id is out of range for vocabulary size 13"


def test_an_id_past_its_table_on_one_worker_fails_the_step_everywhere(tmp_path):
    results = multi_worker.run_workers(2, [multi_worker.script("mw_bad_id.py"), str(tmp_path),
                                           CASE, "1", "1"])
    multi_worker.assert_succeeded(results)
    for result in results:
        failures = [line for line in result.stdout.splitlines() if line.startswith("step ")]
        assert len(failures) == 1 and failures[0].startswith(
            "step 1 failed: InvalidArgumentError: "), result.stdout[-3000:]
        assert MESSAGE in failures[0]

    embedding, steps = train(tf.distribute.get_strategy(), CASE, edit_steps=bad_id_edit(1, 1, 2))
    assert isinstance(steps[1], tf.errors.InvalidArgumentError)
    expected = whole_tables(embedding)
    saved = np.load(tmp_path / "tables.npz")
    for key, value in expected.items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)


@pytest.mark.parametrize("kind, problem", [
    ("row_splits", "row_splits must be non-decreasing"),
    ("weights", "weights have 2 elements but there are 3 ids"),
])
def test_a_malformed_batch_on_one_worker_fails_the_step_everywhere_at_once(kind, problem):
    # Before, the malformed worker failed in its conversion and its peer waited in the step's
    # first exchange until the collective timeout (120 s here, 600 s by default).
    results = multi_worker.run_workers(2, [multi_worker.script("mw_bad_batch.py"), kind])
    multi_worker.assert_succeeded(results)
    sums = set()
    for rank, result in enumerate(results):
        lines = result.stdout.splitlines()
        steps = [line for line in lines if line.startswith("step ")]
        assert [line.split()[2] for line in steps] == ["ok", "failed:", "ok"], lines[-6:]
        assert steps[1].startswith("step 1 failed: InvalidArgumentError")
        assert "Table video, feature watched: the batch of a worker is malformed" in steps[1]
        assert "[0 1]" in steps[1]  # worker 1's batch, by rank
        assert (problem in steps[1]) == (rank == 1)  # the malformed worker's own error
        assert float(steps[1].rsplit("(", 1)[1].split()[0]) < 60
        sums.add([line for line in lines if line.startswith("table sum")][0])
    assert len(sums) == 1
