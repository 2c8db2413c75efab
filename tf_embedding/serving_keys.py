"""A dynamic table's keys at serving time, in stock TensorFlow (docs/dynamic_vocabulary.md).

Training keeps a dynamic table's key index in the op library (`sharded/dynamic_table.py`); a
SavedModel must load where that library is not installed. `ServingKeyIndex` holds the index as
serving needs it: a stock `tf.lookup.experimental.MutableHashTable` from key to table row,
filled from the index a training checkpoint wrote. The table hashes its keys (absl's hash):
keys that share their low bits, which an identity hash (`key & mask`) would pile into one
bucket, look up as fast as random ones (docs/performance.md). A SavedModel saves the hash
table's entries in its variables (no key list as a graph constant, so no 2 GB limit) and
restores them with stock ops, as TF Serving and `tf.saved_model.load` do.

`TPUEmbeddingForServing` holds a `RestoredKeyIndex`, which in a checkpoint stands where
training's `DynamicTable` stands (`<table>.dynamic`) and saves the index records it restored
unchanged, so that it writes the keys it reads.
"""

from typing import Any, Mapping, Protocol

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_lookup_ops
from tensorflow.python.trackable import base as trackable_base

from tf_embedding import dynamic_vocabulary

# The training index's checkpoint tensors (`dynamic_index_ops.DynamicIndexState`): [rows, 3]
# records (key, count, last step) of each table row (key -1: free) and of the candidates, and
# six statistics.
_RECORDS = ("row_records", "candidate_records", "stats")
_RECORD_WIDTH = 3
_STATISTICS = 6


class KeyIndex(Protocol):
    """What the stock lookups of a dynamic table's features read its keys' rows from."""

    def rows(self, keys: tf.Tensor, feature_path: str) -> tf.Tensor:
        """Each key's table row, -1 for a key without one."""


class ServingKeyIndex(trackable_base.Trackable):
    """One dynamic table's key-to-row map, in a stock hash table, for stock lookups."""

    def __init__(self, table: Any):
        self._table_name = table.name
        self._capacity = table.vocabulary_size
        self.key_rows = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.int64, default_value=-1, name=f"{table.name}_key_rows")

    def _trackable_children(self, save_type=trackable_base.SaveType.CHECKPOINT, **kwargs):
        del save_type, kwargs
        return {"key_rows": self.key_rows}

    def rows(self, keys: tf.Tensor, feature_path: str) -> tf.Tensor:
        """Each key's table row, -1 for a key without one; a negative key fails the lookup
        with InvalidArgumentError naming the table and the feature (as in training)."""
        keys = tf.cast(keys, tf.int64)
        valid = tf.debugging.Assert(tf.reduce_all(keys >= 0), [
            f"Table '{self._table_name}', feature '{feature_path}': a dynamic table's keys must "
            "be int64 >= 0; smallest key:", tf.reduce_min(keys)])
        with tf.control_dependencies([valid]):
            rows = self.key_rows.lookup(keys)
        rows.set_shape(keys.shape)  # a hash table's lookup does not infer it
        return rows

    def load(self, row_records: tf.Tensor) -> tf.Operation:
        """Replaces the map with the keys of `row_records` (the training index's, one record
        per table row), after checking it has one record per row of this table."""
        row_records = tf.convert_to_tensor(row_records, tf.int64)
        fits = tf.debugging.Assert(
            tf.reduce_all(tf.equal(tf.shape(row_records, tf.int64),
                                   [self._capacity, _RECORD_WIDTH])),
            [f"Table {self._table_name}: a stored dynamic index of shape", tf.shape(row_records),
             f"does not fit its capacity of {self._capacity} rows."])
        with tf.control_dependencies([fits]):
            return gen_lookup_ops.lookup_table_import_v2(self.key_rows.resource_handle,
                                                         *key_rows_of(row_records))


class RestoredKeyIndex(ServingKeyIndex):
    """A `ServingKeyIndex` restored from a training checkpoint: it stands where training's
    index stands, and saves the records it restored unchanged. A SavedModel holds the hash
    table alone."""

    def __init__(self, table: Any):
        super().__init__(table)
        self._records = _IndexRecords(self)

    def _trackable_children(self, save_type=trackable_base.SaveType.CHECKPOINT, **kwargs):
        if save_type == trackable_base.SaveType.SAVEDMODEL:
            return super()._trackable_children(save_type, **kwargs)
        return {"index": self._records}

    def empty_records(self) -> dict[str, np.ndarray]:
        """The records of an index that holds no key, as training's export writes them."""
        free = np.zeros([self._capacity, _RECORD_WIDTH], np.int64)
        free[:, 0] = -1
        return {"row_records": free,
                "candidate_records": np.zeros([0, _RECORD_WIDTH], np.int64),
                "stats": np.zeros([_STATISTICS], np.int64)}


def key_rows_of(row_records: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The (keys, rows) of the rows that hold a key, in a training index's row records."""
    keys = row_records[:, 0]
    rows = tf.where(keys >= 0)[:, 0]
    return tf.gather(keys, rows), rows


class _IndexRecords(trackable_base.Trackable):
    """The training index's checkpoint tensors, kept as restored so that a save writes them
    back, and loaded into the key map on restore."""

    def __init__(self, index: RestoredKeyIndex):
        self._index = index
        initial = index.empty_records()
        # Unknown shapes: a restore brings the candidates' count.
        self._values = {name: tf.Variable(initial[name], trainable=False,
                                          shape=tf.TensorShape(None), name=f"{name}_restored")
                        for name in _RECORDS}

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        return {name: variable.read_value() for name, variable in self._values.items()}

    def _restore_from_tensors(self, restored_tensors: Mapping[str, tf.Tensor]) -> Any:
        loaded = self._index.load(restored_tensors["row_records"])
        with tf.control_dependencies([loaded]):
            return tf.group(*(self._values[name].assign(restored_tensors[name])
                              for name in _RECORDS))


def restored_key_indexes(embedding: Any, table_configs: Any) -> dict[str, RestoredKeyIndex]:
    """A `RestoredKeyIndex` for each dynamic table (by table name), tracked by `embedding` as
    `<table>.dynamic`, where training tracks the table's index."""
    indexes = {}
    for table in table_configs:
        if dynamic_vocabulary.dynamic_of(table) is not None:
            indexes[table.name] = RestoredKeyIndex(table)
            embedding._track_trackable(  # pylint: disable=protected-access
                indexes[table.name], name=dynamic_vocabulary.tracking_name(table.name))
    return indexes
