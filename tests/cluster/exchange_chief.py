"""The chief of tests/cluster/test_task_exchange_cluster.py, run as a script:

    TF_CONFIG=... python tests/cluster/exchange_chief.py OUTPUT_DIR SCENARIO

* `crossings`: for the rows and the partial traffic, the tensors of one training step that cross
  from one task to another, counted per (from, to) task in the step function's graph and written
  to `crossings.json` after the step ran.
* `steps_per_function`: Adagrad steps two per scheduled function (a Python loop over two batches
  passed as arguments), one `schedule(...).fetch()` at a time: each step's activations and the
  final tables and slots, `steps_per_function.npz` (as tests/cluster/ps_chief.py's `train`).
"""

import collections
import json
import os
import sys

import tensorflow as tf

import tf_embedding

# Run as a script, this file's directory is on sys.path; its helpers are in tests/.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
import ps_chief
from helpers import sharded_training as steps_lib
from helpers.sharded import feature_config

STEPS_PER_FUNCTION = 2


def task_of(device: str) -> str:
    """"ps:0", "worker:0", ...: the task of an op's device; ops without one run on the worker
    that runs the step."""
    spec = tf.DeviceSpec.from_string(device)
    return f"{spec.job}:{spec.task or 0}" if spec.job else "worker:0"


def crossing_tensors(graph: tf.Graph) -> dict[str, int]:
    """{"from -> to": how many distinct tensors an op of task `to` reads from task `from`}: what
    TF's partitioning sends with one Send/Recv pair each."""
    crossings = set()
    for op in graph.get_operations():
        for tensor in op.inputs:
            source, destination = task_of(tensor.op.device), task_of(op.device)
            if source != destination:
                crossings.add((tensor.name, source, destination))
    counts = collections.Counter(f"{source} -> {destination}"
                                 for _, source, destination in crossings)
    return dict(counts)


def crossings(output: str) -> None:
    strategy, coordinator = ps_chief.connect()
    batch = ps_chief.argument_batches()[0]
    seen = {}
    for traffic in ("rows", "partial"):
        with strategy.scope():
            emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1),
                                            traffic=ps_chief.table_traffic(traffic))
        training_step = ps_chief.step_with_arguments(strategy, emb)
        coordinator.schedule(training_step, args=batch).fetch()
        seen[traffic] = crossing_tensors(training_step.get_concrete_function(*batch).graph)
    with open(os.path.join(output, "crossings.json"), "w", encoding="utf-8") as file:
        json.dump(seen, file)


def steps_per_function(output: str) -> None:
    strategy, coordinator = ps_chief.connect()
    with strategy.scope():
        emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.Adagrad(0.1))
    replica_step = steps_lib.squared_loss_step(emb)

    @tf.function
    def training_steps(batches):
        results = []
        for features, weights, targets in batches:  # unrolled: one step after the other
            emb.enqueue(features, weights=steps_lib.all_weights(weights), training=True)
            results.append(strategy.run(replica_step, args=(targets,)))
        return results

    batches = ps_chief.argument_batches() * STEPS_PER_FUNCTION
    activations = {}
    for first in range(0, len(batches), STEPS_PER_FUNCTION):
        group = tuple(batches[first:first + STEPS_PER_FUNCTION])
        results = coordinator.schedule(training_steps, args=(group,)).fetch()
        for offset, result in enumerate(results):
            activations.update({f"step{first + offset}/{feature}": value
                                for feature, value in result.items()})
    ps_chief.save_values(os.path.join(output, "steps_per_function.npz"), emb, activations)


if __name__ == "__main__":
    output_dir, scenario = sys.argv[1:]
    {"crossings": crossings, "steps_per_function": steps_per_function}[scenario](output_dir)
