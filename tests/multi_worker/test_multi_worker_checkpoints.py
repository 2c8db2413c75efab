"""Checkpoints of a multi-worker TPUEmbedding: written as TF documents for MWMS (every worker
writes, rank 0 to the real path, the others to temporary ones), rank 0's holds every table and
slot whole under stock TF's keys, each worker having written only its own blocks; it restores into
one process, into stock TF's TPUEmbeddingForServing, and onto another worker count (before or
after build), and a one-process checkpoint restores onto the workers, all bit for bit."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

from helpers import multi_worker
from helpers.multi_worker_training import embedding_for, train, whole_tables
from helpers.sharded import feature_config

pytestmark = pytest.mark.cluster

CASE = "adagrad_momentum:mixed:div:2"
STRIDED_CASE = "ftrl:ragged:mod:2"


def worker_run(num_workers: int, *args: str) -> None:
    multi_worker.assert_succeeded(multi_worker.run_workers(
        num_workers, [multi_worker.script("mw_checkpoint.py"), *map(str, args)]))


def one_process_tables(case: str) -> dict[str, np.ndarray]:
    embedding, _ = train(tf.distribute.get_strategy(), case)
    return whole_tables(embedding)


def assert_tables_equal(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]):
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=key)


@pytest.mark.parametrize("case, window_bytes", [
    (CASE, None), (STRIDED_CASE, None), (STRIDED_CASE, 8)],
    ids=["div", "mod", "mod-windows-of-one-row"])
def test_workers_checkpoint_restores_in_one_process_serving_and_three_workers(
        case, window_bytes, tmp_path):
    expected = one_process_tables(case)
    worker_run(2, "save", tmp_path, case, *([window_bytes] if window_bytes else []))
    path = str(tmp_path / "ckpt")

    # Rank 0's file: every table and slot whole, under the keys one process writes.
    one_process = tmp_path / "one_process"
    unsaved = embedding_for(tf.distribute.get_strategy(), case)
    unsaved.build()
    tf.train.Checkpoint(embedding=unsaved).write(str(one_process / "ckpt"))
    keys = dict(tf.train.list_variables(path))
    assert keys == dict(tf.train.list_variables(str(one_process / "ckpt")))
    reader = tf.train.load_checkpoint(path)
    for key, value in expected.items():
        table, slot = key.split("/")
        name = table if slot == "parameters" else f"{table}.S{slot}"
        stored = reader.get_tensor(f"embedding/{name}/.ATTRIBUTES/VARIABLE_VALUE")
        np.testing.assert_array_equal(stored, value, err_msg=key)
    # The other rank wrote its blocks into rank 0's checkpoint: its temporary one holds none.
    assert not any(key.startswith("embedding/") for key, _ in
                   tf.train.list_variables(str(tmp_path / "temporary1" / "ckpt")))

    # One process.
    restored = embedding_for(tf.distribute.get_strategy(), case)
    status = tf.train.Checkpoint(embedding=restored).read(path)
    restored.build()
    status.assert_consumed()
    assert_tables_equal(whole_tables(restored), expected)

    # Stock TF's serving class.
    serving = tf.tpu.experimental.embedding.TPUEmbeddingForServing(
        feature_config(tf.tpu.experimental.embedding), tf.tpu.experimental.embedding.SGD(0.1))
    serving.build()
    tf.train.Checkpoint(embedding=serving).read(path).expect_partial()
    for table, variable in serving.embedding_tables.items():
        np.testing.assert_array_equal(variable.numpy(), expected[f"{table.name}/parameters"])

    # Three workers, restored before build.
    worker_run(3, "restore", path, tmp_path, case, "before")
    assert_tables_equal(dict(np.load(tmp_path / "restored.npz")), expected)


@pytest.mark.parametrize("when", ["before", "after"])
def test_one_process_checkpoint_restores_on_two_workers(when, tmp_path):
    # Before build each worker reads its rows alone from the unsliced tables (TfeRestoreRows);
    # after build through TF's reader.
    expected = one_process_tables(CASE)
    embedding, _ = train(tf.distribute.get_strategy(), CASE)
    path = tf.train.Checkpoint(embedding=embedding).write(str(tmp_path / "one" / "ckpt"))
    worker_run(2, "restore", path, tmp_path, CASE, when)
    assert_tables_equal(dict(np.load(tmp_path / "restored.npz")), expected)


