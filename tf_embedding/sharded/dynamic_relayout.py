"""A dynamic table's checkpoint restored onto another block layout (another block count or
partition strategy, the same capacity): the index places each admitted key in a row of the
block its hash names under the new layout (`dynamic_index_import_placed`,
cc/core/dynamic_relayout.h), and the key's rows (the parameters and every optimizer slot) move
with it here, so each key keeps its values. Candidates have no row.

Done while the table is built with a deferred restore (`tf.train.Checkpoint.read` before the
first `enqueue` or `build`), when the tables' variables already hold the checkpoint's rows:
`move_rows` where this process writes every block (its devices, parameter-server tasks),
`move_worker_rows` on MultiWorkerMirroredStrategy workers, each holding its own block, whose
identical index copies give every worker the same moves."""

from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded.layout import ShardLayout
from tf_embedding.sharded.multi_worker.group import WorkerGroup


def move_rows(variables: Mapping[str, Any], layout: ShardLayout, saved_rows: tf.Tensor,
              new_rows: tf.Tensor, *, table_name: str) -> list[Any]:
    """The ops that move table rows `saved_rows` to `new_rows` in every variable of a table
    (parameters and slots, each a variable of `layout`'s blocks), eagerly or in a traced
    restore: each variable's rows are all read before any is written, since a row may be
    both, and read in place (`ShardLayout.gather_block`: a stock gather would make every later
    in-place update of the block copy it)."""
    source_blocks, source_local = layout.block_and_local_ids(saved_rows)
    target_blocks, target_local = layout.block_and_local_ids(new_rows)
    positions = tf.range(tf.size(saved_rows))  # int32, dynamic_stitch's index type
    moves = []
    for variable in variables.values():
        blocks = list(variable)
        parts, part_positions = [], []
        for index, (block, device) in enumerate(zip(blocks, layout.devices)):
            mine = tf.equal(source_blocks, index)
            with tf.device(device):
                parts.append(layout.gather_block(block, tf.boolean_mask(source_local, mine),
                                                 table_name))
            part_positions.append(tf.boolean_mask(positions, mine))
        values = tf.dynamic_stitch(part_positions, parts)
        for index, (block, device) in enumerate(zip(blocks, layout.devices)):
            mine = tf.equal(target_blocks, index)
            with tf.device(device):
                moves.append(ops.reset_rows(
                    block, tf.boolean_mask(target_local, mine), values,
                    tf.cast(tf.boolean_mask(positions, mine), tf.int64), table_name))
    return moves


def move_worker_rows(variables: Mapping[str, Any], workers: WorkerGroup, saved_rows: tf.Tensor,
                     new_rows: tf.Tensor, *, table_name: str) -> list[Any]:
    """`move_rows` for a table whose blocks are MultiWorkerMirroredStrategy workers'
    (`WorkerBlockVariable`s), eagerly (as a restore there runs): each worker sends the moved
    rows its block holds to the rank whose block takes them, in one all-to-all per variable. A
    collective: every worker calls it, with the same moves (its copy of the index's)."""
    saved_rows, new_rows = saved_rows.numpy(), new_rows.numpy()
    if not len(saved_rows):
        return []
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
            parts = [tf.reshape(ShardLayout.gather_block(
                         variable.block, tf.constant(source_local[moves]), table_name), [-1])
                     if len(moves) else tf.zeros([0], variable.dtype) for moves in sent]
            rows = workers.all_to_all_padded(
                parts, tf.constant([len(moves) * dim for moves in sent]),
                tf.constant([len(moves) * dim for moves in received]),
                tf.constant(most * dim), workers.exchange_keys()[0])
            if len(received_moves):
                ops.reset_rows(variable.block, tf.constant(target_local[received_moves]),
                               tf.reshape(tf.concat(rows, axis=0), [-1, dim]),
                               tf.range(len(received_moves), dtype=tf.int64), table_name)
    return []
