"""Stock-op lookups of a dynamic table's features, whose ids are keys (docs/dynamic_vocabulary.md).

Each key is mapped to its row by the table's `ServingKeyIndex` (a stock hash table); a key
without a row reads a zero row, as in training. A pooled feature's combiner denominator
(`cpu_rules.combiner_norm`) counts every lookup of the sample, keys without a row included
(`mean([a, unknown]) = a / 2`), and the lookups of keys without a row are dropped: unweighted,
the known rows are summed in place (`pooled_lookup.summed_rows`) and divided by it; weighted,
each weight is divided by it first, as the training conversion's gains are. Sequence and dense features give zeros at the positions of
keys without a row.
"""

from typing import Any

import tensorflow as tf

from tf_embedding import dynamic_vocabulary, pooled_lookup
from tf_embedding.feature_inputs import cpu_rules
from tf_embedding.serving_keys import KeyIndex


def keyed_lookup(plan: cpu_rules.CpuLookupPlan, feature: Any, table: Any,
                 key_index: KeyIndex) -> tf.Tensor:
    """One dynamic table feature's activations, in the shapes `serving_embedding_lookup`
    gives a fixed table's (`plan`: the feature's `cpu_lookup_plan`).

    Raises:
      ValueError: an input kind this lookup does not take (a ragged feature with
        `output_shape` in a batch of unknown size, a SparseTensor of rank other than 2),
        naming the table and the feature.
    """
    inp, weight = plan.feature_input.tensor, plan.feature_input.weight
    path = plan.feature_input.name
    if isinstance(inp, tf.Tensor):
        rows = key_index.rows(inp, path)
        return _zero_where_unknown(tf.nn.embedding_lookup(table, tf.maximum(rows, 0)), rows)
    if plan.runtime_output_shape_feature or (isinstance(inp, tf.SparseTensor)
                                             and inp.shape.rank != 2):
        raise dynamic_vocabulary.dynamic_table_error(
            feature.table.name,
            f"feature '{path}' is a "
            + ("ragged input with output_shape whose batch size is unknown until run time"
               if plan.runtime_output_shape_feature else
               f"SparseTensor of rank {inp.shape.rank}")
            + ", which its serving lookup does not take: give a rank-2 SparseTensor or a "
            "RaggedTensor of known batch size.")
    if isinstance(inp, tf.SparseTensor):
        activations = _sparse(plan, feature, table, key_index, inp, weight)
    else:
        activations = _ragged(plan, feature, table, key_index, inp, weight)
    if plan.output_shape is not None:
        activations = tf.reshape(activations, plan.output_shape)
    return activations


def _sparse(plan: cpu_rules.CpuLookupPlan, feature: Any, table: Any,
            key_index: KeyIndex, inp: tf.SparseTensor,
            weight: tf.SparseTensor | None) -> tf.Tensor:
    batch_size, dim = inp.dense_shape[0], feature.table.dim
    if plan.sequence_length:
        # Positions past max_sequence_length are dropped, as for a fixed table.
        inp = tf.sparse.slice(inp, start=[0, 0], size=tf.stack([batch_size, plan.sequence_length]))
        rows = key_index.rows(inp.values, plan.feature_input.name)
        known = rows >= 0
        return tf.scatter_nd(tf.boolean_mask(inp.indices, known),
                             tf.gather(table, tf.boolean_mask(rows, known)),
                             tf.stack([batch_size, plan.sequence_length, dim]))
    activations = _pooled(table, key_index.rows(inp.values, plan.feature_input.name),
                          None if weight is None else weight.values, inp.indices[:, 0],
                          batch_size, feature.table.combiner, plan.feature_input.prune_invalid)
    # A trimmed plan's rows end at the largest sample present (TF's embedding_lookup_sparse).
    return plan.finish(activations) if plan.trim_trailing_rows else activations


def _ragged(plan: cpu_rules.CpuLookupPlan, feature: Any, table: Any,
            key_index: KeyIndex, inp: tf.RaggedTensor,
            weight: tf.RaggedTensor | None) -> tf.Tensor:
    rows = key_index.rows(inp.values, plan.feature_input.name)
    if plan.sequence_length:
        shape = [inp.shape[0], plan.sequence_length]
        activations = tf.gather(table, tf.maximum(rows, 0))
        positions = inp.with_values(activations).to_tensor(shape=shape + [feature.table.dim])
        known = inp.with_values(rows >= 0).to_tensor(default_value=False, shape=shape)
        return tf.where(known[..., tf.newaxis], positions, tf.zeros_like(positions))
    return _pooled(table, rows, None if weight is None else weight.values, inp.value_rowids(),
                   inp.nrows(), feature.table.combiner, prune=False)


def _pooled(table: Any, rows: tf.Tensor, weights: tf.Tensor | None, samples: tf.Tensor,
            batch_size: tf.Tensor, combiner: str, prune: bool) -> tf.Tensor:
    """[batch_size, dim]: each sample's lookups (`rows`, -1 for a key without one; `samples`:
    each lookup's sample) pooled with `combiner`, as the training conversion pools them.
    `prune`: TF's rule for such a feature, which drops lookups whose weight is not positive
    before a mean or sqrtn combiner."""
    unweighted = weights is None
    if unweighted:
        weights = tf.ones_like(rows, dtype=table.dtype)
    elif prune and combiner != "sum":
        positive = weights > 0
        rows, weights, samples = (tf.boolean_mask(values, positive)
                                  for values in (rows, weights, samples))
    weights = tf.cast(weights, table.dtype)
    batch_size = tf.cast(batch_size, samples.dtype)
    norms = cpu_rules.combiner_norm(
        combiner, weights,
        lambda values: tf.math.unsorted_segment_sum(values, samples, batch_size))
    known = rows >= 0
    if unweighted:
        # Every weight is 1: the known rows summed in place, then divided by the norms.
        sums = pooled_lookup.summed_rows(table, tf.boolean_mask(rows, known),
                                         tf.boolean_mask(samples, known), batch_size)
        return sums if norms is None else tf.math.divide_no_nan(sums, norms[:, tf.newaxis])
    gains = weights if norms is None else tf.math.divide_no_nan(weights,
                                                                tf.gather(norms, samples))
    rows, gains, samples = (tf.boolean_mask(values, known) for values in (rows, gains, samples))
    return tf.math.unsorted_segment_sum(tf.gather(table, rows) * gains[:, tf.newaxis], samples,
                                        batch_size)


def _zero_where_unknown(activations: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
    """`activations` ([..., dim], one per key) with zeros for keys without a row."""
    return tf.where((rows >= 0)[..., tf.newaxis], activations, tf.zeros_like(activations))
