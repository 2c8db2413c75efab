"""TPUEmbedding under ParameterServerStrategy on a loopback cluster: 2 PS and 1 worker running
`python -m tf_embedding.server`, and a chief (tests/cluster/ps_chief.py) in a subprocess of its own,
since connecting to a cluster rewires the process's eager context, which the other tests share.

One cluster serves the module; each chief run writes what it saw to a directory, compared here
with one-process runs: bit for bit against the same block count placed by `table_devices`, and
against the numpy reference of test_sharded.py.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

import ps_chief
from helpers import dynamic_training, keras_layer
from helpers import sharded_training as steps_lib
from helpers.cluster import PLAIN_SERVER, SERVER, loopback_cluster, run_chief
from helpers.sharded import STRATEGIES, TABLES, assert_same_values, feature_config
from helpers.sharded import randomize, sharded, variable_values

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


stock = tf.tpu.experimental.embedding
NUM_PS = 2


def test_a_ps_task_without_the_op_library_is_named_at_build(tmp_path):
    # First in the module, before the module's cluster starts: 2 cores run one cluster at a time.
    with loopback_cluster(num_ps=1, num_workers=1, command=lambda task_type, _: (
            PLAIN_SERVER if task_type == "ps" else SERVER)) as plain_ps:
        chief(plain_ps, tmp_path, "build")
    error = json.loads((tmp_path / "build.json").read_text())
    assert error.startswith("The task of /job:ps/replica:0/task:0/device:CPU:0 cannot run "
                            "tf_embedding's ops"), error
    assert "Start every ps and worker task with `python -m tf_embedding.server`" in error
    assert "TfeEmbeddingLookupDense" in error  # TF's own message follows


def test_two_workers_serialized_match_one_process_and_concurrent_ones_stay_valid(tmp_path):
    # Before the module's cluster starts, as above.
    with loopback_cluster(num_ps=1, num_workers=2) as two_workers:
        chief(two_workers, tmp_path, "two_workers")

    # One step at a time: whichever worker runs it, the bits of one process (1 block).
    emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1))
    training_step = ps_chief.step_with_arguments(tf.distribute.get_strategy(), emb)
    serialized = np.load(tmp_path / "serialized.npz")
    for step, batch in enumerate(ps_chief.argument_batches()):
        for feature, value in training_step(*batch).items():
            np.testing.assert_array_equal(serialized[f"step{step}/{feature}"], value.numpy())
    for table, slots in variable_values(emb).items():
        for slot, value in slots.items():
            np.testing.assert_array_equal(serialized[f"{table}/{slot}"], value)

    # Concurrent steps interleave (not reproducible), but the tables stay finite, moved, and
    # their checkpoint restores into one process as they were.
    concurrent = np.load(tmp_path / "concurrent.npz")
    restored = sharded("default")
    status = tf.train.Checkpoint(embedding=restored).read(str(tmp_path / "concurrent" / "ckpt"))
    restored.build()
    status.assert_consumed()
    for table, slots in variable_values(restored).items():
        assert np.isfinite(concurrent[f"{table}/parameters"]).all()
        assert not np.array_equal(concurrent[f"{table}/accumulators"],
                                  np.full_like(slots["accumulators"], 0.1))
        for slot, value in slots.items():
            np.testing.assert_array_equal(value, concurrent[f"{table}/{slot}"])


    # Several asynchronous workers cannot keep a dynamic table's keys and gradients together.
    error = json.loads((tmp_path / "dynamic_two_workers.json").read_text())
    assert error is not None and error.startswith("Table items is dynamic"), error
    assert "has 2 workers" in error


@pytest.fixture(scope="module")
def cluster():
    with loopback_cluster(num_ps=NUM_PS, num_workers=1) as spec:
        yield spec


def chief(cluster, output, scenario: str, *arguments: str, **environ: str) -> None:
    result = run_chief([ps_chief.__file__, str(output), scenario, *arguments], cluster,
                       environ=environ)
    assert result.returncode == 0, result.stderr[-20000:]


@pytest.fixture(scope="module")
def cluster_training(cluster, tmp_path_factory):
    """The `train` scenario's output directory."""
    output = tmp_path_factory.mktemp("cluster_training")
    chief(cluster, output, "train")
    return output


def one_process_training(name: str, traffic: str, partition_strategy: str, placement: str):
    """The chief's `train` loop for optimizer `name` in this process, with the cluster's blocks
    (on /cpu:i for PS task i): (initial slots by table, per-step activations, final tables and
    slots)."""
    devices = [f"/cpu:{i}" for i in range(NUM_PS)]
    counter = tf.Variable(0.0)
    optimizer = steps_lib.OPTIMIZERS[name](lambda: 0.1 / (1.0 + counter))
    emb = tf_embedding.TPUEmbedding(feature_config(), optimizer,
                                    table_devices=ps_chief.placed_tables(placement, devices)
                                    or devices,
                                    traffic=ps_chief.table_traffic(traffic),
                                    partition_strategy=partition_strategy)
    emb.build()
    initial_slots = {table: [slots[slot] for slot in optimizer.slot_names()]
                     for table, slots in variable_values(emb).items()}
    samples, targets = ps_chief.training_data()
    iterator = iter(steps_lib.make_dataset(samples, targets, ps_chief.input_kind(name)))
    training_step = steps_lib.make_training_step(tf.distribute.get_strategy(), emb, counter)
    activations = [{feature: value.numpy() for feature, value in training_step(iterator).items()}
                   for _ in samples]
    return optimizer, initial_slots, activations, variable_values(emb)


