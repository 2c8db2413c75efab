"""`profile_data_directory`: sampling training batches into lookup-statistics files.

The engine hands every converted training batch of a replica to `LookupProfiler.observe`. Every
`profile_files.SAMPLE_EVERY`-th one (about 3%, from the first) is profiled: per table, the
batch's example count, its lookups' ids and the block each id lives in under the table's layout
('div' or 'mod', `ShardLayout.block_of`) go to the host (`tf.py_function`), which adds them to
the table's file (`profile_files`). Statistics are written as they are sampled, so a run that
stops early keeps them, and a second model of the same configuration adds to the same files.
"""

import os
from typing import Any, Sequence

import tensorflow as tf
from absl import logging
from tensorflow.python.ops import resource_variable_ops

from tf_embedding.feature_inputs.feature_input import FeatureInput, activation_shape
from tf_embedding import ops
from tf_embedding.sharded import profile_files
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.table_state import TableState


class LookupProfiler:
    """Samples one engine's training batches into `directory`."""

    def __init__(self, directory: str, tables: Sequence[TableState],
                 table_features: Sequence[Sequence[Any]], table_device_counts: Sequence[int],
                 num_replicas: int):
        """`table_features[t]`: the `FeatureConfig`s of `tables[t]`'s features;
        `table_device_counts[t]`: how many devices its `table_devices` named."""
        self._directory = directory
        self._tables = tuple(tables)
        self._parameters = [{
            "table": state.name,
            "vocabulary_size": state.config.vocabulary_size,
            "dim": state.config.dim,
            "combiner": state.config.combiner,
            "num_features": len(state.feature_indices),
            "max_sequence_lengths": [feature.max_sequence_length for feature in features],
            "partition_strategy": state.layout.partition_strategy,
            "num_blocks": len(state.layout.rows),
            "table_devices": device_count,
            "replicas": num_replicas,
        } for state, features, device_count in zip(self._tables, table_features,
                                                   table_device_counts)]
        for parameters in self._parameters:
            profile = profile_files.TableProfile(parameters)
            path = os.path.join(directory, profile.file_name)
            if os.path.exists(path):
                logging.info("Table %s: adding lookup statistics to %s (%d sampled batches "
                             "so far).", profile.table, path,
                             profile_files.read_file(path).batches)
        # The replica batches seen so far; made eagerly, once, on the host, and not mirrored
        # (a strategy's variable creator is bypassed) nor checkpointed (no tracking).
        with tf.init_scope(), tf.device("/cpu:0"):
            self._seen = resource_variable_ops.ResourceVariable(
                tf.constant(0, tf.int64), trainable=False, name="lookup_profile_batches")

    def observe(self, batches: Sequence[TableBatch],
                table_inputs: Sequence[Sequence[FeatureInput]], training: Any) -> None:
        """Counts one replica's batch (`batches[t]`: table t's, from `table_inputs[t]`) if
        `training`, and profiles it if it is a sampled one."""
        if ops.compiling_with_xla():
            raise ValueError(
                "profile_data_directory writes its files from the host (tf.py_function), which "
                "an XLA-compiled function cannot call: compile the training step without "
                "jit_compile, or profile in a run without it (docs/xla.md).")
        training = tf.cast(training, tf.bool)
        seen = self._seen.assign_add(tf.cast(training, tf.int64))
        sampled = tf.logical_and(training, (seen - 1) % profile_files.SAMPLE_EVERY == 0)

        def profile() -> tf.Tensor:
            values = []
            for state, batch, inputs in zip(self._tables, batches, table_inputs):
                ids = tf.gather(batch.unique_ids, batch.inverse_or_identity())
                examples = activation_shape(inputs[0], state.config.dim)[0]
                values += [examples, ids, state.layout.block_of(ids)]
            return tf.py_function(self._write, values, tf.int64)

        tf.cond(sampled, profile, lambda: tf.constant(0, tf.int64))

    def _write(self, *values: tf.Tensor) -> tf.Tensor:
        for index, (state, parameters) in enumerate(zip(self._tables, self._parameters)):
            examples, ids, blocks = values[3 * index:3 * index + 3]
            profile = profile_files.TableProfile(parameters)
            profile.add_batch(int(examples), ids.numpy(), blocks.numpy(), len(state.layout.rows))
            profile_files.add_to_file(self._directory, profile)
        return tf.constant(0, tf.int64)
