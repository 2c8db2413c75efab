"""Memory of a multi-worker TPUEmbedding: on 2 workers, each worker's peak resident memory
during build, a training step, a save and a restore stays at its own blocks (table and slot,
half the table's bytes) plus a few windows of 16 MB or a few MB, never near the whole table
(`mw_memory.py` measures each phase)."""

import pytest

from helpers import multi_worker

pytestmark = pytest.mark.cluster

ROWS, DIM = 1_000_000, 64  # 256 MB a table, 512 MB with its Adagrad slot
WHOLE_BYTES = 2 * ROWS * DIM * 4
SMALL_BYTES = 64 << 20


def test_each_worker_holds_only_its_blocks(tmp_path):
    results = multi_worker.run_workers(
        2, [multi_worker.script("mw_memory.py"), str(tmp_path), str(ROWS), str(DIM)])
    multi_worker.assert_succeeded(results)
    for rank, result in enumerate(results):
        lines = [line.split() for line in result.stdout.splitlines()]
        peaks = {words[1]: int(words[2]) for words in lines if words[:1] == ["memory"]}
        (block_bytes,) = [int(words[1]) for words in lines if words[:1] == ["block"]]
        assert block_bytes == WHOLE_BYTES // 2
        assert peaks["build"] < block_bytes + SMALL_BYTES, (rank, peaks)
        assert peaks["step"] < SMALL_BYTES, (rank, peaks)
        assert peaks["save"] < SMALL_BYTES, (rank, peaks)
        # Restored as the blocks are made (the checkpoint's nodes are "simple" variables).
        assert peaks["restore"] < block_bytes + SMALL_BYTES, (rank, peaks)
        assert "refused Table variable 'big' is 0.24 GiB whole (1000000 x 64 float32)" in (
            result.stdout), result.stdout[-2000:]