@pytest.mark.parametrize("name, traffic, partition_strategy, placement", ps_chief.RUNS)
def test_one_worker_trains_the_bits_of_one_process_and_the_numpy_rules(
        name, traffic, partition_strategy, placement, cluster_training):
    cluster = np.load(cluster_training / ps_chief.run_file(name, traffic, partition_strategy,
                                                           placement))
    optimizer, initial_slots, activations, values = one_process_training(
        name, traffic, partition_strategy, placement)
    for step, step_activations in enumerate(activations):
        for feature, value in step_activations.items():
            np.testing.assert_array_equal(cluster[f"step{step}/{feature}"], value,
                                          err_msg=f"step {step}, {feature}")
    for table, slots in values.items():
        for slot, value in slots.items():
            np.testing.assert_array_equal(cluster[f"{table}/{slot}"], value,
                                          err_msg=f"{table}/{slot}")

    # The same run against the TPU's rules in numpy (rows summed over the batch, one update).
    reference = steps_lib.Reference(optimizer, initial_slots)
    samples, targets = ps_chief.training_data()
    for step, (step_samples, step_targets) in enumerate(zip(samples, targets)):
        expected = reference.step([step_samples], [step_targets], 0.1 / (1.0 + step))[0]
        for feature, value in expected.items():
            steps_lib.assert_close(cluster[f"step{step}/{feature}"], value, err_msg=feature)
    for table, expected in reference.tables.items():
        steps_lib.assert_close(cluster[f"{table}/parameters"], expected, rtol=1e-4, atol=1e-5,
                               err_msg=table)


def test_a_dynamic_table_on_one_worker_trains_the_bits_of_one_process(cluster, tmp_path):
    """Its index and pool on the first block's PS task, the other block's rows reset from
    there: each step's activations, the table, its slot and the statistics are one process's
    with the same 2 blocks."""
    chief(cluster, tmp_path, "dynamic")
    actual = np.load(tmp_path / "dynamic.npz")
    emb = tf_embedding.TPUEmbedding(dynamic_training.feature_config(),
                                    tf_embedding.Adagrad(0.1),
                                    table_devices=[f"/cpu:{i}" for i in range(NUM_PS)])
    training_step = dynamic_training.training_step(tf.distribute.get_strategy(), emb)
    for step, batch in enumerate(dynamic_training.batches()):
        np.testing.assert_array_equal(actual[f"step{step}"],
                                      training_step(*batch)["clicked"].numpy(),
                                      err_msg=f"step {step}")
    for slot, value in variable_values(emb)["items"].items():
        np.testing.assert_array_equal(actual[f"items/{slot}"], value, err_msg=slot)
    statistics = emb.dynamic_statistics()["items"]
    np.testing.assert_array_equal(actual["statistics"], list(statistics.values()))
    assert statistics["admitted"] > 0 and statistics["evicted"] > 0


def test_a_dynamic_tables_one_block_checkpoint_restores_onto_the_ps_blocks(cluster, tmp_path):
    """Restored before build onto 2 blocks (one per PS task), each key's rows move with it, and
    with a capacity no block fills the cluster trains on as the uninterrupted one-process run."""
    strategy = tf.distribute.get_strategy()
    emb = dynamic_training.embedding_for(strategy, "div", capacity=dynamic_training.ROOMY)
    activations = dynamic_training.train(strategy, emb, checkpoint_path=str(tmp_path / "ckpt"))
    chief(cluster, tmp_path, "dynamic_restore", str(tmp_path / "ckpt"))
    actual = np.load(tmp_path / "dynamic_restore.npz")
    for step in range(dynamic_training.CHECKPOINT_STEP, dynamic_training.STEPS):
        np.testing.assert_array_equal(actual[f"step{step}"], activations[step],
                                      err_msg=f"step {step}")
    np.testing.assert_array_equal(actual["statistics"],
                                  list(emb.dynamic_statistics()["items"].values()))


@pytest.mark.parametrize("partition_strategy", ["div", "mod"])
def test_a_cluster_checkpoint_restores_into_one_process_and_stock_serving(partition_strategy,
                                                                          cluster_training):
    # Whichever layout the cluster's blocks had, the one-process readers are 'div'.
    path = str(cluster_training / f"cluster_{partition_strategy}" / "ckpt")
    trained = np.load(cluster_training / ps_chief.run_file("adagrad", "rows", partition_strategy,
                                                           "blocks"))
    expected = {table: {slot: trained[f"{table}/{slot}"] for slot in ("parameters",
                                                                     "accumulators")}
                for table in TABLES}
    for strategy in STRATEGIES:  # 1, 2 and 4 blocks
        emb = sharded(strategy)
        status = tf.train.Checkpoint(embedding=emb).read(path)
        emb.build()  # each block reads its slice as it is created
        status.assert_consumed()
        assert_same_values(variable_values(emb), expected)
    serving = stock.TPUEmbeddingForServing(feature_config(stock), None)
    tf.train.Checkpoint(embedding=serving).read(path).expect_partial()
    for config, table in serving.embedding_tables.items():
        np.testing.assert_array_equal(table.numpy(), expected[config.name]["parameters"])


