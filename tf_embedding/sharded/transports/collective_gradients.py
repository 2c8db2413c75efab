"""The backward half of a multi-worker step: each worker's lookups go to the owners of their
rows with its activation gradients, and each owner applies one fused update per step for the
global batch (docs/multi_worker.md "One step").

One process sums a row's gradient terms (gain x activation-gradient row) in the order of its
table's CSR batch: feature by feature, and within a feature sample by sample over the global
batch. The global batch is the workers' batches in rank order, so an owner that hands the fused
optimizer the pieces (feature f, worker r) in the order f-major, r-minor sums every row's terms
in one process's order, and its rows get one process's bits. That is why lookups (not sums per
id, whose regrouping would change the rounding) travel: per lookup a block-local id, its output
row and its gain, 16 bytes.

The roles are the tables' shardings' (`sharding/worker_row_wise.py`: each lookup's owner, the
owner's update); the collectives are here. Three collectives for all tables: a gather of each
worker's header (per owner its lookup count and how many of its output rows have a lookup in
the owner's block; rows per feature), an all-to-all of the lookups, and an all-to-all of the
activation gradients in which each owner receives only the rows with a lookup in its block (a
sample's ids fall in a few blocks of a table, so a worker's bytes do not grow with the worker
count). The owner finds those rows from the lookups themselves: they are the distinct rows of
the lookups it received, ascending, the order in which the sender gathered them.
"""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.multi_worker.group import WorkerGroup
from tf_embedding.sharded.transports import lookup_packets
from tf_embedding.sharded.transports.collective_rows import split_sizes


def apply_gradients(group: WorkerGroup, shardings: Sequence[Any],
                    batches: Sequence[TableBatch], activation_gradients: Sequence[tf.Tensor],
                    learning_rates: Sequence[tf.Tensor]) -> None:
    """Updates this worker's block of every table with the global batch's gradients. A
    collective: every worker calls it at the same point of its step with its own batch."""
    size, rank = group.size, group.rank
    num_tables = len(shardings)
    tables = [sharding.table for sharding in shardings]
    keys = group.exchange_keys()
    with tf.device(group.device):
        lookups = [sharding.lookups_by_owner(batch, size)
                   for sharding, batch in zip(shardings, batches)]
        # Per table and owner, this worker's output rows with a lookup in the owner's block.
        needed = [[_looked_up_rows(packed) for _, packed in by_owner] for by_owner in lookups]
        header = tf.concat(
            [tf.concat([tf.stack([tf.size(ids, out_type=tf.int64) for ids, _ in by_owner]),
                        tf.stack([tf.size(rows, out_type=tf.int64) for rows in table_rows]),
                        tf.cast(batch.feature_row_counts, tf.int64)], axis=0)
             for by_owner, table_rows, batch in zip(lookups, needed, batches)], axis=0)
        headers = tf.reshape(group.all_gather(header, keys[0]), [size, -1])
        lookup_counts, row_counts, feature_rows = _parse_headers(headers, tables, size)

        # Lookups to their owners: per table, block-local ids then (row, gain) pairs.
        received = group.all_to_all_padded(
            [tf.concat([part for t in range(num_tables) for part in lookups[t][owner]], axis=0)
             for owner in range(size)],
            2 * tf.reduce_sum(lookup_counts[rank], axis=0),
            2 * tf.reduce_sum(lookup_counts[:, :, rank], axis=1),
            2 * tf.reduce_max(tf.reduce_sum(lookup_counts, axis=1)), keys[1])

        # To each owner the activation-gradient rows it needs, every table's in one part.
        dims = tf.constant([state.config.dim for state in tables], tf.int64)
        value_counts = row_counts * dims[None, :, None]  # [worker, T, owner]
        arrived = group.all_to_all_padded(
            [tf.concat([tf.reshape(tf.gather(activation_gradients[t], needed[t][owner]), [-1])
                        for t in range(num_tables)], axis=0)
             for owner in range(size)],
            tf.reduce_sum(value_counts[rank], axis=0),
            tf.reduce_sum(value_counts[:, :, rank], axis=1),
            tf.reduce_max(tf.reduce_sum(value_counts, axis=1)), keys[2])

        # Each worker's lookups and gradients, cut per table once for all tables.
        lookups_by_table = [split_sizes(received[worker], 2 * lookup_counts[worker, :, rank],
                                        num_tables) for worker in range(size)]
        gradients_by_table = [split_sizes(arrived[worker], value_counts[worker, :, rank],
                                          num_tables) for worker in range(size)]
        for t, (sharding, state) in enumerate(zip(shardings, tables)):
            if not sharding.owns_block:
                continue
            pieces = [_feature_batches(
                          lookups_by_table[worker][t],
                          tf.reshape(gradients_by_table[worker][t], [-1, state.config.dim]),
                          feature_rows[t][worker], len(state.feature_indices))
                      for worker in range(size)]
            # f-major, worker-minor: one process's order of the gradient terms.
            ordered = [pieces[worker][feature] for feature in range(len(state.feature_indices))
                       for worker in range(size)]
            sharding.apply_owner(ordered, learning_rates[t])


def _looked_up_rows(packed: tf.Tensor) -> tf.Tensor:
    """The distinct output rows (int64, ascending) of lookups packed as (row, gain) pairs in CSR
    order."""
    return tf.unique(lookup_packets.rows_of(packed)).y


def _parse_headers(headers: tf.Tensor, tables: Sequence, size: int
                   ) -> tuple[tf.Tensor, tf.Tensor, list[list[tf.Tensor]]]:
    """(lookup counts [worker, T, owner], looked-up row counts [worker, T, owner], per table
    per worker its rows per feature) from every worker's header."""
    lookup_counts, row_counts, feature_rows = [], [], []
    offset = 0
    for state in tables:
        num_features = len(state.feature_indices)
        lookup_counts.append(headers[:, offset:offset + size])
        row_counts.append(headers[:, offset + size:offset + 2 * size])
        offset += 2 * size
        feature_rows.append([headers[worker, offset:offset + num_features]
                             for worker in range(size)])
        offset += num_features
    return tf.stack(lookup_counts, axis=1), tf.stack(row_counts, axis=1), feature_rows


def _feature_batches(lookups: tf.Tensor, gradients: tf.Tensor, feature_rows: tf.Tensor,
                     num_features: int) -> list[Any]:
    """One worker's lookups of this owner's block (ids, then packed (row, gain) pairs) and the
    gradients of its looked-up rows (`_looked_up_rows`, [n, dim]), cut into one
    `ops.GradientBatch` per feature over the feature's looked-up rows (rows without a lookup
    here add no gradient term, so leaving them out keeps every row's sum)."""
    ids, rows, gains = lookup_packets.unpack(lookups)
    looked_up = tf.unique(rows).y
    positions = tf.searchsorted(looked_up, rows, side="left", out_type=tf.int64)
    bounds = tf.concat([[0], tf.cumsum(feature_rows)], axis=0)
    batches = []
    for feature in range(num_features):
        start, end = bounds[feature], bounds[feature + 1]
        first, last = tf.unstack(tf.searchsorted(rows, tf.stack([start, end]), side="left"))
        low, high = tf.unstack(tf.searchsorted(looked_up, tf.stack([start, end]), side="left",
                                               out_type=tf.int64))
        row_splits = tf.searchsorted(positions[first:last], tf.range(low, high + 1),
                                     side="left", out_type=tf.int64)
        batches.append((row_splits, ids[first:last], gains[first:last], gradients[low:high]))
    return batches
