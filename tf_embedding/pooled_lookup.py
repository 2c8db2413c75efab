"""Faster stock-op formulations of TF's pooled lookup of a sparse or ragged feature, for serving.

TF's CPU lookup of a pooled `SparseTensor` feature (`tf.nn.safe_embedding_lookup_sparse`)
reshapes the ids, prunes the invalid ones (`sparse_retain`), fills empty rows with id 0, looks
up, then zeroes the filled rows again (`tile` + `where`): several passes over the batch besides
the lookup itself; with weights it also dedupes the ids (`unique`, then a gather of the unique
rows and a second gather back). A pooled `RaggedTensor` is gathered into a ragged batch and
summed through ragged broadcasting. `for_serving.py` uses two other formulations of the same
activations, both made of stock TF ops only, so exported SavedModels still load without
tf_embedding:

* `segment_lookup` and `ragged_segment_lookup`: one `SparseSegmentSum` / `Mean` / `SqrtN` with
  `num_segments`, reading the table in place (weighted: the gathered rows times their weights,
  summed by one `SparseSegmentSum`). Unweighted `SparseTensor` batches get TF's bits (its op and
  its order of additions); ragged and weighted batches may differ in the last bits (another
  order of additions). Serving uses them by default.
* `compiled_sparse_lookup` and `compiled_ragged_lookup`: the lookups placed in a `[rows,
  length]` grid (by a `SparseTensor`'s indices, or a ragged batch's rows) and reduced by an XLA
  function (`jit_compile=True`), which fuses the gather into the reduction: faster than TF's
  formulation on CPUs; the additions may come in another order (a few ulps). Serving uses them
  when asked to (`TPUEmbeddingForServing(..., jit_compile=True)`); TF Serving runs such a model
  with `--xla_cpu_compilation_enabled=true`. The TF ops around the compiled function make at
  most one pass over the batch each: TF runs them one at a time, and at 1 thread they are
  what the step spends beside the compiled function (docs/archive/benchmark_runs.md, "Where the
  time went").

Both fall back to TF's formulation (a `tf.cond`, decided per batch) where theirs does not
apply: a `SparseTensor` whose indices are not in row order, ids (or weights) TF prunes, or ids
outside the table (the segment lookups); a batch whose grid would be mostly padding, a
`SparseTensor` with two lookups at one index, or a table whose row 0 is not finite (the
compiled lookups).
"""

from typing import Callable

import tensorflow as tf

from tf_embedding.feature_inputs import cpu_rules

Fallback = Callable[[], tf.Tensor]

_SEGMENT_REDUCTIONS = {
    "sum": tf.sparse.segment_sum,
    "mean": tf.sparse.segment_mean,
    "sqrtn": tf.sparse.segment_sqrt_n,
}

# A grid holding more than this many cells per lookup (plus one per row) is left to the
# fallback: its padding would cost more than TF's own formulation saves.
_MAX_PADDING_FACTOR = 4

# The id of a grid's padding cells: negative, so the compiled pooling gives it weight 0, and
# no id a lookup of a sparse batch would have but the lowest int64 (which TF prunes as well).
_PADDING = -2**63

# Every bucket size (`_bucket`), ascending: 1 to 7, then 4, 5, 6 and 7 times a quarter of each
# power of two from 8 up, and the largest int64 for any size above 7 * 2**60.
_BUCKETS = [*range(1, 8),
            *(multiple * 2 ** (power - 2) for power in range(3, 63) for multiple in range(4, 8)),
            2**63 - 1]


