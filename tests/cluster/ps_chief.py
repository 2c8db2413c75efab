"""The chief of the loopback-cluster tests (tests/cluster/test_parameter_server.py), run as a
script:

    TF_CONFIG=... python tests/cluster/ps_chief.py OUTPUT_DIR SCENARIO [ARGUMENT]

It connects to the cluster of TF_CONFIG (ps and worker tasks running `python -m
tf_embedding.server`) through `ParameterServerStrategy` + `ClusterCoordinator`, runs one scenario
and writes what it saw to OUTPUT_DIR, where the test compares it with one-process runs:

* `train`: the loop of tests/helpers/sharded_training.py (squared loss, a callable learning
  rate) for every optimizer with the rows traffic, two with the partial traffic and one with
  partition_strategy='mod', and one with every table whole on one PS task (`RUNS`), one step
  per `schedule(...).fetch()`: `run_file(...)` (each step's activations as
  `step<k>/<feature>`, then the tables and slots as `<table>/<slot>`), and the Adagrad rows
  runs' checkpoints `cluster_<partition>/ckpt`.
* `restore CHECKPOINT`: restores a one-process checkpoint before `build()` (2 blocks, one per
  PS) and after it (4 blocks over the 2 PS): `restored_2.npz`, `restored_4.npz`.
* `misuse`: the errors of calls that break the one-function rule: `errors.json`.
* `build`: the error of `build()` (null if none): `build.json`.
* `two_workers` (a cluster of 2 workers): Adagrad steps with the batches passed as arguments,
  first one `schedule(...).fetch()` at a time (`serialized.npz`, as `train` writes), then all
  scheduled at once and joined (`concurrent.npz`, and its checkpoint `concurrent/ckpt`).
  It also writes the error of building a dynamic table there: `dynamic_two_workers.json`.
* `dynamic`: Adagrad steps of a dynamic table (tests/helpers/dynamic_training.py, 2 blocks,
  one per PS; its index and pool with the first) with admission after 2 lookups and eviction
  by age: each step's activations, the table, its slot and the index's statistics, `dynamic.npz`.
* `dynamic_restore CHECKPOINT`: that run's one-process checkpoint of step CHECKPOINT_STEP (one
  block of capacity ROOMY) restored before build onto the 2 PS tasks' blocks (rows moving with
  their keys), then trained on: each step's activations and the statistics,
  `dynamic_restore.npz`.
* `keras_fit` (with TF_USE_LEGACY_KERAS=1): tf_keras `model.fit` of the model of
  tests/helpers/keras_layer.py over `tf_embedding.keras.TPUEmbedding`: the engine's tables and
  slots, `keras.npz`.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

import tf_embedding
from tf_embedding.sharded import parameter_server

# Run as a script, this file's directory is on sys.path; its helpers are in tests/.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
from helpers import dynamic_training
from helpers import sharded_training as steps_lib
from helpers.sharded import TABLES, feature_config, variable_values

NUM_STEPS = 3
# (optimizer, traffic of every table, partition strategy, placement) of the `train` scenario:
# placement "blocks" splits every table over every device, "tables" puts each table whole on
# one device (`placed_tables`).
RUNS = ([(name, "rows", "div", "blocks") for name in steps_lib.OPTIMIZERS]
        + [("adagrad", "partial", "div", "blocks"), ("adam", "partial", "div", "blocks"),
           ("adagrad", "rows", "mod", "blocks"), ("adagrad", "partial", "div", "tables")])


def run_file(name: str, traffic: str, partition_strategy: str, placement: str) -> str:
    """The file a `train` run writes."""
    suffix = "" if placement == "blocks" else f"_{placement}"
    return f"train_{name}_{traffic}_{partition_strategy}{suffix}.npz"


def placed_tables(placement: str, devices: list[str]) -> dict[str, list[str]] | None:
    """`table_devices` for `placement` over `devices`: None (the default, every table on every
    device) for "blocks", table i whole on devices[i % len(devices)] for "tables"."""
    if placement == "blocks":
        return None
    return {table: [devices[i % len(devices)]] for i, table in enumerate(TABLES)}


def connect() -> tuple[tf.distribute.Strategy, tf.distribute.coordinator.ClusterCoordinator]:
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    return strategy, tf.distribute.coordinator.ClusterCoordinator(strategy)


def save_values(path: str, emb, extra: dict[str, np.ndarray] | None = None) -> None:
    arrays = dict(extra or {})
    for table, slots in variable_values(emb).items():
        arrays.update({f"{table}/{slot}": value for slot, value in slots.items()})
    np.savez(path, **arrays)


def training_data() -> tuple[list, list]:
    """The `train` scenario's (samples, targets) of each step."""
    return steps_lib.make_samples(NUM_STEPS, 0), steps_lib.make_targets(NUM_STEPS, 1)


def input_kind(optimizer: str) -> str:
    """Sparse or ragged inputs, alternating over the optimizers."""
    return ("sparse", "ragged")[list(steps_lib.OPTIMIZERS).index(optimizer) % 2]


