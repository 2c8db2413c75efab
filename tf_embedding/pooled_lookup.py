"""Faster stock-op formulations of TF's pooled lookup of a sparse or ragged feature, for serving.

TF's CPU lookup of a pooled `SparseTensor` feature (`tf.nn.safe_embedding_lookup_sparse`)
reshapes the ids, prunes the invalid ones (`sparse_retain`), fills empty rows with id 0, looks
up, then zeroes the filled rows again (`tile` + `where`): several passes over the batch besides
the lookup itself. `serving.py` uses two other formulations of the same activations, both made
of stock TF ops only, so exported SavedModels still load without tf_embedding:

* `segment_lookup`: one `SparseSegmentSum` / `Mean` / `SqrtN` with `num_segments`, reading the
  table in place. It is the op and the order of additions of TF's own lookup, so the results are
  bit-identical; serving uses it for every unweighted rank-2 pooled sparse feature.
* `compiled_lookup`: the lookups padded into a `[rows, length]` grid and reduced by an XLA
  function (`jit_compile=True`), which fuses the gather into the reduction: faster than TF's
  formulation on CPUs; the additions may come in another order (a few ulps). Serving
  uses it when asked to (`TPUEmbeddingForServing(..., jit_compile=True)`); TF Serving runs such
  a model with `--xla_cpu_compilation_enabled=true`.

Both fall back to TF's formulation (a `tf.cond`, decided per batch) where theirs does not
apply: a `SparseTensor` whose indices are not in row order, ids TF prunes or outside the table
(`segment_lookup`), a batch whose grid would be mostly padding or a table whose row 0 is not
finite (`compiled_lookup`).
"""

import math
from typing import Callable

import tensorflow as tf

from tf_embedding import features as features_lib

Fallback = Callable[[], tf.Tensor]

_SEGMENT_REDUCTIONS = {
    "sum": tf.sparse.segment_sum,
    "mean": tf.sparse.segment_mean,
    "sqrtn": tf.sparse.segment_sqrt_n,
}

# A grid holding more than this many cells per lookup (plus one per row) is left to the
# fallback: its padding would cost more than TF's own formulation saves.
_MAX_PADDING_FACTOR = 4


def segment_lookup(table: tf.Variable | tf.Tensor, vocabulary_size: int,
                   sparse: tf.SparseTensor, combiner: str, fallback: Fallback) -> tf.Tensor:
    """`safe_embedding_lookup_sparse(table, sparse, combiner=combiner)` of an unweighted rank-2
    `sparse`, as one segment reduction: `[dense_shape[0], dim]`.

    Empty rows come out zero as TF's do (`num_segments` covers every row). `fallback` computes
    the batch TF's way when an id is negative (TF prunes it), the indices are not in row order
    (the reduction needs its segments sorted; TF's `sparse_fill_empty_rows` sorts them), or an
    id is outside the table (so that the error is TF's).
    """
    ids, rows = sparse.values, sparse.indices[:, 0]
    applies = tf.logical_and(_in_row_order(rows),
                             tf.reduce_all((ids >= 0) & (ids < vocabulary_size)))

    def reduce() -> tf.Tensor:
        return _SEGMENT_REDUCTIONS[combiner](_read_in_place(table), ids, rows,
                                             num_segments=sparse.dense_shape[0])

    return tf.cond(applies, reduce, fallback)


