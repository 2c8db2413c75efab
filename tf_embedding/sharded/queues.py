"""The embedding engine's queues: what `enqueue` hands to `dequeue`, and `dequeue` to
`apply_gradients`.

On a TPU these three calls talk through the embedding engine, so they may sit in different
`tf.function`s. Here each replica has stock `FIFOQueue`s: the batch queue (converted id batches,
plus looked-up rows when pipelining), the pending queue (a training batch's lookups, kept for
`apply_gradients`) and, without pipelining, the raw queues: a forward-only batch of rank-2
`SparseTensor`s, of `RaggedTensor`s or of dense ids as it came, which `dequeue` converts and
looks up in one op (no update needs its converted batch). Calling them out of order would leave
a queue op blocked forever, so every queue op is preceded by a size check that fails instead: a
`RuntimeError` when executing eagerly, one op (`TfeCheckQueueSizes`: `InvalidArgumentError` when
the step runs) inside a `tf.function`.
"""

import weakref
from typing import Any, Callable, Sequence, TypeVar

import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded.batch_types import RAW_KINDS, Batch, TableBatch, TableSpec

T = TypeVar("T")


_TABLE_BATCH_DTYPES = (tf.int64, tf.int64, tf.int64, tf.float32, tf.int64)
# A feature of a raw batch, by kind: a SparseTensor's indices, ids and dense_shape; a
# RaggedTensor's ids and row_splits; a dense tensor's ids.
_RAW_DTYPES = dict(zip(RAW_KINDS, ((tf.int64, tf.int64, tf.int64), (tf.int64, tf.int64),
                                   (tf.int64,))))


def _checked(queues: Sequence[tf.queue.FIFOQueue], min_size: int, max_size: int, message: str,
             action: Callable[[], T]) -> T:
    """Runs `action` (a queue op) if the elements `queues` hold together number from `min_size`
    to `max_size`, else fails with `message` (never blocks)."""
    if tf.executing_eagerly():
        if not min_size <= sum(int(queue.size()) for queue in queues) <= max_size:
            raise RuntimeError(message)
        return action()
    check = ops.check_queue_sizes([queue.queue_ref for queue in queues], min_size, max_size,
                                  message)
    with tf.control_dependencies([check]):
        return action()


def _raw_components(kind: str, feature: Any) -> tuple[tf.Tensor, ...]:
    """The tensors a raw batch's queue holds for one feature (`_RAW_DTYPES`)."""
    if kind == "sparse":
        return feature.indices, feature.values, feature.dense_shape
    if kind == "dense":
        return (feature,)
    return feature.values, feature.row_splits


def _raw_feature(kind: str, components: list[tf.Tensor]) -> Any:
    """The feature `_raw_components` gave `components` of."""
    if kind == "sparse":
        indices, values, dense_shape = components
        indices.set_shape([None, 2])
        values.set_shape([None])
        dense_shape.set_shape([2])
        return tf.SparseTensor(indices, values, dense_shape)
    if kind == "dense":
        # Its shape is lost in the queue; a dense feature gives one row per id, whatever its
        # shape, and its output shape was set at enqueue time.
        (ids,) = components
        return ids
    values, row_splits = components
    values.set_shape([None])
    row_splits.set_shape([None])
    # Checked where it is looked up (TfeFeaturesLookup), as every other input.
    return tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)


