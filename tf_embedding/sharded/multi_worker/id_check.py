"""The check that makes an out-of-range id on one worker fail the step on every worker.

A worker whose batch holds an id past its table fails in the CSR conversion (the kernel's
message names the table and feature); its peers, which never hear of it, would wait in the
step's first exchange until the collective timeout. So under MultiWorkerMirroredStrategy every
`enqueue` first gathers each feature's largest id from every worker (one small gather) and every
worker checks them all: all raise the same InvalidArgumentError, naming the feature, its table
and each worker's largest id, before any conversion or exchange, so no table changes and the
group's collectives stay usable (a failed collective would abort them until a restart).
Negative ids need no check: the conversion drops them, as stock TF's lookups do.
"""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding.sharded.multi_worker.group import WorkerGroup


def _ids(feature: Any) -> tf.Tensor:
    """A feature's ids (a dense input's values, a sparse or ragged one's values), int64."""
    values = feature.values if isinstance(feature, (tf.SparseTensor, tf.RaggedTensor)) \
        else feature
    if isinstance(values, tf.RaggedTensor):  # more than one ragged dimension
        values = values.flat_values
    return tf.reshape(tf.cast(values, tf.int64), [-1])


def check_ids_everywhere(group: WorkerGroup, feature_paths: Sequence[str],
                         table_configs: Sequence[Any], flat_inputs: Sequence[Any]
                         ) -> tf.Operation:
    """An op that fails, on every worker alike, if any worker's `flat_inputs` hold an id past
    its feature's table (`table_configs[i]` is feature i's). A collective: every worker's
    enqueue runs it."""
    with tf.device(group.device):
        largest = tf.stack([tf.reduce_max(tf.concat([_ids(feature), [-1]], axis=0))
                            for feature in flat_inputs])
        by_worker = tf.reshape(group.all_gather(largest, group.exchange_keys()[0]),
                               [group.size, len(flat_inputs)])
        checks = []
        for index, (path, table) in enumerate(zip(feature_paths, table_configs)):
            checks.append(tf.debugging.assert_less(
                by_worker[:, index], tf.constant(table.vocabulary_size, tf.int64),
                message=(f"Table {table.name}, feature {path}: an id is out of range for "
                         f"vocabulary size {table.vocabulary_size} on a worker (its largest "
                         "id on each worker, by rank, follows); the step changed no table"),
                summarize=group.size))
        return tf.group(checks)
