"""The multi-worker tests' training run: the TPU program shape (enqueue in the step function,
dequeue and apply_gradients in `strategy.run`) on tests/helpers/sharded.py's features, each
worker fed its slice of every global batch from `strategy.distribute_datasets_from_function`.

Imported by the tests for the one-process run (the default strategy, the whole global batch),
and run as a script by each worker of a loopback MWMS cluster (TF_CONFIG set):

    python mw_training.py OUT_DIR CASE [CASE ...]     (CASE: optimizer:kind:partition:steps)

which writes, per case, each worker's activations of every step (`<case>.rank<r>.npz`) and,
from rank 0, every table and slot whole (`<case>.npz`; all ranks take part in the gather).
"""

import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tf_embedding  # pylint: disable=wrong-import-position
from tf_embedding.sharded.multi_worker.group import group_of  # noqa: E402

from helpers.sharded import FEATURES, GLOBAL_BATCH, feature_config  # noqa: E402
from helpers.sharded import make_samples, to_inputs  # noqa: E402
from helpers.sharded_training import OPTIMIZERS, all_weights, make_targets  # noqa: E402
from helpers.sharded_training import squared_loss_step  # noqa: E402

SEED = 3
LEARNING_RATE = 0.1


def worker_dataset(steps: list, targets: list, kind: str, start: int,
                   stop: int) -> tf.data.Dataset:
    """Samples [start, stop) of every step's global batch, one batch per step."""
    samples = {name: [s for step in steps for s in step[name][start:stop]] for name in FEATURES}
    features, weights = to_inputs(samples, kind, 0, len(steps) * (stop - start))
    weights = {name: w for name, w in weights.items() if w is not None}
    all_targets = {name: np.concatenate([t[name][start:stop] for t in targets])
                   for name in FEATURES}
    return tf.data.Dataset.from_tensor_slices((features, weights, all_targets)).batch(
        stop - start, drop_remainder=True)


def train(strategy: tf.distribute.Strategy, case: str, rank: int = 0, size: int = 1
          ) -> tuple[tf_embedding.TPUEmbedding, list[dict[str, np.ndarray]]]:
    """Trains `case` (optimizer:kind:partition:steps) with this worker's slice of each global
    batch; returns the embedding and this worker's activations of every step."""
    optimizer_name, kind, partition, num_steps = case.split(":")
    num_steps = int(num_steps)
    counter = tf.Variable(0.0)  # outside the scope: a plain variable on every worker
    optimizer = OPTIMIZERS[optimizer_name](lambda: LEARNING_RATE / (1.0 + counter))
    with strategy.scope():
        embedding = tf_embedding.TPUEmbedding(feature_config(), optimizer,
                                              partition_strategy=partition)
    steps, targets = make_samples(num_steps, SEED), make_targets(num_steps, SEED + 1)
    per_worker = GLOBAL_BATCH // size
    # A distributed dataset's batch dimension is unknown when traced: the shapes come from here.
    embedding.build(per_replica_batch_size=per_worker)
    dataset = worker_dataset(steps, targets, kind, rank * per_worker, (rank + 1) * per_worker)
    iterator = iter(strategy.distribute_datasets_from_function(
        lambda context: dataset,
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False)))
    replica_step = squared_loss_step(embedding)

    @tf.function
    def training_step(iterator):
        features, weights, step_targets = next(iterator)
        embedding.enqueue(features, weights=all_weights(weights), training=True)
        activations = strategy.run(replica_step, args=(step_targets,))
        counter.assign_add(1.0)
        return activations

    activations = []
    for _ in range(num_steps):
        result = training_step(iterator)
        activations.append({name: strategy.experimental_local_results(value)[0].numpy()
                            for name, value in result.items()})
    return embedding, activations


def main(out_dir: str, cases: list[str]) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    for case in cases:
        embedding, activations = train(strategy, case, workers.rank, workers.size)
        name = case.replace(":", "_")
        np.savez(os.path.join(out_dir, f"{name}.rank{workers.rank}.npz"),
                 **{f"{step}/{feature}": value for step, values in enumerate(activations)
                    for feature, value in values.items()})
        tables = {f"{table}/{slot}": variable.full_value().numpy()
                  for table, slots in embedding.table_variables().items()
                  for slot, variable in slots.items()}
        if workers.rank == 0:
            np.savez(os.path.join(out_dir, f"{name}.npz"), **tables)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
