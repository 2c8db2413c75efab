"""Where the rows of a sharded table live, and how ids travel to them.

A table (and each of its slots) is split into row blocks, one per device, by one of TF's two
partition strategies:

* 'div' (the default, as TF splits a TPU embedding table over its hosts): contiguous blocks; with
  `n` devices the first `vocabulary_size % n` blocks get one extra row.
* 'mod': row `r` lives in block `r % n`, at local row `r // n` (the same block sizes).

Blocks that would be empty (fewer rows than devices) are not created; with 'mod' the stride is
then the number of blocks, which puts every row where `r % n` would. Each block is a plain
`ResourceVariable` on its device. A `ShardedVariable` groups contiguous blocks, so a checkpoint
stores one full-shape tensor as slices under TF's key; a `StridedShardedVariable` groups 'mod'
blocks and saves the reassembled full tensor under the same key. Either restores into any
strategy and block count and into the unsharded classes.

Ids "in layout order" are grouped by block, in block order, ascending within a block: ascending
for 'div', and what `ops.dedup(ids, num_shards=dedup_shards)` returns for both.
"""

import itertools
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import tensorflow as tf
from tensorflow.python.distribute import sharded_variable
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.trackable import base as trackable_base

from tf_embedding import ops
from tf_embedding.embedding_base import ShapeCheckedInitializer
from tf_embedding.sharded import checkpoint_rows
from tf_embedding.sharded import initial_rows
from tf_embedding.sharded.strided_variable import StridedShardedVariable

PARTITION_STRATEGIES = ("div", "mod")
# A block made a window at a time reads about this many bytes of the table's rows a window.
_INITIAL_WINDOW_BYTES = 4 << 20


def block_rows(vocabulary_size: int, num_devices: int) -> tuple[int, ...]:
    """The row count of each block of a table split over `num_devices` devices (empty blocks,
    which are not created, left out)."""
    base, extra = divmod(vocabulary_size, num_devices)
    rows = [base + 1] * extra + [base] * (num_devices - extra)
    return tuple(count for count in rows if count)


def check_partition_strategy(partition_strategy: str, owner: str = "ShardLayout") -> str:
    """`partition_strategy` if it is one of PARTITION_STRATEGIES; the message names `owner`."""
    if partition_strategy not in PARTITION_STRATEGIES:
        raise ValueError(f"{owner}: Invalid partition_strategy {partition_strategy!r}: must be "
                         "'div' (contiguous row blocks) or 'mod' (row r in block r % blocks).")
    return partition_strategy


class TableBlock(NamedTuple):
    """A row block of a table: the table rows it holds (in its local order) and its variable."""
    rows: range
    variable: tf.Variable


