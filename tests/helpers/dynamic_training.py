"""A dynamic table's training run for the cluster and restore tests: feature `clicked` of a
dynamic table `items` (capacity 12 unless told; admission after 2 lookups, eviction after 3
steps, an initializer pool of 5 rows) trained by Adagrad with a squared loss, on 8 global
batches of 6 samples whose keys are scattered over int64 and Zipf-like, so keys are admitted,
evicted and refused. The parameter-server tests pass each batch as arguments (`batches`); the
others feed each worker its slice of every global batch from a distributed dataset (`train`),
in a loopback cluster's workers (tests/multi_worker/mw_dynamic.py) and in one process."""

from typing import Any, Callable

import numpy as np
import tensorflow as tf

import tf_embedding
from tf_embedding import sharding_plan

from helpers.dynamic_index_model import zipf_key_samples
from helpers.sharded_training import squared_loss_step

GLOBAL_BATCH = 6
STEPS = 8
DIM = 3
# The step after which `train` writes a checkpoint, if asked to.
CHECKPOINT_STEP = 4
# A capacity no block of up to 4 fills with the run's 30 keys.
ROOMY = 64
ROW_RECORDS = "embedding/items..dynamic/index/.ATTRIBUTES/row_records"


def feature_config(batch: int = GLOBAL_BATCH, capacity: int = 12) -> dict:
    """Feature `clicked` of dynamic table `items`, `batch` samples a replica."""
    table = tf_embedding.TableConfig(
        vocabulary_size=capacity, dim=DIM, name="items", combiner="mean",
        initializer=tf.keras.initializers.RandomUniform(-1.0, 1.0, seed=3),
        dynamic=tf_embedding.DynamicVocabulary(admit_after=2, evict_after_steps=3, pool_rows=5))
    return {"clicked": tf_embedding.FeatureConfig(table, name="clicked",
                                                  output_shape=[batch])}


def samples() -> list[tuple[list[list[int]], np.ndarray]]:
    """Each step's (keys of each of its samples, targets [GLOBAL_BATCH, DIM]): 0 to 3 keys a
    sample from 30 scattered over int64."""
    rng = np.random.default_rng(5)
    scatter = rng.integers(0, 2**62, size=30)
    return [(zipf_key_samples(rng, scatter, GLOBAL_BATCH),
             rng.normal(size=[GLOBAL_BATCH, DIM]).astype(np.float32)) for _ in range(STEPS)]


def as_inputs(keys: list[list[int]], targets: np.ndarray) -> tuple[dict, dict]:
    """(features, targets) of samples: a ragged tensor of their keys, their targets."""
    return ({"clicked": tf.ragged.constant(keys, dtype=tf.int64, ragged_rank=1,
                                           inner_shape=())},
            {"clicked": tf.constant(targets)})


def batches() -> list[tuple[dict, dict]]:
    """Each step's global batch as (features, targets)."""
    return [as_inputs(keys, targets) for keys, targets in samples()]


def training_step(strategy: tf.distribute.Strategy,
                  embedding: tf_embedding.TPUEmbedding) -> Callable[..., Any]:
    """The step (a tf.function of features and targets): enqueue in the outer function,
    dequeue and apply_gradients in `strategy.run`, as on a TPU."""
    replica_step = squared_loss_step(embedding)

    @tf.function
    def step(features, targets):
        embedding.enqueue(features, training=True)
        return strategy.run(replica_step, args=(targets,))

    return step


def embedding_for(strategy: tf.distribute.Strategy, placement: str,
                  batch: int = GLOBAL_BATCH, blocks: int = 1,
                  capacity: int = 12) -> tf_embedding.TPUEmbedding:
    """The run's TPUEmbedding under `strategy`, `batch` samples a replica. `placement`: a
    partition strategy ('div', 'mod'), or 'owner<r>', the table whole on worker r (one block in
    one process); `blocks` > 1 splits the table over that many blocks of this process's CPU;
    `capacity`: the table's vocabulary_size."""
    if placement.startswith("owner"):
        owner = int(placement[len("owner"):])
        plan = sharding_plan.ShardingPlan(
            {"items": sharding_plan.TableSharding("table_wise", owner=owner)})
        options = {"sharding_plan": plan} if strategy.num_replicas_in_sync > 1 else {}
    else:
        options = {"partition_strategy": placement,
                   "table_devices": ["/cpu:0"] * blocks if blocks > 1 else None}
    with strategy.scope():
        return tf_embedding.TPUEmbedding(feature_config(batch, capacity),
                                         tf_embedding.Adagrad(0.1), **options)


