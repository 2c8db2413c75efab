"""Bad input on one worker of a multi-worker TPUEmbedding: an id past its table in one worker's
batch fails that step on every worker with one InvalidArgumentError naming the table and the
feature, no table changes, and the workers train on afterwards, as one process that skips the
step does."""

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
