"""TFRecord files of `tf.train.Example`.

Keys: "label" (int64, 0 or 1), "dense" (float, num_dense values), one key per categorical
feature (int64 or bytes by the feature's id_type, any number of ids) and "<feature>/weights"
(float, one per id) for weighted features. Examples with a missing or bad label, the wrong
number of dense values or weights, or non-finite values are dropped and counted.
"""

from typing import Iterable, Sequence

import tensorflow as tf

from tf_embedding.job.data import common
from tf_embedding.job.data.spec import DataSpec


def weights_key(feature_name: str) -> str:
    return f"{feature_name}/weights"


def _parse_spec(spec: DataSpec) -> dict[str, tf.io.RaggedFeature]:
    # Everything is variable-length so that wrong lengths become a flag, not a parse error.
    # Ragged, not VarLen: the parser builds the row splits itself, where SparseTensors turned
    # into RaggedTensors cost as much CPU as the parse.
    def ragged(dtype: tf.DType) -> tf.io.RaggedFeature:
        return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
    keys = {"label": ragged(tf.int64), "dense": ragged(tf.float32)}
    for feature in spec.features:
        keys[feature.name] = ragged(tf.string if feature.id_type == "string" else tf.int64)
        if feature.weighted:
            keys[weights_key(feature.name)] = ragged(tf.float32)
    return keys


def decode_examples(serialized: tf.Tensor, spec: DataSpec,
                    require_label: bool = True) -> tuple[common.Batch, tf.Tensor]:
    """Parses a batch of serialized Examples into (batch, valid).

    Raises InvalidArgumentError for bytes that are not an Example or a key of the wrong type
    (readers turn that into a window of malformed records). With require_label=False (serving)
    the label may be absent.
    """
    parsed = tf.io.parse_example(serialized, _parse_spec(spec))
    rows = tf.shape(serialized, out_type=tf.int64)[0]

    label = parsed["label"]
    label_value = label.to_tensor(0, shape=[rows, 1])[:, 0]
    label_ok = tf.equal(label.row_lengths(), 1) & ((label_value == 0) | (label_value == 1))
    valid = label_ok if require_label else label_ok | tf.equal(label.row_lengths(), 0)

    dense = parsed["dense"]
    valid &= tf.equal(dense.row_lengths(), spec.num_dense)
    dense = dense.to_tensor(0.0, shape=[rows, spec.num_dense])
    valid &= tf.reduce_all(tf.math.is_finite(dense), axis=1)

    batch: common.Batch = {"label": tf.cast(label_value == 1, tf.float32), "dense": dense,
                           "ids": {}, "weights": {}}
    for feature in spec.features:
        raw = parsed[feature.name]
        batch["ids"][feature.name] = raw.with_flat_values(common.to_rows(
            raw.flat_values, feature, spec.table(feature.table).id_space))
        if feature.weighted:
            weights = parsed[weights_key(feature.name)]
            valid &= tf.equal(weights.row_lengths(), raw.row_lengths())
            valid &= tf.reduce_all(tf.math.is_finite(weights), axis=1)
            batch["weights"][feature.name] = weights
    return batch, valid


def read_tfrecord(files: Sequence[str], spec: DataSpec, batch_size: int, start_step: int = 0,
                  holdout_every: int = 0, split: str = "train") -> tf.data.Dataset:
    """Batches of Examples from `files`, read in order; see `common.read_batches`."""
    return common.read_batches(tf.data.TFRecordDataset(list(files)), decode_examples, spec,
                               batch_size, start_step, holdout_every, split, may_raise=True)


def to_examples(batch: common.Batch, spec: DataSpec) -> Iterable[tf.train.Example]:
    """Examples for a batch whose ids are rows (as synthetic batches are)."""
    label = batch["label"].numpy()
    dense = batch["dense"].numpy()
    ids = {name: value.to_list() for name, value in batch["ids"].items()}
    weights = {name: value.to_list() for name, value in batch["weights"].items()}
    for row in range(len(label)):
        features = {
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label[row])])),
            "dense": tf.train.Feature(float_list=tf.train.FloatList(value=dense[row])),
        }
        for feature in spec.features:
            row_ids = ids[feature.name][row]
            if feature.id_type == "string":
                value = tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[str(i).encode() for i in row_ids]))
            else:
                value = tf.train.Feature(int64_list=tf.train.Int64List(value=row_ids))
            features[feature.name] = value
            if feature.weighted:
                features[weights_key(feature.name)] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=weights[feature.name][row]))
        yield tf.train.Example(features=tf.train.Features(feature=features))
