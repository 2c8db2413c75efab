"""A batch handed from `enqueue` to `dequeue` to `apply_gradients` inside one traced function,
where the engine's queues (`queues.ReplicaQueues`) cannot carry it.

Two places need this: a `ClusterCoordinator.schedule`d function under ParameterServerStrategy
(each scheduled function runs on whichever worker is free) and a `tf.function(jit_compile=True)`
(XLA has no kernels for queue ops). There the batch travels as tensors of the one function being
traced, and calls that span functions raise `RuntimeError` while tracing, with `rule` (which says
what to move where) appended; a queue's checks would only fire when the step runs.
"""

import dataclasses
import weakref
from typing import Any

import tensorflow as tf

from tf_embedding import ops
from tf_embedding.sharded.batch_types import Batch, TableBatch


@dataclasses.dataclass
class _FunctionState:
    """What one traced function holds between the calls of its step."""

    batch: Batch | None = None
    # A forward-only batch as it came (`put_raw_batch`): its kind and each table's features.
    raw: tuple[str, list[list[Any]]] | None = None
    # A dequeued training batch's lookups, and its training flag when only known at run time.
    pending: list[TableBatch] | None = None
    pending_training: tf.Tensor | None = None


class FunctionHandoff:
    """The `batch_types.BatchCarrier` inside one traced function, where a replica's
    `queues.ReplicaQueues` cannot run: the batch is kept in Python per traced graph."""

    def __init__(self, rule: str) -> None:
        self._rule = rule
        # Graphs die with their functions; so does what was left in them.
        self._states: "weakref.WeakKeyDictionary[Any, _FunctionState]" = (
            weakref.WeakKeyDictionary())

    def _state(self, method: str) -> _FunctionState:
        if tf.executing_eagerly():
            raise RuntimeError(f"{method}() was called eagerly. {self._rule}")
        return self._states.setdefault(tf.compat.v1.get_default_graph(), _FunctionState())

    # Raw batches are held as tensors of the traced function, so any kind may wait.
    takes_raw_batches = True

    def _state_to_put(self) -> _FunctionState:
        state = self._state("enqueue")
        if state.batch is not None or state.raw is not None:
            raise RuntimeError("enqueue() called twice in one function without a dequeue() "
                               f"between them. {self._rule}")
        return state

    def put_batch(self, batch: Batch) -> None:
        self._state_to_put().batch = batch

    def put_raw_batch(self, kind: str, tables: list[list[Any]]) -> None:
        """Holds a forward-only batch as it came, as `queues.ReplicaQueues.put_raw_batch`."""
        self._state_to_put().raw = (kind, tables)

    def holds_batch(self) -> bool:
        """Whether the function being traced has a batch (converted or raw) no dequeue() took
        yet."""
        if tf.executing_eagerly():
            return False
        state = self._state("dequeue")
        return state.batch is not None or state.raw is not None

    def take_kind_put_in_this_graph(self) -> str:
        """The kind of the batch this function holds: a raw kind, or "converted" (also when it
        holds none, for `take_batch` to raise)."""
        raw = self._state("dequeue").raw
        return "converted" if raw is None else raw[0]

    def holds_raw_batch(self, kind: str) -> tf.Tensor:
        """Whether this function holds a raw batch of `kind` (known while tracing)."""
        raw = self._state("dequeue").raw
        return tf.constant(raw is not None and raw[0] == kind)

    def take_raw_batch(self, kind: str) -> list[list[Any]]:
        """The raw batch of `kind` this function holds. REQUIRES: take_kind_put_in_this_graph()
        is `kind`."""
        state = self._state("dequeue")
        assert state.raw is not None and state.raw[0] == kind
        tables, state.raw = state.raw[1], None
        return tables

    def take_batch(self) -> Batch:
        state = self._state("dequeue")
        if state.batch is None:
            raise RuntimeError("dequeue() called without an enqueue() before it in the same "
                               f"function. {self._rule}")
        batch, state.batch = state.batch, None
        return batch

    def put_pending(self, tables: list[TableBatch], training: tf.Tensor) -> None:
        state = self._state("dequeue")
        static = tf.get_static_value(training)  # a numpy bool, or None if only known at run time
        if static is not None and not static:
            return
        if state.pending is not None:
            raise RuntimeError(
                "dequeue() of a training batch while the previous training batch of this "
                "function still awaits apply_gradients(): call apply_gradients() after each "
                "dequeue() of a batch enqueued with training=True.")
        state.pending = tables
        state.pending_training = None if static is not None else training

    def take_pending(self) -> list[TableBatch]:
        state = self._state("apply_gradients")
        if state.pending is None:
            raise RuntimeError(
                "apply_gradients() called without a dequeue() of a training batch before it "
                "in the same function (nothing dequeued, the batch was enqueued with "
                f"training=False, or its gradients were already applied). {self._rule}")
        tables, training = state.pending, state.pending_training
        state.pending = state.pending_training = None
        if training is None:
            return tables
        # Only a flag of this compiled function: a TPU-shaped step's flag comes with the batch
        # its caller enqueued (docs/xla.md, "Run-time errors").
        if ops.compiling_with_xla() and training.graph is tf.compat.v1.get_default_graph():
            raise ValueError(
                "apply_gradients() in a tf.function(jit_compile=True) of a batch enqueued with a "
                "training flag known only at run time: XLA drops the check that it is a "
                "training batch, so a training=False batch would update the tables. Pass "
                "enqueue() a Python bool (or a constant) for training in a compiled function.")
        # `training` was a tensor: the check can only run with the step.
        with tf.control_dependencies([tf.debugging.Assert(training, [
                "apply_gradients() called for a batch enqueued with training=False."])]):
            return [TableBatch(*[None if tensor is None else tf.identity(tensor)
                                        for tensor in table])
                    for table in tables]