class ReplicaQueues:
    """The batch and pending queues of one replica, on the replica's device: the
    `batch_types.BatchCarrier` across functions and eager calls."""

    def __init__(self, replica: int, device: str | None, tables: Sequence[TableSpec],
                 pipelined: bool):
        self._replica = replica
        self._tables = tuple(tables)
        self._pipelined = pipelined
        # Pipelining lets one batch be looked up ahead, while the previous one is still in use.
        self._capacity = 2 if pipelined else 1
        table_dtypes = [dtype for table in self._tables for dtype in _table_dtypes(table)]
        batch_dtypes = list(table_dtypes)
        if pipelined:
            batch_dtypes += [tf.float32] * len(self._tables)
        # Queues are resources made once, outside any tf.function being traced, so that every
        # function using this object captures the same ones.
        with tf.init_scope(), tf.device(device):
            self._batches = tf.queue.FIFOQueue(self._capacity, batch_dtypes + [tf.bool])
            self._pending = tf.queue.FIFOQueue(1, table_dtypes)
            # Pipelining looks a batch up at enqueue time, from its converted ids, and keeps
            # two batches in order: no raw queues then.
            num_features = sum(table.num_features for table in self._tables)
            self._raw = {} if pipelined else {
                kind: tf.queue.FIFOQueue(1, list(dtypes) * num_features)
                for kind, dtypes in _RAW_DTYPES.items()}

        # The kind of batch ("converted", or a raw kind) each traced graph last put here and no
        # dequeue of that graph has taken yet: without pipelining the queues hold one batch, so
        # a dequeue traced after an enqueue in the same graph takes that batch, and needs no
        # tf.cond on which queue holds it.
        self._put_in_graph: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _note_put(self, kind: str) -> None:
        if not tf.executing_eagerly():
            self._put_in_graph[tf.compat.v1.get_default_graph()] = kind

    def take_kind_put_in_this_graph(self) -> str | None:
        """The kind of the batch an enqueue traced in the current graph put, if no dequeue of
        this graph has taken it yet (None otherwise, or when executing eagerly); forgets it.
        REQUIRES: takes_raw_batches."""
        if tf.executing_eagerly():
            return None
        return self._put_in_graph.pop(tf.compat.v1.get_default_graph(), None)

    @property
    def takes_raw_batches(self) -> bool:
        """Whether `put_raw_batch` may be used (no pipelining)."""
        return bool(self._raw)

    def put_batch(self, batch: Batch) -> None:
        components = _flatten(batch.tables) + list(batch.rows or []) + [batch.training]
        self._put(self._batches, components)
        self._note_put("converted")

    def put_raw_batch(self, kind: str, tables: Sequence[Sequence[Any]]) -> None:
        """Holds a forward-only batch as it came (`batch_types.RAW_KINDS`). REQUIRES:
        takes_raw_batches."""
        self._put(self._raw[kind], [component for features in tables for feature in features
                                    for component in _raw_components(kind, feature)])
        self._note_put(kind)

    def _put(self, queue: tf.queue.FIFOQueue, components: list[tf.Tensor]) -> None:
        # The batches no dequeue has taken yet, in any queue, must leave room for this one.
        _checked([self._batches, *self._raw.values()], 0, self._capacity - 1,
                 f"enqueue() called while replica {self._replica} already holds "
                 f"{self._capacity} enqueued batch(es) that no dequeue() has taken: call "
                 "dequeue() (inside strategy.run) once for each enqueue().",
                 lambda: queue.enqueue(components))

    def holds_raw_batch(self, kind: str) -> tf.Tensor:
        """Whether the next batch to dequeue is a raw one of `kind` (bool scalar). REQUIRES:
        takes_raw_batches."""
        return self._raw[kind].size() > 0

    def take_raw_batch(self, kind: str) -> list[list[Any]]:
        """The batch `put_raw_batch` held: each table's features. REQUIRES:
        holds_raw_batch(kind)."""
        # A queue of one component (one dense feature) dequeues a tensor, not a list.
        components = iter(tf.nest.flatten(self._raw[kind].dequeue()))
        return [[_raw_feature(kind, [next(components) for _ in _RAW_DTYPES[kind]])
                 for _ in range(table.num_features)]
                for table in self._tables]

    def take_batch(self) -> Batch:
        components = _checked(
            [self._batches], 1, self._capacity,
            f"dequeue() called on replica {self._replica} with no enqueued batch: call "
            "enqueue() before each dequeue().",
            self._batches.dequeue)
        count = sum(len(_table_dtypes(table)) for table in self._tables)
        rows = None
        if self._pipelined:
            rows = components[count:count + len(self._tables)]
            for row_block, table in zip(rows, self._tables):
                row_block.set_shape([None, table.dim])
        training = components[-1]
        training.set_shape([])
        return Batch(self._unflatten(components[:count]), rows, training)

    def put_pending(self, tables: list[TableBatch], training: tf.Tensor) -> None:
        """Keeps a dequeued batch's lookups for apply_gradients if it is a training batch."""

        def put():
            return _checked(
                [self._pending], 0, 0,
                f"dequeue() of a training batch on replica {self._replica} while the previous "
                "training batch still awaits apply_gradients(): call apply_gradients() after "
                "each dequeue() of a batch enqueued with training=True (enqueue with "
                "training=False for lookups without an update).",
                lambda: self._pending.enqueue(_flatten(tables)))

        if tf.executing_eagerly():
            if bool(training):
                put()
        else:
            tf.cond(training, put, tf.no_op)

    def take_pending(self) -> list[TableBatch]:
        return self._unflatten(_checked(
            [self._pending], 1, 1,
            f"apply_gradients() called on replica {self._replica} without activations to "
            "update: it must follow a dequeue() of a batch enqueued with training=True (the "
            "last dequeued batch was enqueued with training=False, or its gradients were "
            "already applied).",
            self._pending.dequeue))

    def _unflatten(self, components: Sequence[tf.Tensor]) -> list[TableBatch]:
        remaining = list(components)
        batches = []
        for table in self._tables:
            row_splits, unique_ids = remaining.pop(0), remaining.pop(0)
            inverse = remaining.pop(0) if table.deduplicated else None
            gains, feature_row_counts = remaining.pop(0), remaining.pop(0)
            for tensor in (row_splits, unique_ids, inverse, gains):
                if tensor is not None:
                    tensor.set_shape([None])
            feature_row_counts.set_shape([table.num_features])
            batches.append(TableBatch(row_splits, unique_ids, inverse, gains, feature_row_counts))
        return batches


def _table_dtypes(table: TableSpec) -> list[tf.DType]:
    """The dtypes of a table's batch in the queues: a TableBatch's, without the inverse of a
    table that is not deduplicated."""
    return [dtype for field, dtype in zip(TableBatch._fields, _TABLE_BATCH_DTYPES)
            if table.deduplicated or field != "inverse"]


def _flatten(tables: Sequence[TableBatch]) -> list[tf.Tensor]:
    return [tensor for batch in tables for tensor in batch if tensor is not None]
