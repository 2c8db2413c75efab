"""What a replica's batch is between `enqueue`, `dequeue` and `apply_gradients`, and the one
protocol of what carries it there (`BatchCarrier`).

A batch is converted (one `TableBatch` per table, in a `Batch`), or for a forward-only batch of
one input kind (`RAW_KINDS`) raw: each table's features as they came, which `dequeue` converts
and looks up in one op. Two carriers implement `BatchCarrier`: the replica's engine queues
(`queues.ReplicaQueues`, across functions and eager calls) and the hand-off of one traced
function (`handoff.FunctionHandoff`: an XLA-compiled step, a function scheduled under
ParameterServerStrategy), where queue ops cannot run.
"""

from typing import Any, NamedTuple, Protocol, Sequence

import tensorflow as tf

# The kinds a forward-only batch may wait as, unconverted: all rank-2 SparseTensors, all
# RaggedTensors of one ragged dimension, all dense tensors (int64 ids and row splits).
RAW_KINDS = ("sparse", "ragged", "dense")


class TableBatch(NamedTuple):
    """One table's lookups on one replica: lookup k reads table row `unique_ids[inverse[k]]`
    with gain `gains[k]` into output row r, row_splits[r] <= k < row_splits[r + 1].

    The batches of a sharding that deduplicates (`Sharding.deduplicated`: row-wise) hold
    distinct `unique_ids` in the layout's order (`ShardLayout`). The others' (pooled row-wise,
    table-wise) do not: `unique_ids` are the lookups' ids and `inverse` is None (lookup k reads
    row `unique_ids[k]`), and with P blocks the lookups are grouped by block over P * R rows
    (`ShardLayout.group_by_block`)."""

    row_splits: tf.Tensor  # int64 [R + 1]
    unique_ids: tf.Tensor  # int64 [U]
    inverse: tf.Tensor | None  # int64 [nnz]; None if not deduplicated
    gains: tf.Tensor  # float32 [nnz]
    feature_row_counts: tf.Tensor  # int64 [num_features]: output rows of each feature

    def inverse_or_identity(self) -> tf.Tensor:
        """`inverse`, or without one the identity it stands for (made only where a caller
        needs it: a pooled sharding's own lookup and update read `unique_ids` directly)."""
        if self.inverse is not None:
            return self.inverse
        return tf.range(tf.size(self.unique_ids, out_type=tf.int64))


class TableSpec(NamedTuple):
    """What a carrier needs to know about a table to restore its batches."""

    num_features: int
    dim: int
    deduplicated: bool  # whether its batches have an `inverse` (`Sharding.deduplicated`)


class Batch(NamedTuple):
    """One enqueued, converted batch of a replica."""

    tables: list[TableBatch]
    # With pipelining, each table's rows `unique_ids`, looked up at enqueue time: [U, dim].
    rows: list[tf.Tensor] | None
    training: tf.Tensor  # bool scalar


class BatchCarrier(Protocol):
    """What carries one replica's batches from `enqueue` to `dequeue` (`put_batch` /
    `put_raw_batch`, then `take_batch` / `take_raw_batch`) and a dequeued training batch's
    lookups to `apply_gradients` (`put_pending`, then `take_pending`). Calls out of order raise
    (RuntimeError while tracing or eagerly, InvalidArgumentError when a step runs)."""

    @property
    def takes_raw_batches(self) -> bool:
        """Whether `put_raw_batch` may be used."""

    def put_batch(self, batch: Batch) -> None:
        """Holds a converted batch for the next `take_batch`."""

    def put_raw_batch(self, kind: str, tables: Sequence[Sequence[Any]]) -> None:
        """Holds a forward-only batch of one of `RAW_KINDS` as it came: each table's
        features. REQUIRES: takes_raw_batches."""

    def take_kind_put_in_this_graph(self) -> str | None:
        """The kind ("converted" or a raw kind) of the next batch if known while tracing (put
        in the graph being traced), else None. REQUIRES: takes_raw_batches."""

    def holds_raw_batch(self, kind: str) -> tf.Tensor:
        """Whether the next batch is a raw one of `kind` (bool scalar, known at run time).
        REQUIRES: takes_raw_batches."""

    def take_raw_batch(self, kind: str) -> list[list[Any]]:
        """The raw batch `put_raw_batch` held: each table's features."""

    def take_batch(self) -> Batch:
        """The next converted batch."""

    def put_pending(self, tables: list[TableBatch], training: tf.Tensor) -> None:
        """Keeps a dequeued batch's lookups for `apply_gradients` if it is a training batch."""

    def take_pending(self) -> list[TableBatch]:
        """The lookups `put_pending` kept."""
