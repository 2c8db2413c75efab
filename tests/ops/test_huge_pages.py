"""Large tables move onto transparent huge pages when a kernel first touches them.

cc/core/huge_pages.h: the lookup and apply kernels ask Linux to back table and slot buffers of
16 MiB and more with 2 MiB pages. Whether the kernel can do that depends on the machine (THP
mode, free huge pages), so the tests run where THP is in 'madvise' mode (the default of most
distributions) and a plain MADV_COLLAPSE works.
"""

import ctypes
import mmap
import textwrap

import pytest

from helpers.processes import last_printed_words

pytestmark = pytest.mark.integration


MADV_COLLAPSE = 25
THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


def _thp_mode() -> str | None:
    """The bracketed THP mode ("always", "madvise", "never"), or None off Linux."""
    try:
        with open(THP_SETTING) as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return None


def _kernel_collapses() -> bool:
    """Whether MADV_COLLAPSE works on this kernel and machine right now."""
    size = 8 << 20
    buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buffer.write(b"\1" * size)
        address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
        aligned = (address + (2 << 20) - 1) & ~((2 << 20) - 1)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc.madvise(aligned, 4 << 20, MADV_COLLAPSE) == 0
    finally:
        buffer.close()


# Looks up from (and applies to) a 32 MiB table, then prints how many KiB of anonymous huge
# pages the process gained.
_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    from tf_embedding import ops, optimizers

    def anon_huge_kib():
        with open("/proc/self/smaps_rollup") as f:
            return int(f.read().split("AnonHugePages:")[1].split()[0])

    table = tf.Variable(tf.random.stateless_uniform([131072, 64], seed=[0, 1]))
    before = anon_huge_kib()
    row_splits = np.array([0, 2, 3], np.int64)
    ids = np.array([5, 131071, 70000], np.int64)
    gains = np.ones(3, np.float32)
    ops.embedding_lookup(table, row_splits, ids, gains)
    print(anon_huge_kib() - before)
""")


def _huge_kib_gained(**env: str) -> int:
    return int(last_printed_words(_SCRIPT, [((), env)])[0])


@pytest.fixture(scope="module")
def collapsing_kernel() -> None:
    mode = _thp_mode()
    if mode != "madvise":
        # "always" backs large buffers with huge pages from the start, so a lookup adds none;
        # "never" (or no THP) allows none.
        pytest.skip(f"needs THP mode 'madvise' to see the effect ({THP_SETTING}: {mode})")
    if not _kernel_collapses():
        pytest.skip("MADV_COLLAPSE fails on this machine (kernel < 6.1 or no free huge pages)")


def test_lookup_moves_a_large_table_onto_huge_pages(collapsing_kernel):
    # The 32 MiB buffer holds at least 15 whole 2 MiB pages whatever its alignment.
    assert _huge_kib_gained() >= 15 * 2048


def test_huge_pages_can_be_turned_off(collapsing_kernel):
    assert _huge_kib_gained(TF_EMBEDDING_HUGE_PAGES="0") < 2048
