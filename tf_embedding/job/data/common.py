"""What every reader shares: the batch layout, file lists, id hashing, row filtering and the
windowed reading pipeline.

A batch is a dict:
  "label":     float32 [B], 0 or 1
  "dense":     float32 [B, num_dense], raw (the model applies the spec's dense transform)
  "ids":       {feature: int64 RaggedTensor [B, None]}, rows of the feature's table
  "weights":   {feature: float32 RaggedTensor [B, None]}, for weighted features only
  "malformed": int64 scalar, input records dropped while making this batch
Synthetic batches also carry "probability": float32 [B], the planted click probability.
"""

from typing import Any, Callable

import tensorflow as tf

from tf_embedding.feature_inputs.buckets import pad_ids_to_power_of_two
from tf_embedding.job.data.spec import DataSpec, FeatureSpec

Batch = dict[str, Any]
# (window of raw records, spec) -> (batch, valid): a reader's parser.
Decode = Callable[[tf.Tensor, DataSpec], tuple[Batch, tf.Tensor]]


def expand(patterns: list[str], flag: str) -> list[str]:
    """Files matching the patterns, in the given order (each pattern's matches sorted)."""
    files = []
    for pattern in patterns:
        matches = sorted(tf.io.gfile.glob(pattern))
        if not matches:
            raise ValueError(f"{flag}: no file matches {pattern!r}")
        files.extend(matches)
    return files


def to_rows(values: tf.Tensor, feature: FeatureSpec, id_space: int) -> tf.Tensor:
    """Maps raw values to table rows: ints modulo the vocabulary, strings by fingerprint hash;
    for a dynamic table's keys (`id_space` -1, `TableSpec.id_space`) ints as they are and
    strings hashed into the int64s >= 0.

    Both are stock ops, so serving graphs that hash stay loadable without this package.
    """
    if feature.id_type == "string":
        return tf.strings.to_hash_bucket_fast(values, _KEY_SPACE if id_space < 0 else id_space)
    values = tf.cast(values, tf.int64)
    return values if id_space < 0 else tf.math.floormod(values, id_space)


# The int64s >= 0, less one: string keys are Fingerprint64 % this (the TSV op's too).
_KEY_SPACE = 2**63 - 1


def filter_rows(batch: Batch, valid: tf.Tensor) -> Batch:
    """Keeps the rows where `valid` holds and adds the dropped count to "malformed".

    A batch without invalid rows (nearly every one) is passed on as it is: gathering its ragged
    tensors cost a tenth of a TFRecord batch's parsing.
    """
    keys = [key for key in ("label", "dense", "probability") if key in batch]
    malformed = batch.get("malformed", tf.constant(0, tf.int64))

    def kept() -> Batch:
        keep = tf.where(valid)[:, 0]
        out = {key: tf.gather(batch[key], keep) for key in keys}
        for group in ("ids", "weights"):
            out[group] = {name: tf.gather(value, keep) for name, value in batch[group].items()}
        dropped = tf.size(valid, out_type=tf.int64) - tf.size(keep, out_type=tf.int64)
        return dict(out, malformed=malformed + dropped)

    def whole() -> Batch:
        return dict({key: batch[key] for key in keys + ["ids", "weights"]},
                    malformed=tf.identity(malformed))
    return tf.cond(tf.reduce_all(valid), whole, kept)


def clear_invalid(batch: Batch, valid: tf.Tensor) -> Batch:
    """Empties the id lists of invalid rows, keeping every row (serving answers each input)."""
    def clear(value: tf.RaggedTensor) -> tf.RaggedTensor:
        return tf.ragged.boolean_mask(
            value, value.with_flat_values(tf.repeat(valid, value.row_lengths())))
    out = dict(batch)
    for group in ("ids", "weights"):
        out[group] = {name: clear(value) for name, value in batch[group].items()}
    out["dense"] = tf.where(valid[:, None], batch["dense"], 0.0)
    return out


def empty_batch(spec: DataSpec, malformed: tf.Tensor) -> Batch:
    """A batch without rows, standing for a window of records that could not be parsed."""
    def ragged(dtype: tf.DType) -> tf.RaggedTensor:
        return tf.RaggedTensor.from_row_lengths(tf.zeros([0], dtype), tf.zeros([0], tf.int64))
    return {
        "label": tf.zeros([0], tf.float32),
        "dense": tf.zeros([0, spec.num_dense], tf.float32),
        "ids": {f.name: ragged(tf.int64) for f in spec.features},
        "weights": {f.name: ragged(tf.float32) for f in spec.features if f.weighted},
        "malformed": tf.cast(malformed, tf.int64),
    }


