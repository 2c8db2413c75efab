"""The lookup and apply kernels' ISA variants and huge-page backing give the same bits, in fresh
processes (the ISA choice and the huge-page switch are read once per process)."""

import os
import subprocess
import sys
import textwrap

import pytest

from helpers.processes import last_printed_words

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# The ISA variants of the row combine and of the sparse-apply row loops, and huge-page backing
# (cc/core/simd_dispatch.h, cc/core/huge_pages.h) must not change a bit.

_ISA_SCRIPT = textwrap.dedent("""
    import hashlib
    import numpy as np
    import tensorflow as tf
    from tf_embedding import ops, optimizers

    rng = np.random.default_rng(0)
    digest = hashlib.sha256()
    # 64 x 65536 floats is 16 MiB, the huge-page threshold; the odd dimensions take the
    # any-dimension path.
    for dim, vocab in ((3, 1000), (8, 1000), (16, 300), (32, 1000), (64, 65536), (100, 500),
                       (128, 2000)):
        counts = rng.integers(0, 30, size=700)
        row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        ids = rng.integers(0, vocab, size=row_splits[-1]).astype(np.int64)
        gains = rng.normal(size=row_splits[-1]).astype(np.float32)
        table = tf.Variable(rng.normal(size=[vocab, dim]).astype(np.float32))
        digest.update(ops.embedding_lookup(table, row_splits, ids, gains).numpy().tobytes())
        # The sparse-apply row loops (cc/core/row_updates.h) of a one-slot and a two-slot rule.
        gradients = rng.normal(size=[len(counts), dim]).astype(np.float32)
        for optimizer in (optimizers.Adagrad(0.1), optimizers.Adam(0.1, lazy_adam=False)):
            slots = {name: tf.Variable(rng.uniform(0.5, 2.0, size=[vocab, dim]).astype(np.float32))
                     for name in optimizer.slot_names()}
            ops.sparse_apply(optimizer, table, slots, [(row_splits, ids, gains, gradients)], 0.1)
            for variable in (table, *slots.values()):
                digest.update(variable.numpy().tobytes())
    print(digest.hexdigest())
""")


def test_isa_variants_and_huge_pages_give_identical_bits():
    settings = [{"TF_EMBEDDING_SIMD": isa} for isa in ("baseline", "avx2", "avx512")]
    settings.append({"TF_EMBEDDING_HUGE_PAGES": "0"})
    digests = last_printed_words(_ISA_SCRIPT, [((), setting) for setting in settings])
    assert len(set(digests)) == 1, dict(zip(map(str, settings), digests))


def test_unknown_isa_setting_is_reported_and_ignored():
    result = subprocess.run([sys.executable, "-c", _ISA_SCRIPT], capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                                     TF_EMBEDDING_SIMD="avx-512"))
    assert result.returncode == 0, result.stderr
    assert ("ignoring TF_EMBEDDING_SIMD=avx-512 (expected baseline, avx2 or avx512)"
            in result.stderr)
    assert result.stdout.split()[-1] == last_printed_words(_ISA_SCRIPT, [((), {})])[0]
