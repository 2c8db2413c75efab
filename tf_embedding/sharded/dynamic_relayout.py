"""A dynamic table's checkpoint restored onto another block layout (another block count or
partition strategy, the same capacity): each admitted key moves to a row of the block its hash
names under the new layout (`dynamic_vocabulary.key_blocks`), and its rows (the parameters and
every optimizer slot) move with it, so each key keeps its values. Candidates have no row; the
index places them by the same hash when it imports them.

Done while the table is built with a deferred restore (`tf.train.Checkpoint.read` before the
first `enqueue` or `build`), when the tables' variables already hold the checkpoint's rows:
`move_rows` where this process writes every block (its devices, parameter-server tasks),
`move_worker_rows` on MultiWorkerMirroredStrategy workers, each holding its own block, whose
identical index copies give every worker the same moves."""

from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from tf_embedding import dynamic_vocabulary, ops
from tf_embedding.sharded.layout import ShardLayout
from tf_embedding.sharded.multi_worker.group import WorkerGroup

FREE_RECORD = (-1, 0, 0)  # a free row's record (key -1), as the index exports it


def placed_records(table_name: str, records: np.ndarray, layout: ShardLayout
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`records` ([capacity, 3]: each table row's key, count and last step) placed for
    `layout`: each block's keys, in the order of their saved rows, in its first rows. Returns
    (the placed records, every key's saved row, its new row), or None when every key already
    lies in its block (a checkpoint of this layout) or the capacities differ (which the
    index's import refuses, naming both).

    Raises:
      ValueError: a block would hold more keys than it has rows, naming the table, the block
        and both counts.
    """
    if len(records) != layout.offsets[-1]:
        return None
    saved_rows = np.flatnonzero(records[:, 0] >= 0)
    blocks = dynamic_vocabulary.key_blocks(records[saved_rows, 0], len(layout.rows))
    if np.array_equal(blocks, layout.block_of(tf.constant(saved_rows, tf.int64)).numpy()):
        return None
    placed = np.tile(np.array(FREE_RECORD, np.int64), (len(records), 1))
    new_rows = np.empty_like(saved_rows)
    for block, block_rows in enumerate(layout.rows):
        moving = np.flatnonzero(blocks == block)
        if len(moving) > block_rows:
            raise ValueError(
                f"Table {table_name}: the checkpoint's dynamic index holds {len(moving)} keys "
                f"that belong to block {block} of this table's {len(layout.rows)} "
                f"(partition_strategy '{layout.partition_strategy}'), which has {block_rows} "
                "rows: restore it onto a layout whose blocks hold its keys (fewer blocks, or "
                "the checkpoint's own). Nothing was restored into the index.")
        new_rows[moving] = np.array(layout.row_range(block))[:len(moving)]
    placed[new_rows] = records[saved_rows]
    return placed, saved_rows, new_rows


def move_rows(variables: Mapping[str, Any], layout: ShardLayout, saved_rows: np.ndarray,
              new_rows: np.ndarray, *, table_name: str) -> None:
    """Moves table rows `saved_rows` to `new_rows` in every variable of a table (parameters and
    slots, each a variable of `layout`'s blocks): all are read before any is written, since a
    row may be both."""
    source_blocks, source_local = layout.block_and_local_ids(tf.constant(saved_rows, tf.int64))
    target_blocks, target_local = layout.block_and_local_ids(tf.constant(new_rows, tf.int64))
    positions = tf.range(len(saved_rows), dtype=tf.int32)  # dynamic_stitch's index type
    for variable in variables.values():
        blocks = list(variable)
        parts, part_positions = [], []
        for index, (block, device) in enumerate(zip(blocks, layout.devices)):
            mine = tf.equal(source_blocks, index)
            with tf.device(device):
                parts.append(tf.gather(block, tf.boolean_mask(source_local, mine)))
            part_positions.append(tf.boolean_mask(positions, mine))
        values = tf.dynamic_stitch(part_positions, parts)
        for index, (block, device) in enumerate(zip(blocks, layout.devices)):
            mine = tf.equal(target_blocks, index)
            with tf.device(device):
                ops.reset_rows(block, tf.boolean_mask(target_local, mine), values,
                               tf.cast(tf.boolean_mask(positions, mine), tf.int64), table_name)


def move_worker_rows(variables: Mapping[str, Any], workers: WorkerGroup,
                     saved_rows: np.ndarray, new_rows: np.ndarray, *, table_name: str) -> None:
    """`move_rows` for a table whose blocks are MultiWorkerMirroredStrategy workers'
    (`WorkerBlockVariable`s): each worker sends the moved rows its block holds to the rank
    whose block takes them, in one all-to-all per variable. A collective: every worker calls
    it, with the same moves."""
    layout = next(iter(variables.values())).layout
    owners = np.array(next(iter(variables.values())).owners)
    source_blocks, source_local = (value.numpy() for value in layout.block_and_local_ids(
        tf.constant(saved_rows, tf.int64)))
    target_blocks, target_local = (value.numpy() for value in layout.block_and_local_ids(
        tf.constant(new_rows, tf.int64)))
    source_ranks, target_ranks = owners[source_blocks], owners[target_blocks]
    ranks = range(workers.size)
    sent = [np.flatnonzero((source_ranks == workers.rank) & (target_ranks == rank))
            for rank in ranks]
    received = [np.flatnonzero((source_ranks == rank) & (target_ranks == workers.rank))
                for rank in ranks]
    most = int(np.bincount(source_ranks * workers.size + target_ranks).max())
    received_moves = np.concatenate(received)
    for variable in variables.values():
        dim = int(variable.shape[1])
        with tf.device(workers.device):
            parts = [tf.reshape(tf.gather(variable.block, source_local[moves]), [-1])
                     if len(moves) else tf.zeros([0], variable.dtype) for moves in sent]
            rows = workers.all_to_all_padded(
                parts, tf.constant([len(moves) * dim for moves in sent]),
                tf.constant([len(moves) * dim for moves in received]),
                tf.constant(most * dim), workers.exchange_keys()[0])
            if len(received_moves):
                ops.reset_rows(variable.block, tf.constant(target_local[received_moves]),
                               tf.reshape(tf.concat(rows, axis=0), [-1, dim]),
                               tf.range(len(received_moves), dtype=tf.int64), table_name)
