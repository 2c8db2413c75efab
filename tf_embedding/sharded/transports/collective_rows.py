"""The forward half of a multi-worker step: each worker's requests go to the owners of the
tables' blocks, and the answers come back (the features' distribution, the owner's lookup, the
outputs' distribution back; docs/multi_worker.md "One step"). What a request and its answer are
is the table's sharding's (`sharding/worker_row_wise.py`: unique ids, their rows;
`sharding/worker_table_wise.py`: a worker's lookups, their pooled activations); the collectives
are here.

All tables travel together, so a step's forward costs three collectives whatever the table
count: a gather of the request sizes (every worker learns the whole [requester, table, owner]
matrices of request lengths and answer rows, hence the capacity of each all-to-all), an
all-to-all of the requests, an all-to-all of the answers. Either way the activations keep one
process's bits: rows come back and are combined in the requester's input order, or each
sample's lookups are pooled by the fused lookup on the owner, in their order.
"""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.multi_worker.group import WorkerGroup


def split_sizes(value: tf.Tensor, sizes: tf.Tensor, count: int) -> list[tf.Tensor]:
    """`value` (1-D) cut into `count` consecutive pieces of `sizes` (int64 [count])."""
    return tf.split(value, tf.cast(sizes, tf.int64), num=count)


def fetch(group: WorkerGroup, shardings: Sequence[Any],
          batches: Sequence[TableBatch]) -> list[tf.Tensor]:
    """What each table's sharding asks its owners for this replica's batch: float32
    [n_t, dim_t] per table (`fetched`: rows of the unique ids, or pooled activations). A
    collective: every worker calls it at the same point of its step, each with its own batch."""
    size, rank = group.size, group.rank
    num_tables = len(shardings)
    keys = group.exchange_keys()
    with tf.device(group.device):
        # Requester: per table and owner, the request (int64) and the rows of its answer.
        requests = [sharding.requests(batch, size)
                    for sharding, batch in zip(shardings, batches)]
        sizes = tf.stack([tf.stack([tf.stack([tf.size(request, out_type=tf.int64), rows])
                                    for request, rows in by_owner])
                          for by_owner in requests])  # [T, owner, 2]
        all_sizes = tf.reshape(group.all_gather(tf.reshape(sizes, [-1]), keys[0]),
                               [size, num_tables, size, 2])  # [requester, T, owner, 2]
        lengths, answer_rows = all_sizes[..., 0], all_sizes[..., 1]
        dims = tf.constant([sharding.table.config.dim for sharding in shardings], tf.int64)

        # Requests to their owners, every table's for one owner in one part.
        received = group.all_to_all_padded(
            [tf.concat([requests[t][owner][0] for t in range(num_tables)], axis=0)
             for owner in range(size)],
            tf.reduce_sum(lengths[rank], axis=0), tf.reduce_sum(lengths[:, :, rank], axis=1),
            tf.reduce_max(tf.reduce_sum(lengths, axis=1)), keys[1])
        by_requester = [split_sizes(part, lengths[requester, :, rank], num_tables)
                        for requester, part in enumerate(received)]

        # Owner: the answer to every request, by each table's sharding.
        answers_back: list[list[tf.Tensor]] = [[] for _ in range(size)]
        for t, sharding in enumerate(shardings):
            answers = sharding.answer([by_requester[requester][t] for requester in range(size)],
                                      tf.unstack(answer_rows[:, t, rank], num=size))
            for requester, answer in enumerate(answers):
                answers_back[requester].append(tf.reshape(answer, [-1]))

        # Answers back to the requesters, every table's in one part.
        value_counts = answer_rows * dims[None, :, None]
        arrived = group.all_to_all_padded(
            [tf.concat(parts, axis=0) for parts in answers_back],
            tf.reduce_sum(value_counts[:, :, rank], axis=1),
            tf.reduce_sum(value_counts[rank], axis=0),
            tf.reduce_max(tf.reduce_sum(value_counts, axis=1)), keys[2])
        by_owner: list[list[tf.Tensor]] = [[] for _ in range(num_tables)]
        for owner, values in enumerate(arrived):
            for t, part in enumerate(split_sizes(values, value_counts[rank, :, owner],
                                                 num_tables)):
                by_owner[t].append(tf.reshape(part, [-1, shardings[t].table.config.dim]))
        return [sharding.assemble(parts) for sharding, parts in zip(shardings, by_owner)]