def table_traffic(traffic: str) -> dict[str, str]:
    return {table: traffic for table in TABLES}


def train(output: str) -> None:
    strategy, coordinator = connect()
    samples, targets = training_data()
    ps = list(parameter_server.ps_devices(strategy))
    for name, traffic, partition_strategy, placement in RUNS:
        kind = input_kind(name)
        with strategy.scope():
            counter = tf.Variable(0.0)
            optimizer = steps_lib.OPTIMIZERS[name](lambda counter=counter: 0.1 / (1.0 + counter))
            emb = tf_embedding.TPUEmbedding(feature_config(), optimizer,
                                            traffic=table_traffic(traffic),
                                            partition_strategy=partition_strategy,
                                            table_devices=placed_tables(placement, ps))
        iterator = iter(coordinator.create_per_worker_dataset(
            lambda kind=kind: steps_lib.make_dataset(samples, targets, kind)))
        training_step = steps_lib.make_training_step(strategy, emb, counter)
        activations = {}
        for step in range(NUM_STEPS):
            result = coordinator.schedule(training_step, args=(iterator,)).fetch()
            activations.update({f"step{step}/{feature}": value
                                for feature, value in result.items()})
        save_values(os.path.join(output, run_file(name, traffic, partition_strategy, placement)),
                    emb, activations)
        if (name, traffic, placement) == ("adagrad", "rows", "blocks"):
            tf.train.Checkpoint(embedding=emb).write(
                os.path.join(output, f"cluster_{partition_strategy}", "ckpt"))


def restore(output: str, checkpoint: str) -> None:
    strategy, _ = connect()
    ps = list(parameter_server.ps_devices(strategy))
    for blocks, devices, before_build in ((2, None, True), (4, ps + ps, False)):
        with strategy.scope():
            emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1),
                                            table_devices=devices)
        if not before_build:
            emb.build()
        status = tf.train.Checkpoint(embedding=emb).read(checkpoint)
        emb.build()
        status.assert_consumed()
        placement = {f"{table}/{slot}/devices": np.array([block.device for block in variable])
                     for table, slots in emb.table_variables().items()
                     for slot, variable in slots.items()}
        save_values(os.path.join(output, f"restored_{blocks}.npz"), emb, placement)


def misuse(output: str) -> None:
    """Each misuse's exception type and message (tracing happens in `schedule`); null for the
    pipelined step, which must run."""
    strategy, coordinator = connect()
    features = {"watched": tf.ragged.constant([[0, 1], [2]], dtype=tf.int64)}

    def make(**kwargs):
        with strategy.scope():
            table = tf_embedding.TableConfig(vocabulary_size=4, dim=2, name="video")
            return tf_embedding.TPUEmbedding(
                {"watched": tf_embedding.FeatureConfig(table=table)}, tf_embedding.SGD(0.1),
                **kwargs)

    shapes = {"watched": tf.TensorShape([2, None])}
    emb, pipelined = make(), make(pipeline_execution_with_tensor_core=True)
    emb.build(per_replica_input_shapes=shapes)
    pipelined.build(per_replica_input_shapes=shapes)

    @tf.function
    def enqueue_twice():
        emb.enqueue(features)
        emb.enqueue(features)

    @tf.function
    def pipelined_step():
        pipelined.enqueue(features)
        strategy.run(lambda: pipelined.apply_gradients(
            {"watched": pipelined.dequeue()["watched"]}))

    @tf.function
    def enqueue_only():
        emb.enqueue(features)

    @tf.function
    def dequeue_only():
        return strategy.run(emb.dequeue)

    @tf.function
    def apply_without_dequeue():
        emb.enqueue(features)
        strategy.run(lambda: emb.apply_gradients({"watched": tf.ones([2, 2])}))

    @tf.function
    def apply_after_inference():
        emb.enqueue(features, training=False)

        def step():
            emb.dequeue()
            emb.apply_gradients({"watched": tf.ones([2, 2])})

        strategy.run(step)

    cases = {
        "eager enqueue": lambda: emb.enqueue(features),
        "dequeue in another function": lambda: (
            coordinator.schedule(enqueue_only).fetch(),
            coordinator.schedule(dequeue_only).fetch()),
        "enqueue twice": lambda: coordinator.schedule(enqueue_twice).fetch(),
        "pipelined step": lambda: coordinator.schedule(pipelined_step).fetch(),
        "apply without dequeue": lambda: coordinator.schedule(apply_without_dequeue).fetch(),
        "apply after inference": lambda: coordinator.schedule(apply_after_inference).fetch(),
        "table device not a PS": lambda: make(table_devices=["/job:worker/task:0"]),
        "profile_data_directory": lambda: make(profile_data_directory=output),
    }
    errors = {}
    for case, run in cases.items():
        try:
            run()
            errors[case] = None
        except Exception as error:  # pylint: disable=broad-except
            errors[case] = [type(error).__name__, str(error)]
    with open(os.path.join(output, "errors.json"), "w") as file:
        json.dump(errors, file)


