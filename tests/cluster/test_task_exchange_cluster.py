"""A step under ParameterServerStrategy sends each PS task one packet per direction
(tf_embedding/sharded/transports/task_packets.py), and a scheduled function of several steps trains the
bits of one process. The chief runs as a script (tests/cluster/exchange_chief.py) on a loopback
cluster of 2 PS and 1 worker."""

import json

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

import exchange_chief
import ps_chief
from helpers.cluster import loopback_cluster, run_chief
from helpers.sharded import feature_config, variable_values

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NUM_PS = 2


@pytest.fixture(scope="module")
def cluster():
    with loopback_cluster(num_ps=NUM_PS, num_workers=1) as spec:
        yield spec


def chief(cluster, output, scenario: str) -> None:
    result = run_chief([exchange_chief.__file__, str(output), scenario], cluster)
    assert result.returncode == 0, result.stderr[-20000:]


def test_a_step_sends_each_ps_task_one_tensor_per_direction(cluster, tmp_path):
    chief(cluster, tmp_path, "crossings")
    crossings = json.loads((tmp_path / "crossings.json").read_text())
    # Down: the lookups' packet, then the update's; up: the lookups' results. Four tables of
    # several features, each in blocks on both tasks.
    expected = {f"worker:0 -> ps:{task}": 2 for task in range(NUM_PS)}
    expected.update({f"ps:{task} -> worker:0": 1 for task in range(NUM_PS)})
    assert crossings == {"rows": expected, "partial": expected}


def test_two_steps_per_scheduled_function_train_the_bits_of_one_process(cluster, tmp_path):
    chief(cluster, tmp_path, "steps_per_function")
    cluster_run = np.load(tmp_path / "steps_per_function.npz")

    emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1),
                                    table_devices=[f"/cpu:{i}" for i in range(NUM_PS)])
    training_step = ps_chief.step_with_arguments(tf.distribute.get_strategy(), emb)
    batches = ps_chief.argument_batches() * exchange_chief.STEPS_PER_FUNCTION
    for step, batch in enumerate(batches):
        for feature, value in training_step(*batch).items():
            np.testing.assert_array_equal(cluster_run[f"step{step}/{feature}"], value.numpy())
    for table, slots in variable_values(emb).items():
        for slot, value in slots.items():
            np.testing.assert_array_equal(cluster_run[f"{table}/{slot}"], value)