def segment_lookup(table: tf.Variable | tf.Tensor, vocabulary_size: int,
                   sparse: tf.SparseTensor, weights: tf.SparseTensor | None, combiner: str,
                   fallback: Fallback) -> tf.Tensor:
    """`safe_embedding_lookup_sparse(table, sparse, weights, combiner)` of a rank-2 `sparse`, as
    one sparse segment reduction (`_segment_pool`): `[dense_shape[0], dim]`.

    Empty rows come out zero as TF's do (`num_segments` covers every row). `fallback` computes
    the batch TF's way when an id is negative or, for "mean" and "sqrtn", a weight is not
    positive (TF prunes those lookups), the indices are not in row order (the reduction needs
    its segments sorted; TF's `sparse_fill_empty_rows` sorts them), or an id is outside the
    table (so that the error is TF's).
    """
    ids, rows = sparse.values, sparse.indices[:, 0]
    applies = tf.logical_and(_in_row_order(rows), _in_table(ids, vocabulary_size))
    if weights is not None and combiner != "sum":
        applies = tf.logical_and(applies, tf.reduce_all(weights.values > 0))
    return tf.cond(applies,
                   lambda: _segment_pool(table, ids, rows, sparse.dense_shape[0],
                                         None if weights is None else weights.values, combiner),
                   fallback)


def ragged_segment_lookup(table: tf.Variable | tf.Tensor, vocabulary_size: int,
                          ragged: tf.RaggedTensor, weights: tf.RaggedTensor | None,
                          combiner: str, fallback: Fallback) -> tf.Tensor:
    """The pooled activations `[nrows, dim]` of a `[batch, None]` `ragged` batch with optional
    `weights`, reduced with `combiner`, as one sparse segment reduction (`_segment_pool`; a
    ragged batch's rows are in order). `fallback` computes the batch TF's way when an id is
    outside the table, so that the error is TF's (TF prunes nothing of a ragged batch)."""
    return tf.cond(_in_table(ragged.values, vocabulary_size),
                   lambda: _segment_pool(table, ragged.values, ragged.value_rowids(),
                                         ragged.nrows(),
                                         None if weights is None else weights.values, combiner),
                   fallback)


def _segment_pool(table: tf.Variable | tf.Tensor, ids: tf.Tensor, rows: tf.Tensor,
                  num_rows: tf.Tensor, weights: tf.Tensor | None, combiner: str) -> tf.Tensor:
    """Row r of the result pools the lookups of `ids` whose `rows` (ascending) are r.

    Unweighted: one `SparseSegmentSum` / `Mean` / `SqrtN` with `num_segments`, reading the table
    in place, TF's own op for this (bit for bit TF's activations of a `SparseTensor`). Weighted:
    the gathered rows times their weights, summed by one `SparseSegmentSum` with `num_segments`
    (faster than the segment sums TF's formulations use), divided by the combiner's norm.
    """
    data = _read_in_place(table)
    if weights is None:
        return _SEGMENT_REDUCTIONS[combiner](data, ids, rows, num_segments=num_rows)
    weights = tf.cast(weights, data.dtype)
    weighted = tf.gather(data, ids) * weights[:, tf.newaxis]
    sums = tf.sparse.segment_sum(weighted, tf.range(tf.shape(ids, out_type=rows.dtype)[0]),
                                 rows, num_segments=num_rows)
    norms = cpu_rules.combiner_norm(
        combiner, weights,
        lambda values: tf.math.unsorted_segment_sum(values, rows, num_rows))
    return sums if norms is None else tf.math.divide_no_nan(sums, norms[:, tf.newaxis])


