"""The check that makes bad input on one worker fail the step on every worker.

A worker whose batch holds an id past its table, a malformed SparseTensor or RaggedTensor, or
weights not laid out as their ids fails in the CSR conversion (the kernel's message names the
table and feature); its peers, which never hear of it, would wait in the step's first exchange
until the collective timeout. So under MultiWorkerMirroredStrategy every conversion (`enqueue`,
and the Keras front ends' lookups: `Engine.convert_tables`) first gathers, from every worker in
one small gather, each feature's largest id and, per table, the first feature the conversion
would refuse (`TfeFeaturesCheck`, the conversion's own checks, reported instead of raised;
strings cannot travel through collectives). Every worker checks them all and raises the same
InvalidArgumentError, naming the feature, its table and the workers whose batch is bad (the
failing worker adds its own kernel's message), before any conversion or exchange: no table
changes and the group's collectives stay usable (a failed collective would abort them until a
restart). Negative ids need no check: the conversion drops them, as stock TF's lookups do; a
dynamic table's keys are checked the other way: none negative, any size.
"""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding import dynamic_vocabulary, ops
from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding.sharded.multi_worker.group import WorkerGroup


def _ids(feature: Any) -> tf.Tensor:
    """A feature's ids (a dense input's values, a sparse or ragged one's values), int64."""
    values = feature.values if isinstance(feature, (tf.SparseTensor, tf.RaggedTensor)) \
        else feature
    if isinstance(values, tf.RaggedTensor):  # more than one ragged dimension
        values = values.flat_values
    return tf.reshape(tf.cast(values, tf.int64), [-1])


def check_batches_everywhere(group: WorkerGroup, tables: Sequence[Any],
                             table_inputs: Sequence[Sequence[FeatureInput]]) -> tf.Operation:
    """An op that fails, on every worker alike, if any worker's batch holds an id past its
    feature's table or a feature the conversion refuses (`table_inputs[t]`: the FeatureInputs
    of `tables[t]`, a TableConfig). A collective: every worker's conversion runs it."""
    flat = [(table, feature) for table, inputs in zip(tables, table_inputs)
            for feature in inputs]
    with tf.device(group.device):
        extremes = [_extreme_id(table, feature) for table, feature in flat]
        refused = [ops.features_check(table.name,
                                      dynamic_vocabulary.conversion_vocabulary_size(table),
                                      table.combiner, inputs)
                   for table, inputs in zip(tables, table_inputs)]
        local = tf.stack(extremes + [tf.cast(index, tf.int64) for index, _ in refused])
        by_worker = tf.reshape(group.all_gather(local, group.exchange_keys()[0]),
                               [group.size, len(flat) + len(tables)])
        range_checks = [_range_check(group, by_worker[:, index], table, feature.name)
                        for index, (table, feature) in enumerate(flat)]
        with tf.control_dependencies(range_checks):
            layout_checks = [
                _layout_check(group, tf.equal(by_worker[:, len(flat) + t], position), table,
                              feature.name, tf.where(tf.equal(index, position), message, ""))
                for t, (table, inputs, (index, message)) in enumerate(
                    zip(tables, table_inputs, refused))
                for position, feature in enumerate(inputs)]
        return tf.group(range_checks + layout_checks)


def _extreme_id(table: Any, feature: FeatureInput) -> tf.Tensor:
    """What a feature's range check reads (int64 scalar): its largest id, or for a dynamic
    table, whose ids are keys (any int64 >= 0), its smallest."""
    ids = _ids(feature.tensor)
    if dynamic_vocabulary.dynamic_of(table) is not None:
        return tf.reduce_min(tf.concat([ids, [0]], axis=0))
    return tf.reduce_max(tf.concat([ids, [-1]], axis=0))


def _range_check(group: WorkerGroup, extreme_by_worker: tf.Tensor, table: Any,
                 path: str) -> tf.Operation:
    if dynamic_vocabulary.dynamic_of(table) is not None:
        return tf.debugging.assert_non_negative(
            extreme_by_worker,
            message=(f"Table {table.name}, feature {path}: a key is negative on a worker (a "
                     "dynamic table's keys are int64 >= 0; its smallest key on each worker, by "
                     "rank, follows); the step changed no table"),
            summarize=group.size)
    return tf.debugging.assert_less(
        extreme_by_worker, tf.constant(table.vocabulary_size, tf.int64),
        message=(f"Table {table.name}, feature {path}: an id is out of range for vocabulary "
                 f"size {table.vocabulary_size} on a worker (its largest id on each worker, by "
                 "rank, follows); the step changed no table"),
        summarize=group.size)


def _layout_check(group: WorkerGroup, refused_by_worker: tf.Tensor, table: Any, path: str,
                  own_message: tf.Tensor) -> tf.Operation:
    return tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(refused_by_worker)),
        [f"Table {table.name}, feature {path}: the batch of a worker is malformed (a "
         "SparseTensor's indices out of bounds or order, a RaggedTensor's row splits, or "
         "weights not laid out as their ids); the step changed no table. Whether each "
         "worker's batch is malformed, by rank, and this worker's own error:",
         refused_by_worker, own_message], summarize=group.size)
