"""The forward half of a multi-worker step: each worker's unique ids go to the workers that own
their rows, and the rows come back (the features' distribution, the owner's lookup, the rows'
distribution back; docs/multi_worker.md "One step"). The roles are the tables' shardings'
(`sharding/worker_row_wise.py`: which ids go to which owner, the owner's lookup); the
collectives are here.

All tables travel together, so a step's forward costs three collectives whatever the table
count: a gather of the id counts (every worker learns the whole [requester, table, owner]
matrix, hence the capacity of each all-to-all), an all-to-all of block-local ids, an all-to-all
of rows. Rows, not partial sums, come back, so the requesting worker combines them in its input
order exactly as one process combines the same rows: the activations keep one process's bits.
"""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding.sharded.multi_worker.group import WorkerGroup


def split_sizes(value: tf.Tensor, sizes: tf.Tensor, count: int) -> list[tf.Tensor]:
    """`value` (1-D) cut into `count` consecutive pieces of `sizes` (int64 [count])."""
    return tf.split(value, tf.cast(sizes, tf.int64), num=count)


def gather_rows(group: WorkerGroup, shardings: Sequence[Any],
                unique_ids: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """The rows of each table's `unique_ids` (distinct, in layout order), from their owners:
    float32 [len(unique_ids[t]), dim_t] per table. A collective: every worker calls it at the
    same point of its step, each with its own ids. `shardings` are the tables'
    `WorkerRowWise` shardings."""
    size, rank = group.size, group.rank
    num_tables = len(shardings)
    tables = [sharding.table for sharding in shardings]
    keys = group.exchange_keys()
    with tf.device(group.device):
        # Requester: each table's block-local ids per owner.
        local_ids = [sharding.ids_by_owner(ids, size)
                     for sharding, ids in zip(shardings, unique_ids)]
        counts = tf.stack([tf.stack([tf.size(part, out_type=tf.int64) for part in parts])
                           for parts in local_ids])  # [T, owner]
        all_counts = tf.reshape(group.all_gather(tf.reshape(counts, [-1]), keys[0]),
                                [size, num_tables, size])  # [requester, T, owner]
        dims = tf.constant([state.config.dim for state in tables], tf.int64)

        # Ids to their owners, every table's for one owner in one part.
        received = group.all_to_all_padded(
            [tf.concat([local_ids[t][owner] for t in range(num_tables)], axis=0)
             for owner in range(size)],
            tf.reduce_sum(counts, axis=0), tf.reduce_sum(all_counts[:, :, rank], axis=1),
            tf.reduce_max(tf.reduce_sum(all_counts, axis=1)), keys[1])
        by_requester = [split_sizes(ids, all_counts[requester, :, rank], num_tables)
                        for requester, ids in enumerate(received)]

        # Owner: the rows of every request, one lookup per table of this worker's block.
        rows_back: list[list[tf.Tensor]] = [[] for _ in range(size)]
        for t, sharding in enumerate(shardings):
            requests = [by_requester[requester][t] for requester in range(size)]
            rows = sharding.owner_rows(tf.concat(requests, axis=0))
            for requester, part in enumerate(
                    tf.split(rows, all_counts[:, t, rank], num=size)):
                rows_back[requester].append(tf.reshape(part, [-1]))

        # Rows back to the requesters, every table's in one part.
        value_counts = all_counts * dims[None, :, None]
        arrived = group.all_to_all_padded(
            [tf.concat(parts, axis=0) for parts in rows_back],
            tf.reduce_sum(value_counts[:, :, rank], axis=1),
            tf.reduce_sum(value_counts[rank], axis=0),
            tf.reduce_max(tf.reduce_sum(value_counts, axis=1)), keys[2])
        per_table: list[list[tf.Tensor]] = [[] for _ in range(num_tables)]
        for owner, values in enumerate(arrived):
            for t, part in enumerate(split_sizes(values, value_counts[rank, :, owner],
                                                 num_tables)):
                per_table[t].append(tf.reshape(part, [-1, tables[t].config.dim]))
        return [tf.concat(parts, axis=0) for parts in per_table]

