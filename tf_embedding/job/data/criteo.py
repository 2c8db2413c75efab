"""Criteo-format TSV: label, dense columns, one column per categorical feature.

A line is `label \\t dense_1 .. dense_D \\t cat_1 .. cat_F` (Criteo: D = 13 integers, F = 26 hex
strings). Empty cells are missing values: dense 0, categorical no id. A categorical cell may
hold several ids separated by ',' and, for weighted features, each id may carry `:weight`
(default 1). A malformed line is flagged, then dropped and counted, and never stops a run.

The rules are written once as TensorFlow string ops (`decode_lines`), which serving graphs run
as they must hold stock ops only, and once as one op (`TfeDecodeTsv`, `decode_labeled_lines`),
which training reads with: the string ops cost ~6 µs of CPU a line, more than a training step's
share of it. tests/job/test_decode_tsv_op.py holds the two equal.
"""

from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from tf_embedding.job.data import common, input_ops
from tf_embedding.job.data.spec import DataSpec

_FLOAT = r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"
# int64 holds every 18-digit number; longer ones would make StringToNumber fail.
_INT = r"-?[0-9]{1,18}"


def num_columns(spec: DataSpec) -> int:
    """Columns of a labeled line."""
    return 1 + spec.num_dense + len(spec.features)


def decode_labeled_lines(lines: tf.Tensor, spec: DataSpec) -> tuple[common.Batch, tf.Tensor]:
    """Parses a batch of labeled lines into (batch, valid) in one op; rows of invalid lines are
    meaningless."""
    features = [input_ops.TsvFeature(f.name, f.id_type == "string", f.weighted,
                                     spec.table(f.table).id_space) for f in spec.features]
    decoded = input_ops.decode_tsv(lines, spec.num_dense, features)
    weights = iter(decoded.weights)
    batch: common.Batch = {
        "label": decoded.label, "dense": decoded.dense,
        "ids": {f.name: ids for f, ids in zip(spec.features, decoded.ids)},
        "weights": {f.name: next(weights) for f in spec.features if f.weighted}}
    return batch, decoded.valid


def decode_lines(lines: tf.Tensor, spec: DataSpec,
                 require_label: bool = True) -> tuple[common.Batch, tf.Tensor]:
    """Parses a batch of lines into (batch, valid) with stock ops; rows of invalid lines are
    meaningless.

    With require_label=False (serving) a line may also lack the label column; its label is 0.
    """
    width = num_columns(spec)
    fields = tf.strings.split(lines, "\t")
    count = fields.row_lengths()
    has_label = tf.equal(count, width)
    valid = has_label if require_label else has_label | tf.equal(count, width - 1)
    cells = fields.to_tensor("", shape=[None, width])
    if not require_label:
        # Shift unlabeled lines right by one so that column c always means the same thing.
        padded = tf.concat([tf.fill([tf.shape(lines)[0], 1], ""), cells], axis=1)
        columns = tf.range(width)[None, :] + tf.cast(has_label, tf.int32)[:, None]
        cells = tf.gather(padded, columns, batch_dims=1)

    label_cell = cells[:, 0]
    label = tf.where(tf.equal(label_cell, "1"), 1.0, 0.0)
    if require_label:
        valid &= tf.equal(label_cell, "0") | tf.equal(label_cell, "1")

    dense_cells = cells[:, 1:1 + spec.num_dense]
    dense_ok = tf.strings.regex_full_match(dense_cells, _FLOAT)
    dense = tf.strings.to_number(tf.where(dense_ok, dense_cells, "0"), tf.float32)
    dense_ok = (dense_ok | tf.equal(dense_cells, "")) & tf.math.is_finite(dense)
    valid &= tf.reduce_all(dense_ok, axis=1)

    batch: common.Batch = {"label": label, "dense": tf.reshape(dense, [-1, spec.num_dense]),
                           "ids": {}, "weights": {}}
    for i, feature in enumerate(spec.features):
        cell = cells[:, 1 + spec.num_dense + i]
        tokens = tf.strings.split(cell, ",")
        tokens = tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)
        flat = tokens.flat_values
        if feature.weighted:
            parts = tf.strings.split(flat, ":")
            pair = parts.to_tensor("", shape=[None, 2])
            raw_id = pair[:, 0]
            weight_cell = tf.where(tf.equal(parts.row_lengths(), 2), pair[:, 1], "1")
            weight_ok = tf.strings.regex_full_match(weight_cell, _FLOAT)
            weight = tf.strings.to_number(tf.where(weight_ok, weight_cell, "1"), tf.float32)
            token_ok = (parts.row_lengths() <= 2) & weight_ok & tf.math.is_finite(weight)
            batch["weights"][feature.name] = tokens.with_flat_values(weight)
        else:
            raw_id = flat
            token_ok = tf.ones_like(flat, tf.bool)
        table = spec.table(feature.table)
        if feature.id_type == "int":
            id_ok = tf.strings.regex_full_match(raw_id, _INT)
            raw_id = tf.strings.to_number(tf.where(id_ok, raw_id, "0"), tf.int64)
        else:
            id_ok = tf.strings.length(raw_id) > 0
        token_ok &= id_ok
        batch["ids"][feature.name] = tokens.with_flat_values(
            common.to_rows(raw_id, feature, table.id_space))
        valid &= tf.reduce_all(tokens.with_flat_values(token_ok), axis=1)
    return batch, valid


def read_tsv(files: Sequence[str], spec: DataSpec, batch_size: int, start_step: int = 0,
             holdout_every: int = 0, split: str = "train") -> tf.data.Dataset:
    """Batches of labeled lines from `files`, read in order; see `common.read_batches`."""
    return common.read_batches(tf.data.TextLineDataset(list(files)), decode_labeled_lines,
                               spec, batch_size, start_step, holdout_every, split,
                               may_raise=False)


def format_lines(batch: common.Batch, spec: DataSpec) -> Iterable[str]:
    """TSV lines for a batch whose ids are rows (as synthetic batches are)."""
    label = batch["label"].numpy()
    dense = batch["dense"].numpy()
    ids = {name: value.to_list() for name, value in batch["ids"].items()}
    weights = {name: value.to_list() for name, value in batch["weights"].items()}
    for row in range(len(label)):
        cells = [str(int(label[row]))] + [str(np.float32(x)) for x in dense[row]]
        for feature in spec.features:
            row_ids = ids[feature.name][row]
            if feature.weighted:
                cells.append(",".join(f"{i}:{str(np.float32(w))}"
                                      for i, w in zip(row_ids, weights[feature.name][row])))
            else:
                cells.append(",".join(str(i) for i in row_ids))
        yield "\t".join(cells)