def test_a_one_process_checkpoint_restores_into_the_cluster(cluster, tmp_path):
    writer = sharded("default")
    expected = randomize(writer, seed=7)
    path = tf.train.Checkpoint(embedding=writer).write(str(tmp_path / "one_process" / "ckpt"))
    chief(cluster, tmp_path, "restore", path)
    for blocks in (2, 4):
        restored = np.load(tmp_path / f"restored_{blocks}.npz")
        for table, slots in expected.items():
            for slot, value in slots.items():
                np.testing.assert_array_equal(restored[f"{table}/{slot}"], value,
                                              err_msg=f"{blocks} blocks, {table}/{slot}")
                devices = [str(device) for device in restored[f"{table}/{slot}/devices"]]
                tasks = [device.split("/task:")[1][0] for device in devices]
                assert tasks == ["0", "1", "0", "1"][:min(blocks, len(value))], devices


def test_calls_spanning_functions_raise_clear_errors(cluster, tmp_path):
    chief(cluster, tmp_path, "misuse")
    errors = json.loads((tmp_path / "errors.json").read_text())
    one_function = "must be called in one tf.function scheduled with ClusterCoordinator.schedule"
    assert errors["eager enqueue"][0] == "RuntimeError"
    assert "enqueue() was called eagerly" in errors["eager enqueue"][1]
    assert one_function in errors["eager enqueue"][1]
    assert errors["dequeue in another function"][0] == "RuntimeError"
    assert ("dequeue() called without an enqueue() before it in the same function"
            in errors["dequeue in another function"][1])
    assert ("enqueue() called twice in one function without a dequeue() between them"
            in errors["enqueue twice"][1])
    assert errors["pipelined step"] is None
    assert "apply_gradients() called without a dequeue()" in errors["apply without dequeue"][1]
    assert "apply_gradients() called without a dequeue()" in errors["apply after inference"][1]
    assert errors["profile_data_directory"][0] == "ValueError"
    assert ("profile_data_directory is not supported under ParameterServerStrategy"
            in errors["profile_data_directory"][1])
    assert errors["table device not a PS"][0] == "ValueError"
    assert "is not a parameter-server device" in errors["table device not a PS"][1]


def test_table_devices_place_one_process_blocks():
    emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1),
                                    table_devices=["/cpu:1", "/cpu:0", "/cpu:1"])
    emb.build()
    video = emb.table_variables()["video"]["parameters"]
    assert [block.device.split("/")[-1] for block in video] == [
        "device:CPU:1", "device:CPU:0", "device:CPU:1"]
    assert [block.shape[0] for block in video] == [5, 4, 4]
    with pytest.raises(ValueError, match="table_devices must name at least one device"):
        tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1), table_devices=[])


def test_table_devices_by_table_place_whole_tables():
    emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1),
                                    table_devices={"video": ["/cpu:1"],
                                                   "user": ["/cpu:0", "/cpu:1"]})
    emb.build()
    devices = {config.name: [block.device.split("/")[-1] for block in table]
               for config, table in emb.embedding_tables.items()}
    # The tables not named get the default: the one replica device.
    assert devices == {"video": ["device:CPU:1"], "user": ["device:CPU:0", "device:CPU:1"],
                       "query": ["device:CPU:0"], "tiny": ["device:CPU:0"]}
    with pytest.raises(ValueError, match=r"names tables that do not exist: \['videos'\]"):
        tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1),
                                  table_devices={"videos": ["/cpu:0"]})
    with pytest.raises(ValueError, match="table_devices of table 'user' must name at least one"):
        tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1),
                                  table_devices={"user": []})


def test_the_keras_layer_trains_under_tf_keras_model_fit(cluster, tmp_path):
    chief(cluster, tmp_path, "keras_fit", TF_USE_LEGACY_KERAS="1")
    trained = np.load(tmp_path / "keras.npz")

    # The same fit replayed in numpy from the initial tables of a layer made here.
    optimizer = tf_embedding.Adagrad(0.1)
    layer = embedding_keras.TPUEmbedding(keras_layer.make_feature_config(), optimizer)
    model = keras_layer.SumModel(layer)
    steps, labels = ps_chief.keras_fit_data()
    model(keras_layer.inputs(steps[0], "sparse"))
    reference = keras_layer.expected_after_fit(layer, optimizer, steps, labels, model)
    for table, expected in reference.tables.items():
        np.testing.assert_allclose(trained[f"{table}/parameters"], expected, rtol=1e-5,
                                   atol=1e-6, err_msg=table)
        for slot, value in zip(optimizer.slot_names(), reference.slots[table]):
            np.testing.assert_allclose(trained[f"{table}/{slot}"], value, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{table}/{slot}")
