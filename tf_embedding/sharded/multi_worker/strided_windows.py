"""A 'mod' table saved by its workers without a gather: each writes windows of the table in row
order, which hold rows of every block.

A 'mod' block (rows b, b + n, b + 2n, ... of a table over n blocks) is no slice of the full
shape, so no worker can write its own block as one. Instead the table is cut into windows of
`n * w` consecutive rows (about 16 MB of each block a window), and window k is written by the
owner of block k % n: n windows at a time, every worker sends each window's writer the
`w` rows of its block that the window holds (one all-to-all of equal parts, as TF's CPU
collective needs), and the writer interleaves them into the window's rows. The checkpoint
then holds the table as row slices, one per window, which any layout restores (a 'mod' block
reads them a window at a time: `ShardLayout.initial_block_windows`). A worker holds its windows
until it writes them: about one block more than its blocks during a save.
"""

from typing import Any

import tensorflow as tf

# About this many bytes of each block go into a window.
_WINDOW_BLOCK_BYTES = 16 << 20


def window_rows(variable: Any) -> int:
    """The table rows of one window of `variable`'s table."""
    dim = int(variable.shape[1])
    return len(variable.layout.rows) * max(1, _WINDOW_BLOCK_BYTES // (dim * variable.dtype.size))


def writing_ranks(variable: Any) -> tuple[int, ...]:
    """The ranks that write windows of `variable`'s table: window k's is block k % n's owner."""
    windows = -(-int(variable.shape[0]) // window_rows(variable))
    owners = variable.owners
    return tuple(sorted({owners[window % len(owners)]
                         for window in range(min(windows, len(owners)))}))


def saved_windows(variable: Any) -> list[tuple[str, tf.Tensor]]:
    """(slice spec, rows) of each window of `variable` (a `WorkerBlockVariable` of a 'mod'
    table with a block on every worker) that this worker writes. A collective: every worker
    calls it, in the same order."""
    layout, group = variable.layout, variable.group
    blocks = len(layout.rows)
    rows, dim = int(variable.shape[0]), int(variable.shape[1])
    rows_of_window = window_rows(variable)
    part_rows = rows_of_window // blocks
    windows = -(-rows // rows_of_window)
    block = tf.convert_to_tensor(variable.block)
    # The block each rank owns, and the rank owning each block.
    block_of_rank = {rank: index for index, rank in enumerate(variable.owners)}
    written = []
    for first_window in range(0, windows, blocks):
        # Window first_window + j goes to the owner of block j.
        parts = []
        for rank in range(group.size):
            local_start = (first_window + block_of_rank[rank]) * part_rows
            part = block[local_start:local_start + part_rows]
            parts.append(tf.pad(part, [[0, part_rows - tf.shape(part)[0]], [0, 0]]))
        received = group.all_to_all(tf.stack(parts), group.exchange_keys()[0])
        window = first_window + variable.block_index
        first_row = window * rows_of_window
        if first_row >= rows:
            continue
        # received[rank] holds that rank's block's rows of the window: row first_row + t * n + b
        # is row t of block b's part.
        by_block = tf.gather(received, list(variable.owners))
        interleaved = tf.reshape(tf.transpose(by_block, [1, 0, 2]), [rows_of_window, dim])
        length = min(rows_of_window, rows - first_row)
        written.append((f"{rows} {dim} {first_row},{length}:0,{dim}", interleaved[:length]))
    return written
