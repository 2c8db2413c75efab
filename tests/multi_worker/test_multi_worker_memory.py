"""Memory of a multi-worker TPUEmbedding: on 2 workers, each worker's peak resident memory
during build, a training step, a save and a restore stays at its own blocks (table and slot,
half the table's bytes) plus a few windows of 16 MB or a few MB, never near the whole table
(`mw_memory.py` measures each phase); and a table whose whole value exceeds each worker's
memory cgroup limit builds, trains, saves and restores within it, its trained rows equal to
numpy's."""

import collections
import contextlib
import os
import subprocess
import uuid

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded import initial_rows

from helpers import multi_worker

pytestmark = pytest.mark.cluster

SMALL_BYTES = 64 << 20
KEY = "embedding/big/.ATTRIBUTES/VARIABLE_VALUE"


def run(mode: str, tmp_path, rows: int, dim: int, optimizer: str,
        environ=None) -> list[dict[str, int]]:
    """Each worker's measurements of `mw_memory.py MODE`: {phase or "block": bytes}."""
    results = multi_worker.run_workers(
        2, [multi_worker.script("mw_memory.py"), mode, str(tmp_path), str(rows), str(dim),
            optimizer], environ=environ)
    multi_worker.assert_succeeded(results)
    measured = []
    for result in results:
        lines = [line.split() for line in result.stdout.splitlines()]
        values = {words[1]: int(words[2]) for words in lines if words[:1] == ["memory"]}
        values.update({words[0]: int(words[1]) for words in lines if words[:1] == ["block"]})
        values["stdout"] = result.stdout
        measured.append(values)
    return measured


def trained_and_restored(tmp_path, rows, dim, optimizer, environ=None):
    """Each worker's measurements of training and saving, then of restoring (new processes)."""
    trained = run("train", tmp_path, rows, dim, optimizer, environ)
    restored = run("restore", tmp_path, rows, dim, optimizer, environ)
    return [{**first, **second, "stdout": first["stdout"] + second["stdout"]}
            for first, second in zip(trained, restored)]


def test_each_worker_holds_only_its_blocks(tmp_path):
    rows, dim = 1_000_000, 64  # 256 MB a table, 512 MB with its Adagrad slot
    for rank, peaks in enumerate(trained_and_restored(tmp_path, rows, dim, "Adagrad")):
        block_bytes = peaks["block"]
        assert block_bytes == rows * dim * 4  # half the table and half the slot
        assert peaks["build"] < block_bytes + SMALL_BYTES, (rank, peaks)
        assert peaks["step"] < SMALL_BYTES, (rank, peaks)
        assert peaks["save"] < SMALL_BYTES, (rank, peaks)
        # Restored as the blocks are made (the checkpoint's nodes are "simple" variables).
        assert peaks["restore"] < block_bytes + SMALL_BYTES, (rank, peaks)
        assert "refused Table variable 'big' is 0.24 GiB whole (1000000 x 64 float32)" in (
            peaks["stdout"]), peaks["stdout"][-2000:]


@contextlib.contextmanager
def memory_cgroups(limit_bytes: int, count: int):
    """A fresh cgroup directory with `count` subgroups `worker<i>`, each limited to
    `limit_bytes` (cgroup v1's memory controller or v2); skips the test where this process may
    not make them, limit them or move a process into them. Removed at the end."""
    with open("/proc/self/cgroup") as cgroups:
        lines = [line.strip().split(":", 2) for line in cgroups]
    v1 = [path for _, controllers, path in lines if "memory" in controllers.split(",")]
    if v1:
        parent, limit_file = f"/sys/fs/cgroup/memory{v1[0]}", "memory.limit_in_bytes"
    else:
        parent, limit_file = f"/sys/fs/cgroup{lines[0][2]}", "memory.max"
    root = os.path.join(parent, f"tf_embedding_test_{uuid.uuid4().hex[:8]}")
    made = []
    try:
        try:
            os.mkdir(root)
            made.append(root)
            for index in range(count):
                group = os.path.join(root, f"worker{index}")
                os.mkdir(group)
                made.append(group)
                with open(os.path.join(group, limit_file), "w") as limit:
                    limit.write(str(limit_bytes))
            _check_joinable(os.path.join(root, "worker0"))
        except OSError as error:
            pytest.skip(f"cannot make and join memory cgroups under {parent}: {error}")
        yield root
    finally:
        for group in reversed(made):
            os.rmdir(group)


def _check_joinable(group: str) -> None:
    """Raises OSError where a process cannot be moved into `group` (cgroup v2's rules)."""
    probe = subprocess.Popen(["sleep", "30"])
    try:
        with open(os.path.join(group, "cgroup.procs"), "w") as procs:
            procs.write(str(probe.pid))
    finally:
        probe.kill()
        probe.wait()


def test_a_table_larger_than_each_workers_memory_limit(tmp_path):
    rows, dim = 4_000_000, 64  # 1 GB whole; SGD: 512 MB of blocks a worker
    whole_bytes = rows * dim * 4
    # What a worker allocates after joining its cgroup (TensorFlow's import is charged to the
    # test's own group): its block and 200 MB of engine, windows and checkpoint pages, less
    # than the whole table.
    limit = whole_bytes // 2 + (200 << 20)
    assert limit < whole_bytes
    with memory_cgroups(limit, 2) as groups:
        measured = trained_and_restored(tmp_path, rows, dim, "SGD",
                                        environ={"MEMORY_CGROUPS": groups})
    for peaks in measured:
        assert peaks["block"] == whole_bytes // 2
        assert peaks["stdout"].count("done") == 2
    # Rows of the trained checkpoint against numpy: the initial rows (computed alone, as
    # tests/sharded/test_initial_rows.py checks them against the whole value) less SGD's step,
    # 0.1 per lookup (mw_memory.py: each of the 2 workers looks up ids (i * 7919) % rows, one a
    # sample, and the step's activation gradients are ones).
    lookups = collections.Counter((index * 7919) % rows for index in range(32)
                                  for _worker in range(2))
    initializer = keras.initializers.TruncatedNormal(stddev=0.05, seed=7)
    for row in [*list(lookups)[:4], 1, rows // 2 + 3, rows - 1]:
        expected = (np.asarray(initial_rows.initial_rows(initializer, (rows, dim), tf.float32,
                                                         row, row + 1))
                    - np.float32(0.1) * np.float32(lookups[row]))
        actual = ops.restore_rows(str(tmp_path / "ckpt"), KEY, tf.constant(row, tf.int64),
                                  tf.constant(1, tf.int64))
        np.testing.assert_array_equal(actual.numpy(), expected, err_msg=f"row {row}")
