"""The multi-worker tests' training run: the TPU program shape (enqueue in the step function,
dequeue and apply_gradients in `strategy.run`) on tests/helpers/sharded.py's features, each
worker fed its slice of every global batch from `strategy.distribute_datasets_from_function`.
The tests run it in their own process (the default strategy, the whole global batch) and in
each worker of a loopback cluster (tests/multi_worker/mw_training.py)."""

from typing import Any, Callable

import numpy as np
import tensorflow as tf

import tf_embedding
from tf_embedding import sharding_plan

from helpers.sharded import FEATURES, GLOBAL_BATCH, TABLES, feature_config, make_samples
from helpers.sharded import to_inputs
from helpers.sharded_training import OPTIMIZERS, make_targets, make_training_step

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


def embedding_for(strategy: tf.distribute.Strategy, case: str,
                  counter: tf.Variable | None = None) -> tf_embedding.TPUEmbedding:
    """`case`'s TPUEmbedding (optimizer:kind:partition:steps, with ":pipelined" rows looked up
    at enqueue time), created under `strategy`; its learning rate decays with `counter`, if
    given."""
    optimizer_name, _, partition, _, *flags = case.split(":")
    learning_rate = (LEARNING_RATE if counter is None
                     else lambda: LEARNING_RATE / (1.0 + counter))
    # ":plan": on the workers, a mixed plan (one process, the oracle, has no second device).
    placement = ({"sharding_plan": mixed_plan(partition)}
                 if "plan" in flags and strategy.num_replicas_in_sync > 1
                 else {"partition_strategy": partition})
    with strategy.scope():
        return tf_embedding.TPUEmbedding(feature_config(), OPTIMIZERS[optimizer_name](
            learning_rate), pipeline_execution_with_tensor_core="pipelined" in flags,
            **placement)


def mixed_plan(partition: str) -> sharding_plan.ShardingPlan:
    """Two tables whole on the last and the first worker, the others row-wise."""
    return sharding_plan.ShardingPlan({
        "video": sharding_plan.TableSharding("table_wise", owner=1),
        "query": sharding_plan.TableSharding("table_wise", owner=0),
        "user": sharding_plan.TableSharding("row_wise", partition_strategy=partition),
        "tiny": sharding_plan.TableSharding("row_wise", partition_strategy=partition),
    })


def bad_id_edit(rank: int, step: int, size: int) -> Callable[[list], None]:
    """An `edit_steps` that gives worker `rank`'s first sample of `step` an id past table
    "video" in feature "watched" (of `size` workers; `size` 1: the global batch's sample)."""
    def edit(steps: list) -> None:
        vocabulary_size = TABLES[FEATURES["watched"].table].vocabulary_size
        steps[step]["watched"][rank * (GLOBAL_BATCH // size)] = [(vocabulary_size, 1.0)]
    return edit


def train(strategy: tf.distribute.Strategy, case: str, rank: int = 0, size: int = 1,
          edit_steps: Callable[[list], None] | None = None
          ) -> tuple[tf_embedding.TPUEmbedding, list[Any]]:
    """Trains `case` (optimizer:kind:partition:steps, with ":unbuilt" the TPU program of TF's
    documentation: no explicit `build`, the first enqueue builds with the batch dimension the
    distributed dataset has when traced) with this worker's slice of each global batch; returns
    the embedding and this worker's activations of every step (numpy dicts), or for a step that
    failed, its error. `edit_steps(steps)` may change the samples first."""
    _, kind, _, num_steps, *flags = case.split(":")
    num_steps = int(num_steps)
    counter = tf.Variable(0.0)  # outside the scope: a plain variable on every worker
    embedding = embedding_for(strategy, case, counter)
    steps, targets = make_samples(num_steps, SEED), make_targets(num_steps, SEED + 1)
    if edit_steps is not None:
        edit_steps(steps)
    per_worker = GLOBAL_BATCH // size
    if "unbuilt" not in flags:
        # A distributed dataset's batch dimension is unknown when traced: with this build the
        # shapes come from here, without it every batch is a partial one of any size.
        embedding.build(per_replica_batch_size=per_worker)
    dataset = worker_dataset(steps, targets, kind, rank * per_worker, (rank + 1) * per_worker)
    iterator = iter(strategy.distribute_datasets_from_function(
        lambda context: dataset,
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False)))
    training_step = make_training_step(strategy, embedding, counter)

    activations: list[Any] = []
    for _ in range(num_steps):
        try:
            result = training_step(iterator)
        except tf.errors.InvalidArgumentError as error:
            activations.append(error)
            continue
        activations.append({name: strategy.experimental_local_results(value)[0].numpy()
                            for name, value in result.items()})
    return embedding, activations


def whole_tables(embedding: tf_embedding.TPUEmbedding) -> dict[str, np.ndarray]:
    """Every table and slot as "<table>/<slot>": whole arrays, gathered from the workers under
    MultiWorkerMirroredStrategy (a collective: every worker calls it)."""
    return {f"{table}/{slot}": (variable.full_value() if hasattr(variable, "full_value")
                                else tf.convert_to_tensor(variable)).numpy()
            for table, slots in embedding.table_variables().items()
            for slot, variable in slots.items()}


def save_whole_tables(embedding: tf_embedding.TPUEmbedding, rank: int, path: str) -> None:
    """`whole_tables`, written to the .npz `path` by rank 0 (every rank takes part in the
    gather)."""
    tables = whole_tables(embedding)
    if rank == 0:
        np.savez(path, **tables)