def compiled_lookup(table: tf.Variable | tf.Tensor, table_name: str, vocabulary_size: int,
                    combiner: str, ids: tf.Tensor, rows: tf.Tensor, num_rows: tf.Tensor,
                    weights: tf.Tensor | None, prune_invalid: bool,
                    fallback: Fallback) -> tf.Tensor:
    """The pooled activations `[num_rows, dim]` of lookups `ids` into rows `rows`, with
    optional `weights`, reduced with `combiner` by an XLA-compiled gather-and-sum.

    `prune_invalid` drops ids < 0, and for "mean" and "sqrtn" weights <= 0, as
    `safe_embedding_lookup_sparse` does; without it a negative id is outside the table.
    `fallback` computes the batch TF's way when `rows` are not ascending, the grid would be
    mostly padding, or row 0 of the table is not finite (padding cells add 0 x row 0). Ids
    outside the table raise InvalidArgumentError naming the table (XLA's gather would clamp
    them).
    """
    ids, rows = tf.cast(ids, tf.int64), tf.cast(rows, tf.int64)
    num_rows = tf.cast(num_rows, tf.int64)
    lengths = tf.math.bincount(rows, minlength=num_rows, maxlength=num_rows, dtype=tf.int64)
    grid_rows = _bucket(num_rows)
    # (The maximum of no rows is the lowest int64, which buckets to 1.)
    grid_length = _bucket(tf.reduce_max(lengths))
    row_zero_finite = tf.reduce_all(tf.math.is_finite(tf.gather(table, [0])))
    small_padding = grid_rows * grid_length <= _MAX_PADDING_FACTOR * (tf.size(ids, tf.int64) +
                                                                       num_rows)
    applies = _in_row_order(rows) & row_zero_finite & small_padding

    def compiled() -> tf.Tensor:
        lowest, highest = tf.reduce_min(ids), tf.reduce_max(ids)
        # Negative ids are pruned (weight 0 in the grid) or, without pruning, out of range.
        in_table = (highest < vocabulary_size) & (prune_invalid | (lowest >= 0))
        message = tf.strings.format(
            f"Table '{table_name}': ids must be in [0, {vocabulary_size}); "
            "got ids from {} to {}.", (lowest, highest))
        # Padding cells hold id -1, which the compiled function reads as weight 0.
        lookups = tf.RaggedTensor.from_value_rowids(ids, rows, nrows=grid_rows, validate=False)
        shape = tf.stack([grid_rows, grid_length])
        grid_ids = lookups.to_tensor(default_value=-1, shape=shape)
        grid_weights = (None if weights is None else lookups.with_values(
            tf.cast(weights, tf.float32)).to_tensor(default_value=0.0, shape=shape))
        with tf.control_dependencies([tf.debugging.Assert(in_table, [message])]):
            activations = _compiled_grid_lookup(
                table, grid_ids, grid_weights, combiner=combiner,
                prune_weights=prune_invalid and combiner != "sum")
        return activations[:num_rows]

    return tf.cond(applies, compiled, fallback)


@tf.function(jit_compile=True, autograph=False)
def _compiled_grid_lookup(table: tf.Variable | tf.Tensor, ids: tf.Tensor,
                          weights: tf.Tensor | None, combiner: str,
                          prune_weights: bool) -> tf.Tensor:
    """Row r of the result pools grid row r: the sum of its cells' table rows times their
    weights, where a negative id (padding, or an id TF prunes) has weight 0, as has a weight
    <= 0 with `prune_weights`. XLA fuses the gather into the sum, so the looked-up rows are
    never written out. (A select of those cells, instead of the product with their weight 0,
    made XLA's loop 3x to 5x slower.)"""
    cell_weights = tf.cast(ids >= 0, tf.float32)
    if weights is not None:
        cell_weights *= tf.maximum(weights, 0.0) if prune_weights else weights
    rows = tf.gather(table, tf.maximum(ids, 0))
    activations = tf.reduce_sum(rows * cell_weights[:, :, tf.newaxis], axis=1)
    norms = features_lib.combiner_norm(combiner, cell_weights,
                                       lambda values: tf.reduce_sum(values, axis=1))
    if norms is None:
        return activations
    return tf.math.divide_no_nan(activations, norms[:, tf.newaxis])


def _bucket(size: tf.Tensor) -> tf.Tensor:
    """`size` rounded up to a quarter of its power of two (1 to 8 as they are, then 10, 12, 14,
    16, 20, 24, 28, 32, 40, ...; 1 for 0): grids of bucketed shapes, so that XLA compiles at
    most 4 shapes per doubling, and a grid is at most 25% padding along each axis."""
    size = tf.maximum(tf.cast(size, tf.int64), 1)
    one = tf.constant(1, tf.int64)
    power = tf.cast(tf.math.floor(tf.math.log(tf.cast(size, tf.float64)) / math.log(2.0)),
                    tf.int64)
    # The float logarithm may be a rounding off either way.
    power = tf.where(tf.bitwise.left_shift(one, power) > size, power - 1, power)
    power = tf.where(tf.bitwise.left_shift(one, power + 1) <= size, power + 1, power)
    step = tf.bitwise.left_shift(one, tf.maximum(power - 2, 0))
    return (size + step - 1) // step * step


def _in_row_order(rows: tf.Tensor) -> tf.Tensor:
    """Whether each lookup's output row is >= the previous one's: both formulations need a
    row's lookups contiguous (TF's own sorts them)."""
    return tf.reduce_all(rows[1:] >= rows[:-1])


def _read_in_place(table: tf.Variable | tf.Tensor) -> tf.Tensor:
    """The table's value without a copy (a variable read may copy a variable that was ever
    sparsely updated; TF's own fast path avoids it the same way)."""
    if isinstance(table, tf.Variable) and hasattr(table, "read_value_no_copy"):
        return table.read_value_no_copy()
    return table