class ShardLayout:
    """The row blocks of one table on `devices` (None: the default device): block `s` holds
    `rows[s]` rows, `[offsets[s], offsets[s + 1])` with 'div', rows `s, s + n, s + 2n, ...`
    with 'mod' (n = the number of blocks)."""

    def __init__(self, vocabulary_size: int, devices: Sequence[str | None],
                 partition_strategy: str = "div"):
        self.partition_strategy = check_partition_strategy(partition_strategy)
        self.rows = block_rows(vocabulary_size, len(devices))
        # Empty blocks come last, so the first len(rows) devices hold the blocks.
        self.devices = tuple(devices[:len(self.rows)])
        self.offsets = tuple(itertools.accumulate(self.rows, initial=0))

    @property
    def strided(self) -> bool:
        return self.partition_strategy == "mod" and len(self.rows) > 1

    @property
    def dedup_shards(self) -> int:
        """`num_shards` for `inputs.dedup`, whose unique ids are then in layout order."""
        return len(self.rows) if self.strided else 1

    def block_of(self, ids: tf.Tensor) -> tf.Tensor:
        """The block (int32) holding each of `ids` (table ids, any order)."""
        if self.strided:
            return tf.cast(ids % len(self.rows), tf.int32)
        return tf.searchsorted(tf.constant(self.offsets[1:-1], tf.int64), ids, side="right",
                               out_type=tf.int32)

    def block_and_local_ids(self, ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(the block (int32) holding each of `ids`, its local row there), any order."""
        blocks = self.block_of(ids)
        if self.strided:
            return blocks, ids // len(self.rows)
        return blocks, ids - tf.gather(tf.constant(self.offsets, tf.int64), blocks)

    def local_ids(self, ids: tf.Tensor, block: int) -> tf.Tensor:
        """Block `block`'s local rows of `ids`, table ids all in that block."""
        if self.strided:
            return ids // len(self.rows)
        return ids - self.offsets[block]

    def row_range(self, block: int) -> range:
        """The table rows block `block` holds, in its local order."""
        if self.strided:
            return range(block, self.offsets[-1], len(self.rows))
        return range(self.offsets[block], self.offsets[block + 1])

    def block_value(self, value: Any, block: int) -> Any:
        """Block `block`'s rows of a whole-table `value` (a tensor or array)."""
        if self.strided:
            return value[block::len(self.rows)]
        return value[self.offsets[block]:self.offsets[block + 1]]

    def create_variable(self, name: str, shape: tuple[int, int], dtype: tf.DType,
                        initializer: Callable[..., Any],
                        trainable: bool) -> sharded_variable.ShardedVariable:
        """One variable per block, initialised with its rows of `initializer(shape, dtype)`.

        Contiguous blocks compute only their own rows where the initializer allows it
        (`initial_rows`); otherwise, and for 'mod', the full value is computed once and sliced.
        Either way the initial table depends on neither the block count nor the partition
        strategy. A pending checkpoint restore instead reads each contiguous block's slice from
        the checkpoint ('mod': the whole table, once).
        """
        restoring = isinstance(initializer, trackable_base.CheckpointInitialValueCallable)
        first_rows = full_value = None
        if not (restoring or self.strided):
            with tf.device(self.devices[0]):
                first_rows = self._own_rows(initializer, shape, dtype, 0)
        if first_rows is None:
            full_value = self._full_initial_value(initializer, shape, dtype)
        blocks = []
        for index, device in enumerate(self.devices):
            with tf.device(device):
                initial_value = (first_rows if index == 0 and first_rows is not None else
                                 self._block_initial_value(initializer, shape, dtype, index,
                                                           full_value))
                # ResourceVariable directly, not tf.Variable: a strategy's variable creator (e.g.
                # MirroredStrategy's, when built under its scope) must not mirror the blocks.
                blocks.append(resource_variable_ops.ResourceVariable(
                    initial_value=initial_value, name=f"{name}_{index}", dtype=dtype,
                    trainable=trainable))
        container = (StridedShardedVariable if self.strided
                     else sharded_variable.ShardedVariable)
        variable = container(blocks, name=name)
        if restoring:
            # The blocks already hold the checkpoint's values; marking the container restored
            # (as a ResourceVariable marks itself) keeps the pending restore from reading the
            # checkpoint a second time.
            variable._maybe_initialize_trackable()  # pylint: disable=protected-access
            variable._update_uid = initializer.restore_uid  # pylint: disable=protected-access
        return variable

    def _full_initial_value(self, initializer: Callable[..., Any], shape: tuple[int, int],
                            dtype: tf.DType) -> tf.Tensor | None:
        """The whole table's initial value, or None where each contiguous block reads its own
        slice of a checkpoint being restored (a strided block is no slice a checkpoint read can
        name: 'mod' reads the whole table)."""
        restoring = isinstance(initializer, trackable_base.CheckpointInitialValueCallable)
        if restoring and not self.strided:
            return None
        full_value = initializer(shape, dtype=dtype)
        # (Restoring: unwraps the CheckpointInitialValue.)
        return tf.convert_to_tensor(full_value) if restoring else full_value

    def _own_rows(self, initializer: Callable[..., Any], shape: tuple[int, int],
                  dtype: tf.DType, block: int) -> tf.Tensor | None:
        """Contiguous block `block`'s rows of the initial value computed alone
        (`initial_rows`), or None where the initializer does not allow it."""
        return initial_rows.initial_rows(_unchecked(initializer), shape, dtype,
                                         self.offsets[block], self.offsets[block + 1])

    def _block_initial_value(self, initializer: Callable[..., Any], shape: tuple[int, int],
                             dtype: tf.DType, block: int, full_value: Any) -> Any:
        """Block `block`'s initial rows: of `full_value`, read from the checkpoint, or computed
        alone (no `full_value`, not restoring)."""
        if full_value is not None:
            return self.block_value(full_value, block)
        if isinstance(initializer, trackable_base.CheckpointInitialValueCallable):
            pending = checkpoint_rows.pending_value(initializer)
            if pending is not None:
                # The block's rows alone (TF's reader would read the whole stored table).
                return checkpoint_rows.read_rows(pending, self.offsets[block], self.rows[block],
                                                 pending.key)
            return initializer(shape, dtype=dtype, shard_info=trackable_base.ShardInfo(
                shape=(self.rows[block], shape[1]), offset=(self.offsets[block], 0)))
        return self._own_rows(initializer, shape, dtype, block)

    def initial_block_windows(self, initializer: Callable[..., Any], shape: tuple[int, int],
                              dtype: tf.DType, block: int,
                              window_bytes: int = _INITIAL_WINDOW_BYTES
                              ) -> Iterator[tf.Tensor] | None:
        """Block `block`'s initial rows as consecutive windows, each read from about
        `window_bytes` of consecutive table rows (a 'mod' block's rows are every n-th of them),
        so a block is initialised without temporaries of its size: exact rows of the whole
        value (`initial_rows`), rows of the checkpoint being restored for a 'mod' block, or
        fresh draws of a shape-free distribution (TF's unseeded initializers). None for a
        contiguous block being restored (read at once) or an initializer that has neither
        (`initial_block_value` then)."""
        rows = self.row_range(block)
        row_bytes = int(shape[1]) * tf.as_dtype(dtype).size
        block_rows_per_window = max(1, window_bytes // row_bytes // rows.step)
        windows = [rows[start:start + block_rows_per_window]
                   for start in range(0, len(rows), block_rows_per_window)]
        if isinstance(initializer, trackable_base.CheckpointInitialValueCallable):
            pending = checkpoint_rows.pending_value(initializer)
            if pending is None or not self.strided:
                return None

            def read(start: int, stop: int) -> tf.Tensor:
                return checkpoint_rows.read_rows(pending, start, stop - start, pending.key)
        else:
            source = _unchecked(initializer)
            if initial_rows.has_row_values(source):

                def read(start: int, stop: int) -> tf.Tensor:
                    return initial_rows.initial_rows(source, shape, dtype, start, stop)
            elif initial_rows.has_shape_free_distribution(source):
                return (initial_rows.independent_rows(source, dtype, len(window), int(shape[1]))
                        for window in windows)
            else:
                return None
        # Each window's consecutive table rows, strided to the block's ('div': all of them; TF
        # forwards an identity slice without a copy).
        return (read(window.start, window[-1] + 1)[::rows.step] for window in windows)

    def initial_block_value(self, initializer: Callable[..., Any], shape: tuple[int, int],
                            dtype: tf.DType, block: int) -> Any:
        """Block `block`'s initial rows, for a process that holds that block only, where
        `initial_block_windows` gives none: a contiguous block's rows read from the checkpoint
        being restored, else rows of the full value (an initializer without row values, or a
        'mod' block restored from a checkpoint TF's reader must read whole)."""
        return self._block_initial_value(initializer, shape, dtype, block,
                                         self._full_initial_value(initializer, shape, dtype))

    def split(self, sorted_ids: tf.Tensor,
              *aligned: tf.Tensor) -> list[tuple[tf.Tensor, list[tf.Tensor]]]:
        """Per block: (block-local ids, the matching rows of each `aligned` tensor).

        `sorted_ids` are distinct table ids in layout order (the module docstring), so each
        block owns a contiguous run of them.
        """
        if len(self.rows) == 1:
            return [(sorted_ids, list(aligned))]
        if self.strided:
            # Block numbers are ascending in layout order; each run starts at its first one.
            inner = tf.searchsorted(self.block_of(sorted_ids), tf.range(1, len(self.rows)),
                                    side="left", out_type=tf.int64)
        else:
            inner = tf.searchsorted(sorted_ids, tf.constant(self.offsets[1:-1], tf.int64),
                                    side="left", out_type=tf.int64)
        bounds = tf.unstack(tf.concat([
            tf.zeros([1], tf.int64), inner,
            tf.size(sorted_ids, out_type=tf.int64)[None]], axis=0), num=len(self.rows) + 1)
        return [(self.local_ids(sorted_ids[start:end], block),
                 [tensor[start:end] for tensor in aligned])
                for block, (start, end) in enumerate(zip(bounds[:-1], bounds[1:]))]

    def group_by_block(self, row_splits: tf.Tensor, ids: tf.Tensor,
                       gains: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """A CSR batch of R output rows with its lookups regrouped block by block.

        Returns (row_splits, ids, gains) over `len(rows) * R` rows: row `s * R + r` holds block
        `s`'s lookups of output row r, in their original order, so each block's lookups are a
        contiguous CSR batch of their own (`block_batches`). One block: the batch unchanged.
        """
        if len(self.rows) == 1:
            return row_splits, ids, gains
        num_rows = tf.size(row_splits, out_type=tf.int64) - 1
        lookup_rows = tf.repeat(tf.range(num_rows), row_splits[1:] - row_splits[:-1])
        blocks = self.block_of(ids)
        # A stable partition by block keeps each block's lookups in row order.
        order = tf.concat(tf.dynamic_partition(tf.range(tf.size(ids)), blocks, len(self.rows)),
                          axis=0)
        grouped_rows = tf.gather(tf.cast(blocks, tf.int64) * num_rows + lookup_rows, order)
        grouped_splits = tf.searchsorted(
            grouped_rows, tf.range(len(self.rows) * num_rows + 1), side="left",
            out_type=tf.int64)
        return grouped_splits, tf.gather(ids, order), tf.gather(gains, order)

    def block_batches(self, row_splits: tf.Tensor, ids: tf.Tensor,
                      gains: tf.Tensor) -> list[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
        """Per block, the CSR batch (row_splits over R rows, block-local ids, gains) of a batch
        grouped by `group_by_block`."""
        if len(self.rows) == 1:
            return [(row_splits, ids, gains)]
        num_rows = (tf.size(row_splits, out_type=tf.int64) - 1) // len(self.rows)
        batches = []
        for block in range(len(self.rows)):
            splits = row_splits[block * num_rows:(block + 1) * num_rows + 1]
            start, end = splits[0], splits[-1]
            batches.append((splits - start, self.local_ids(ids[start:end], block),
                            gains[start:end]))
        return batches

    def gather(self, variable: sharded_variable.ShardedVariable, sorted_ids: tf.Tensor,
               table_name: str) -> tf.Tensor:
        """The rows `sorted_ids` (distinct, in layout order) of `variable`, float
        `[len(sorted_ids), dim]`.

        Each block is read on its own device by the fused lookup (one lookup per output row),
        which reads the variable in place: a stock gather would switch the variable to
        copy-on-read, making every later in-place update copy the whole block.
        """
        parts = []
        # Iterating a ShardedVariable yields its blocks (`.variables` does not, inside a save).
        for (local_ids, _), block, device in zip(self.split(sorted_ids), variable, self.devices):
            with tf.device(device):
                parts.append(self.gather_block(block, local_ids, table_name))
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)

    @staticmethod
    def gather_block(block: tf.Variable, local_ids: tf.Tensor, table_name: str) -> tf.Tensor:
        """The rows `local_ids` of one block, read in place by the fused lookup (one lookup per
        output row), on the current device."""
        count = tf.size(local_ids, out_type=tf.int64)
        return ops.embedding_lookup(block, tf.range(count + 1), local_ids,
                                    tf.ones([count], tf.float32), table_name=table_name)


def _unchecked(initializer: Callable[..., Any]) -> Callable[..., Any]:
    """`initializer` without the engine's shape check (`ShapeCheckedInitializer`), whose rows
    `initial_rows` computes: the check would refuse them as a wrong shape."""
    if isinstance(initializer, ShapeCheckedInitializer):
        return initializer.initializer
    return initializer