def step_with_arguments(strategy, emb):
    """A training step taking its batch as arguments, so that any worker can run it."""
    replica_step = steps_lib.squared_loss_step(emb)

    @tf.function
    def training_step(features, weights, targets):
        emb.enqueue(features, weights=steps_lib.all_weights(weights), training=True)
        return strategy.run(replica_step, args=(targets,))

    return training_step


def argument_batches() -> list[tuple]:
    """The `two_workers` scenario's batches: (features, weights, targets) of each step."""
    samples, targets = training_data()
    return list(steps_lib.make_dataset(samples, targets, "sparse"))


def two_workers(output: str) -> None:
    strategy, coordinator = connect()
    batches = argument_batches()
    for run in ("serialized", "concurrent"):
        with strategy.scope():
            emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1))
        training_step = step_with_arguments(strategy, emb)
        activations = {}
        if run == "serialized":
            for step, batch in enumerate(batches):
                result = coordinator.schedule(training_step, args=batch).fetch()
                activations.update({f"step{step}/{feature}": value
                                    for feature, value in result.items()})
        else:
            for batch in batches * 2:
                coordinator.schedule(training_step, args=batch)
            coordinator.join()
            tf.train.Checkpoint(embedding=emb).write(os.path.join(output, run, "ckpt"))
        save_values(os.path.join(output, f"{run}.npz"), emb, activations)
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(dynamic_training.feature_config(),
                                        tf_embedding.Adagrad(0.1))
    write_build_error(emb, ValueError, os.path.join(output, "dynamic_two_workers.json"))


def dynamic(output: str) -> None:
    strategy, coordinator = connect()
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(dynamic_training.feature_config(),
                                        tf_embedding.Adagrad(0.1))
    training_step = dynamic_training.training_step(strategy, emb)
    activations = {f"step{step}": coordinator.schedule(training_step, args=batch).fetch()[
                       "clicked"] for step, batch in enumerate(dynamic_training.batches())}
    statistics = emb.dynamic_statistics()["items"]
    save_values(os.path.join(output, "dynamic.npz"), emb,
                {**activations, "statistics": np.array(list(statistics.values()))})


def dynamic_restore(output: str, checkpoint: str) -> None:
    strategy, coordinator = connect()
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(
            dynamic_training.feature_config(capacity=dynamic_training.ROOMY),
            tf_embedding.Adagrad(0.1))
    tf.train.Checkpoint(embedding=emb).read(checkpoint)
    emb.build()
    training_step = dynamic_training.training_step(strategy, emb)
    batches = dynamic_training.batches()
    activations = {f"step{step}": coordinator.schedule(training_step, args=batches[step]).fetch()[
                       "clicked"]
                   for step in range(dynamic_training.CHECKPOINT_STEP, dynamic_training.STEPS)}
    statistics = emb.dynamic_statistics()["items"]
    np.savez(os.path.join(output, "dynamic_restore.npz"),
             statistics=np.array(list(statistics.values())), **activations)


def keras_fit_data() -> tuple[list, np.ndarray]:
    """The `keras_fit` scenario's (steps of samples, labels)."""
    from helpers import keras_layer  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(3)
    steps = keras_layer.make_samples(rng, 3)
    return steps, rng.uniform(-1, 1, (3 * keras_layer.BATCH, 1)).astype(np.float32)


def keras_fit(output: str) -> None:
    from helpers import keras_layer  # pylint: disable=import-outside-toplevel
    from tf_embedding import keras as embedding_keras  # pylint: disable=import-outside-toplevel
    assert tf.keras.__name__.startswith("tf_keras"), "set TF_USE_LEGACY_KERAS=1"
    strategy, _ = connect()
    steps, labels = keras_fit_data()
    with strategy.scope():
        layer = embedding_keras.TPUEmbedding(keras_layer.make_feature_config(),
                                             tf_embedding.Adagrad(0.1))
        model = keras_layer.SumModel(layer)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    # model.fit makes its own ClusterCoordinator; one worker takes the steps in order.
    model.fit(tf.keras.utils.experimental.DatasetCreator(
        lambda context: keras_layer.fit_dataset(steps, labels, "sparse")),
        epochs=1, steps_per_epoch=len(steps), verbose=0)
    save_values(os.path.join(output, "keras.npz"), layer)


def write_build_error(emb, error_type: type, path: str) -> None:
    """Writes the message of the `error_type` that `emb.build()` raises (null if none)."""
    try:
        emb.build()
        error = None
    except error_type as raised:
        error = str(raised)
    with open(path, "w") as file:
        json.dump(error, file)


def build(output: str) -> None:
    strategy, _ = connect()
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(0.1))
    write_build_error(emb, RuntimeError, os.path.join(output, "build.json"))


if __name__ == "__main__":
    output_dir, scenario, *arguments = sys.argv[1:]
    {"train": train, "restore": restore, "misuse": misuse, "build": build,
     "keras_fit": keras_fit, "two_workers": two_workers,
     "dynamic": dynamic, "dynamic_restore": dynamic_restore}[scenario](output_dir, *arguments)