def compiled_sparse_lookup(table: tf.Variable | tf.Tensor, table_name: str,
                           vocabulary_size: int, combiner: str, sparse: tf.SparseTensor,
                           weights: tf.SparseTensor | None, fallback: Fallback) -> tf.Tensor:
    """`safe_embedding_lookup_sparse(table, sparse, weights, combiner)` of a rank-2 `sparse`,
    `[dense_shape[0], dim]`, by an XLA-compiled gather-and-sum over the lookups placed by their
    indices in a `[rows, dense_shape[1]]` grid (both bucketed).

    Negative ids are pruned, and for "mean" and "sqrtn" weights <= 0, as TF prunes them; ids
    from `vocabulary_size` on raise InvalidArgumentError naming the table (XLA's gather would
    clamp them). `fallback` computes the batch TF's way when the grid would be mostly padding,
    two lookups share an index (TF sums both; a grid cell holds one), or row 0 of the table is
    not finite (padding cells add 0 x row 0).
    """
    ids = tf.cast(sparse.values, tf.int64)
    num_rows, width = sparse.dense_shape[0], sparse.dense_shape[1]
    num_lookups = tf.size(ids, tf.int64)
    shape = tf.stack([_bucket(num_rows), _bucket(width)])
    applies = _grid_applies(table, shape, num_lookups, num_rows)

    def placed(values: tf.Tensor, default: tf.Tensor | float) -> tf.Tensor:
        """`values` at their lookups' indices in a grid of `shape`, `default` elsewhere."""
        return tf.raw_ops.SparseToDense(sparse_indices=sparse.indices, output_shape=shape,
                                        sparse_values=values, default_value=default,
                                        validate_indices=False)

    def compiled() -> tf.Tensor:
        highest = tf.reduce_max(ids)
        in_table = _assert_ids_in_table(highest < vocabulary_size, table_name, vocabulary_size,
                                        "got an id of {} (negative ids are pruned).", highest)
        grid = placed(ids, tf.constant(_PADDING, tf.int64))
        grid_weights = None if weights is None else placed(tf.cast(weights.values, tf.float32),
                                                           0.0)
        # Of lookups that share an index, the grid kept one.
        every_lookup_placed = tf.equal(tf.math.count_nonzero(tf.not_equal(grid, _PADDING)),
                                       num_lookups)
        return tf.cond(every_lookup_placed,
                       lambda: _pool(table, grid, grid_weights, combiner, combiner != "sum",
                                     in_table, num_rows),
                       fallback)

    return tf.cond(applies, compiled, fallback)


def compiled_ragged_lookup(table: tf.Variable | tf.Tensor, table_name: str,
                           vocabulary_size: int, combiner: str, ragged: tf.RaggedTensor,
                           weights: tf.RaggedTensor | None, fallback: Fallback) -> tf.Tensor:
    """The pooled activations `[nrows, dim]` of a `[batch, None]` `ragged` batch with optional
    `weights`, reduced with `combiner`, by an XLA-compiled gather-and-sum over the lookups
    padded into a `[rows, longest row]` grid (both bucketed).

    Ids outside `[0, vocabulary_size)` raise InvalidArgumentError naming the table, as TF's
    gather of a ragged batch fails on them. `fallback` computes the batch TF's way when the grid
    would be mostly padding or row 0 of the table is not finite.
    """
    num_rows = ragged.nrows(out_type=tf.int64)
    num_lookups = tf.size(ragged.values, tf.int64)
    # (The maximum of no rows is the lowest int64, which buckets to 1.)
    longest = tf.reduce_max(ragged.row_lengths())
    shape = tf.stack([_bucket(num_rows), _bucket(longest)])
    applies = _grid_applies(table, shape, num_lookups, num_rows)

    def compiled() -> tf.Tensor:
        ids = tf.cast(ragged.values, tf.int64)
        lowest, highest = tf.reduce_min(ids), tf.reduce_max(ids)
        in_table = _assert_ids_in_table((lowest >= 0) & (highest < vocabulary_size), table_name,
                                        vocabulary_size, "got ids from {} to {}.",
                                        (lowest, highest))
        grid = ragged.with_values(ids).to_tensor(default_value=_PADDING, shape=shape)
        grid_weights = None if weights is None else weights.with_values(
            tf.cast(weights.values, tf.float32)).to_tensor(default_value=0.0, shape=shape)
        return _pool(table, grid, grid_weights, combiner, False, in_table, num_rows)

    return tf.cond(applies, compiled, fallback)


