"""A dynamic table on a loopback MultiWorkerMirroredStrategy cluster of 2 workers (every worker
a copy of the index) trains the bits of one process with the same global batches and block
count: every worker's activations of every step and of a forward-only lookup, the table, its
slot and the index's statistics, row-wise ('div', 'mod': one block a worker) and whole on
worker 1; the workers' checkpoint restores into one process and continues as that process
does; a negative key on one worker fails the step on both, naming the table and feature, and
changes no table; a one-process checkpoint restores onto 2 and 3 workers (rows moving between
them with their keys) and trains on as the uninterrupted run."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import dynamic_training, multi_worker
from helpers.multi_worker_training import whole_tables

pytestmark = pytest.mark.cluster

WORKERS = 2


def blocks_of(placement: str) -> int:
    """The table's block count on the workers: one a worker, or one if whole on one."""
    return 1 if placement.startswith("owner") else WORKERS


def one_process(partition: str, **train_options) -> tuple:
    """(embedding, activations) of the run in this process on the whole global batches."""
    strategy = tf.distribute.get_strategy()
    embedding = dynamic_training.embedding_for(strategy, partition, blocks=blocks_of(partition))
    return embedding, dynamic_training.train(strategy, embedding, **train_options)


def assert_tables_equal(saved, embedding, what: str) -> None:
    tables = whole_tables(embedding)
    assert sorted(saved.files) == sorted(tables)
    for key, expected in tables.items():
        np.testing.assert_array_equal(saved[key], expected, err_msg=f"{what} {key}")


def statistics_of(embedding) -> list[int]:
    return list(embedding.dynamic_statistics()["items"].values())


@pytest.mark.parametrize("partition", ["div", "mod", "owner1"])
def test_two_workers_train_the_bits_of_one_process_and_checkpoint_it(partition, tmp_path):
    multi_worker.assert_succeeded(multi_worker.run_workers(
        WORKERS, [multi_worker.script("mw_dynamic.py"), str(tmp_path), partition]))
    embedding, activations = one_process(partition)
    forward = dynamic_training.forward(tf.distribute.get_strategy(), embedding)
    assert_tables_equal(np.load(tmp_path / "tables.npz"), embedding, partition)
    statistics = statistics_of(embedding)
    named = embedding.dynamic_statistics()["items"]
    assert named["admitted"] > 0 and named["evicted"] > 0
    per_worker = dynamic_training.GLOBAL_BATCH // WORKERS
    for rank in range(WORKERS):
        worker = np.load(tmp_path / f"rank{rank}.npz")
        np.testing.assert_array_equal(worker["statistics"], statistics, err_msg=f"rank {rank}")
        for step, expected in enumerate(activations):
            np.testing.assert_array_equal(
                worker[f"step{step}"], expected[rank * per_worker:(rank + 1) * per_worker],
                err_msg=f"rank {rank} step {step}")
        np.testing.assert_array_equal(worker["forward"],
                                      forward[rank * per_worker:(rank + 1) * per_worker])

    # The workers' checkpoint of step CHECKPOINT_STEP, restored into one process, continues
    # as the uninterrupted one-process run.
    restored = dynamic_training.embedding_for(tf.distribute.get_strategy(), partition,
                                              blocks=blocks_of(partition))
    tf.train.Checkpoint(embedding=restored).read(str(tmp_path / "ckpt")).expect_partial()
    continued = dynamic_training.train(tf.distribute.get_strategy(), restored,
                                       first_step=dynamic_training.CHECKPOINT_STEP)
    for step, value in enumerate(continued, dynamic_training.CHECKPOINT_STEP):
        np.testing.assert_array_equal(value, activations[step], err_msg=f"restored step {step}")
    assert_tables_equal(np.load(tmp_path / "tables.npz"), restored, "restored")
    assert statistics_of(restored) == statistics


def test_a_negative_key_on_one_worker_fails_the_step_on_both_and_changes_nothing(tmp_path):
    results = multi_worker.run_workers(
        WORKERS, [multi_worker.script("mw_dynamic.py"), str(tmp_path), "div", "bad", "1", "1"])
    multi_worker.assert_succeeded(results)
    for result in results:
        failures = [line for line in result.stdout.splitlines() if line.startswith("step ")]
        assert len(failures) == 1 and failures[0].startswith(
            "step 1 failed: InvalidArgumentError: "), result.stdout[-3000:]
        assert "Table items, feature clicked: a key is negative on a worker" in failures[0]

    embedding, activations = one_process(
        "div", edit=dynamic_training.negative_key_edit(1, 1, WORKERS))
    assert isinstance(activations[1], tf.errors.InvalidArgumentError)
    assert_tables_equal(np.load(tmp_path / "tables.npz"), embedding, "after the failed step")
    for rank in range(WORKERS):
        statistics = np.load(tmp_path / f"rank{rank}.npz")["statistics"]
        np.testing.assert_array_equal(statistics, statistics_of(embedding))


@pytest.mark.parametrize("workers, placement", [(2, "div"), (3, "mod")])
def test_a_one_process_checkpoint_restores_onto_workers_and_trains_on(workers, placement,
                                                                      tmp_path):
    """One block's checkpoint onto 2 or 3 workers' blocks: keys and their rows move between
    workers, and with a capacity no block fills the workers continue as the uninterrupted
    one-process run."""
    strategy = tf.distribute.get_strategy()
    original = dynamic_training.embedding_for(strategy, "div", capacity=dynamic_training.ROOMY)
    activations = dynamic_training.train(strategy, original,
                                         checkpoint_path=str(tmp_path / "ckpt"))
    forward = dynamic_training.forward(strategy, original)
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    multi_worker.assert_succeeded(multi_worker.run_workers(workers, [
        multi_worker.script("mw_dynamic.py"), str(cluster), placement, "restore",
        str(tmp_path / "ckpt"), str(dynamic_training.ROOMY)]))
    per_worker = dynamic_training.GLOBAL_BATCH // workers
    for rank in range(workers):
        worker = np.load(cluster / f"rank{rank}.npz")
        mine = slice(rank * per_worker, (rank + 1) * per_worker)
        for step in range(dynamic_training.CHECKPOINT_STEP, dynamic_training.STEPS):
            np.testing.assert_array_equal(worker[f"step{step}"], activations[step][mine],
                                          err_msg=f"rank {rank} step {step}")
        np.testing.assert_array_equal(worker["forward"], forward[mine])
        np.testing.assert_array_equal(worker["statistics"], statistics_of(original))
    # The workers' last checkpoint, read into one process of their layout.
    final = dynamic_training.embedding_for(strategy, placement, blocks=workers,
                                           capacity=dynamic_training.ROOMY)
    tf.train.Checkpoint(embedding=final).read(str(cluster / "final"))
    final.build()
    dynamic_training.assert_same_rows_by_key(
        dynamic_training.rows_by_key(final, str(tmp_path / "final")),
        dynamic_training.rows_by_key(original, str(tmp_path / "original")))