def negative_key_edit(rank: int, step: int, size: int) -> Callable[[list], None]:
    """A `train` edit that makes worker `rank`'s first key of `step` negative (of `size`
    workers; `size` 1: the global batch's sample)."""
    def edit(steps: list) -> None:
        steps[step][0][rank * (GLOBAL_BATCH // size)] = [-5]
    return edit


def worker_batches(strategy: tf.distribute.Strategy, steps: list, rank: int,
                   size: int) -> Any:
    """An iterator over worker `rank`'s slice (of `size` workers) of each of `steps`'
    global batches, from a distributed dataset."""
    per_worker = GLOBAL_BATCH // size
    start, stop = rank * per_worker, (rank + 1) * per_worker
    features, targets = as_inputs([sample for keys, _ in steps for sample in keys[start:stop]],
                                  np.concatenate([targets[start:stop] for _, targets in steps]))
    dataset = tf.data.Dataset.from_tensor_slices((features, targets)).batch(
        per_worker, drop_remainder=True)
    return iter(strategy.distribute_datasets_from_function(
        lambda context: dataset,
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False)))


def forward(strategy: tf.distribute.Strategy, embedding: tf_embedding.TPUEmbedding,
            rank: int = 0, size: int = 1) -> np.ndarray:
    """This worker's activations of a forward-only lookup (training=False) of its slice of
    every key of the run's first batch."""
    features, _ = next(worker_batches(strategy, samples()[:1], rank, size))

    @tf.function
    def step(features):
        embedding.enqueue(features, training=False)
        return strategy.run(embedding.dequeue)

    return strategy.experimental_local_results(step(features)["clicked"])[0].numpy()


def train(strategy: tf.distribute.Strategy, embedding: tf_embedding.TPUEmbedding,
          rank: int = 0, size: int = 1, edit: Callable[[list], None] | None = None,
          checkpoint_path: str | None = None, first_step: int = 0) -> list[Any]:
    """Trains `embedding` on this worker's slice of every global batch (of `size` workers)
    from step `first_step` on; returns this worker's activations of each step, or for a step
    that failed, its error. `edit(steps)` may change the samples first; with
    `checkpoint_path`, a checkpoint is written there after step CHECKPOINT_STEP."""
    steps = samples()
    if edit is not None:
        edit(steps)
    iterator = worker_batches(strategy, steps[first_step:], rank, size)
    step_function = training_step(strategy, embedding)
    activations: list[Any] = []
    for step in range(first_step, STEPS):
        try:
            result = step_function(*next(iterator))
            activations.append(strategy.experimental_local_results(result["clicked"])[0].numpy())
        except tf.errors.InvalidArgumentError as error:
            activations.append(error)
        if checkpoint_path is not None and step + 1 == CHECKPOINT_STEP:
            tf.train.Checkpoint(embedding=embedding).write(checkpoint_path)
    return activations


def rows_by_key(embedding: tf_embedding.TPUEmbedding, path: str) -> dict:
    """Each admitted key's row of the table and of each slot ("<table>/<slot>"), wherever its
    row is, as a checkpoint written to `path` records them."""
    records = tf.train.load_checkpoint(
        tf.train.Checkpoint(embedding=embedding).write(path)).get_tensor(ROW_RECORDS)
    values = {f"{table}/{slot}": tf.convert_to_tensor(variable).numpy()
              for table, slots in embedding.table_variables().items()
              for slot, variable in slots.items()}
    return {int(key): {name: value[row] for name, value in values.items()}
            for row, key in enumerate(records[:, 0]) if key >= 0}


def assert_same_rows_by_key(actual: dict, expected: dict) -> None:
    """`rows_by_key` of two embeddings: the same keys, each with the same rows."""
    assert sorted(actual) == sorted(expected)
    for key, values in expected.items():
        for name, value in values.items():
            np.testing.assert_array_equal(actual[key][name], value, err_msg=f"key {key} {name}")