def _grid_applies(table: tf.Variable | tf.Tensor, shape: tf.Tensor, num_lookups: tf.Tensor,
                  num_rows: tf.Tensor) -> tf.Tensor:
    """Whether a grid of `shape` is mostly lookups and row 0 of `table` is finite: padding
    cells add 0 x row 0."""
    # In float64: a SparseTensor's dense_shape may be any int64, whose product would wrap.
    shape, num_lookups, num_rows = (tf.cast(x, tf.float64) for x in (shape, num_lookups, num_rows))
    small_padding = shape[0] * shape[1] <= _MAX_PADDING_FACTOR * (num_lookups + num_rows)
    # A gather: a variable's full read may copy it (`_read_in_place`).
    row_zero_finite = tf.reduce_all(tf.math.is_finite(tf.gather(table, [0])))
    return small_padding & row_zero_finite


def _assert_ids_in_table(in_table: tf.Tensor, table_name: str, vocabulary_size: int,
                         found: str, values: tf.Tensor | tuple[tf.Tensor, ...]) -> tf.Operation:
    """An assertion of `in_table`, whose error names the table and says what was `found` (a
    `tf.strings.format` template of `values`)."""
    return tf.debugging.Assert(in_table, [tf.strings.format(
        f"Table '{table_name}': ids must be in [0, {vocabulary_size}); " + found, values)])


def _pool(table: tf.Variable | tf.Tensor, grid: tf.Tensor, grid_weights: tf.Tensor | None,
          combiner: str, prune_weights: bool, in_table: tf.Operation,
          num_rows: tf.Tensor) -> tf.Tensor:
    """The compiled pooling of `grid` once `in_table` has passed, cut to the batch's rows."""
    with tf.control_dependencies([in_table]):
        # The table's value, not the variable: a variable argument of the module's compiled
        # function, called inside another function, is captured by the trace that the next
        # serving object's call reuses, and fails once its variable is deleted.
        activations = _compiled_grid_lookup(_read_in_place(table), grid, grid_weights,
                                            combiner=combiner, prune_weights=prune_weights)
    return activations[:num_rows]


@tf.function(jit_compile=True, autograph=False)
def _compiled_grid_lookup(table: tf.Tensor, ids: tf.Tensor,
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
    norms = cpu_rules.combiner_norm(combiner, cell_weights,
                                       lambda values: tf.reduce_sum(values, axis=1))
    if norms is None:
        return activations
    return tf.math.divide_no_nan(activations, norms[:, tf.newaxis])


def _bucket(size: tf.Tensor) -> tf.Tensor:
    """`size` rounded up to a quarter of its power of two (1 to 8 as they are, then 10, 12, 14,
    16, 20, 24, 28, 32, 40, ...; 1 for 0): grids of bucketed shapes, so that XLA compiles at
    most 4 shapes per doubling, and a grid is at most 25% padding along each axis."""
    buckets = tf.constant(_BUCKETS, tf.int64)
    first_not_below = tf.searchsorted(buckets, tf.reshape(tf.cast(size, tf.int64), [1]))
    return buckets[first_not_below[0]]


def _in_table(ids: tf.Tensor, vocabulary_size: int) -> tf.Tensor:
    return tf.reduce_all((ids >= 0) & (ids < vocabulary_size))


def summed_rows(table: tf.Variable | tf.Tensor, ids: tf.Tensor, rows: tf.Tensor,
                num_rows: tf.Tensor) -> tf.Tensor:
    """[num_rows, dim]: row r sums `table[ids[i]]` over the lookups i whose `rows[i]` is r,
    reading the table in place (one `SparseSegmentSum`) when `rows` ascend, else by a gather
    and an unsorted segment sum."""
    return tf.cond(_in_row_order(rows),
                   lambda: _segment_pool(table, ids, rows, num_rows, None, "sum"),
                   lambda: tf.math.unsorted_segment_sum(tf.gather(table, ids), rows, num_rows))


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
