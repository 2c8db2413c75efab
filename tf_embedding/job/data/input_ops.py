"""Typed wrappers of the `tf-embedding` job's own raw ops, which its input pipelines run.

* The synthetic click log: one feature of a batch (`synthetic_feature`, `TfeSyntheticFeature`),
  for `synthetic`.
* The Criteo TSV reader: a batch of labeled lines parsed (`decode_tsv`, `TfeDecodeTsv`), for
  `criteo`.

The op contract is docs/kernels.md; the engine's ops are wrapped in `tf_embedding.ops`. Neither
op has an XLA kernel: both run in the job's tf.data pipeline.
"""

from typing import List, NamedTuple, Sequence

import tensorflow as tf

from tf_embedding import _loader


class SyntheticFeature(NamedTuple):
    """One feature of a synthetic batch (`synthetic_feature`)."""

    row_splits: tf.Tensor  # int64 [batch_size + 1]
    rows: tf.Tensor  # int64 [lookups]
    weights: tf.Tensor  # float [lookups], or [0] when not weighted
    contribution: tf.Tensor  # float [batch_size]: the combined effects of each sample's ids


def synthetic_feature(columns: tf.Tensor, seeds: tf.Tensor, feature_name: str, batch_size: int,
                      max_ids: int, weighted: bool, combiner: str, multiplier: int, offset: int,
                      weight_range: tuple[float, float], min_ids: int = 1) -> SyntheticFeature:
    """One feature of the job's synthetic batch (`TfeSyntheticFeature`, its doc: cc/ops/
    synthetic_ops.cc): lengths, Zipf ids through the alias table `columns` [N, 4], weights,
    from the three seed pairs `seeds` [3, 2], as TF's stateless random ops draw them."""
    return SyntheticFeature(*_loader.load_ops().tfe_synthetic_feature(
        columns=columns, seeds=seeds, feature_name=feature_name, batch_size=batch_size,
        max_ids=max_ids, min_ids=min_ids, weighted=weighted, combiner=combiner,
        multiplier=multiplier, offset=offset, weight_min=weight_range[0],
        weight_max=weight_range[1]))


class TsvFeature(NamedTuple):
    """How `decode_tsv` reads one categorical column."""

    name: str
    string_ids: bool  # hashed into the vocabulary; else integers taken modulo it
    weighted: bool  # tokens are `id:weight`
    vocabulary_size: int  # -1: a dynamic table's keys (`TableSpec.id_space`)


class DecodedTsv(NamedTuple):
    """A batch of TSV lines (`decode_tsv`)."""

    label: tf.Tensor  # float [B]
    dense: tf.Tensor  # float [B, num_dense]
    valid: tf.Tensor  # bool [B]
    ids: List[tf.RaggedTensor]  # int64 [B, None] rows, one per feature
    weights: List[tf.RaggedTensor]  # float [B, None], one per weighted feature


def decode_tsv(lines: tf.Tensor, num_dense: int,
               features: Sequence[TsvFeature]) -> DecodedTsv:
    """Labeled TSV lines parsed as criteo.decode_lines' TensorFlow ops parse them
    (`TfeDecodeTsv`, its doc: cc/ops/tsv_ops.cc); the rows of invalid lines are unspecified."""
    weighted = [f for f in features if f.weighted]
    label, dense, valid, ids, splits, weights = _loader.load_ops().tfe_decode_tsv(
        lines=lines, num_dense=num_dense, num_features=len(features),
        num_weighted=len(weighted), feature_names=[f.name for f in features],
        string_ids=[f.string_ids for f in features], weighted=[f.weighted for f in features],
        vocabulary_sizes=[f.vocabulary_size for f in features])
    # The op's row splits count the rows it returns: no check needed.
    ragged_ids = [tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)
                  for values, row_splits in zip(ids, splits)]
    weighted_ids = [r for r, f in zip(ragged_ids, features) if f.weighted]
    return DecodedTsv(label, dense, valid, ragged_ids,
                      [r.with_flat_values(w) for r, w in zip(weighted_ids, weights)])