def record_windows(records: tf.data.Dataset, batch_size: int, start_step: int,
                   holdout_every: int, split: str) -> tf.data.Dataset:
    """Groups raw records (lines or serialized examples) into one window per step.

    With holdout_every > 0, record i is held out (belongs to split "eval", not "train") when
    i % holdout_every == holdout_every - 1. The training split repeats forever and window k
    always holds the same records, so a run resumed at step k reads what an uninterrupted run
    would have read.

    The records are taken batch_size at a time and the held-out ones dropped from each such
    chunk by one mask (a filter function per record cost ~40 µs of CPU a record, several times
    a training step's work); `rebatch` then cuts the kept records into windows as
    `unbatch().batch()` would, without a step per record.
    """
    chunks = records.batch(batch_size)
    if holdout_every > 0:
        def kept(index: tf.Tensor, chunk: tf.Tensor) -> tf.Tensor:
            position = index * batch_size + tf.range(tf.size(chunk, out_type=tf.int64))
            held_out = tf.equal(position % holdout_every, holdout_every - 1)
            return tf.boolean_mask(chunk, held_out if split == "eval" else ~held_out)
        chunks = chunks.enumerate().map(kept)
    if split == "train":
        chunks = chunks.repeat()
    return chunks.rebatch(batch_size).skip(start_step)


def parse_windows(windows: tf.data.Dataset, decode: Decode, spec: DataSpec) -> tf.data.Dataset:
    """Parses windows in parallel, in order, never failing and never shifting steps.

    `decode` may raise (TFRecord: bytes that are not an Example); its invalid rows are dropped
    (`filter_rows`). A window that fails is decoded again without the records that fail alone,
    which count as malformed; a window where every record fails becomes an empty batch.
    """
    @tf.autograph.experimental.do_not_convert
    def parse(window: tf.Tensor) -> Batch:
        return filter_rows(*decode(window, spec))

    @tf.autograph.experimental.do_not_convert
    def parse_or_fall_back(window: tf.Tensor) -> tf.data.Dataset:
        whole = tf.data.Dataset.from_tensors(window).map(parse).ignore_errors()
        size = tf.size(window, out_type=tf.int64)

        @tf.autograph.experimental.do_not_convert
        def probe(index: tf.Tensor, record: tf.Tensor) -> tuple[tf.Tensor, Any]:
            # The decoded record is returned, not just depended on: tf.data prunes a parse that
            # only a control dependency asks for, and then no record fails alone.
            return index, decode(record[None], spec)

        @tf.autograph.experimental.do_not_convert
        def parse_subset(good: tf.Tensor) -> Batch:
            batch = parse(tf.gather(window, good))
            return dict(batch, malformed=batch["malformed"] + size - tf.size(good, tf.int64))

        subset = tf.data.Dataset.from_tensor_slices((tf.range(size), window)).map(
            probe).ignore_errors().map(lambda index, _: index).batch(
                tf.maximum(size, 1)).map(parse_subset)
        nothing = tf.data.Dataset.from_tensors(size).map(lambda n: empty_batch(spec, n))
        # Lazily evaluated: the fallbacks run only when the whole-window parse fails.
        return whole.concatenate(subset).concatenate(nothing).take(1)
    return windows.interleave(parse_or_fall_back, cycle_length=2,
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def read_batches(records: tf.data.Dataset, decode: Decode, spec: DataSpec, batch_size: int,
                 start_step: int, holdout_every: int, split: str,
                 may_raise: bool) -> tf.data.Dataset:
    """Batches of `records` (lines or serialized examples) in order, decoded by `decode`, with
    invalid rows dropped; `record_windows` says which records each step reads.

    `may_raise`: `decode` can fail on a window (TFRecord: bytes that are not an Example), so
    windows go through `parse_windows`' fallbacks. A decoder that flags bad records instead of
    failing (TSV) needs no fallback and is mapped directly.
    """
    windows = record_windows(records, batch_size, start_step, holdout_every, split)
    if may_raise:
        batches = parse_windows(windows, decode, spec)
    else:
        batches = windows.map(
            tf.autograph.experimental.do_not_convert(lambda w: filter_rows(*decode(w, spec))),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return batches.prefetch(tf.data.AUTOTUNE)


def ids_padded_to_powers_of_two(batch: Batch) -> Batch:
    """The batch with each feature's ids (and weights) as SparseTensors padded to a power of
    two by lookups the features prune (pad_ids_to_power_of_two): the same training."""
    ids, weights = {}, {}
    for name, feature_ids in batch["ids"].items():
        ids[name], padded_weights = pad_ids_to_power_of_two(feature_ids,
                                                            batch["weights"].get(name))
        if padded_weights is not None:
            weights[name] = padded_weights
    return {**batch, "ids": ids, "weights": weights}
