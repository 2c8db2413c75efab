"""How a replica's batch travels from `enqueue` to `dequeue` to `apply_gradients` in the sharded
`TPUEmbedding`, through its `engine.Engine` (`engine` below): the one place that runs the three
calls for a replica (`enqueue_batch`, `dequeue_outputs`, `apply_gradients`), each batch in the
replica's `batch_types.BatchCarrier`:

* converted at `enqueue` (CSR batches per table) and carried by the replica's engine queues
  (`queues.ReplicaQueues`), or inside one traced function that cannot hold queue ops (an
  XLA-compiled step, a function scheduled under ParameterServerStrategy) by a hand-off
  (`handoff.FunctionHandoff`);
* a forward-only batch of rank-2 sparse features, of ragged ones or of dense ones may wait
  unconverted in the queues (a raw batch), and `dequeue` then converts and looks it up in one op
  (`TfeFeaturesLookup`);
* a compiled `dequeue` with no batch of its own takes the batch its calling function enqueued,
  in that function, so that only tensors enter the compiled one (the TPU's program shape).
"""

from typing import Any, Callable, TypeVar

import tensorflow as tf
from tensorflow.python.framework import func_graph

from tf_embedding import ops
from tf_embedding.sharded.batch_types import RAW_KINDS, Batch, BatchCarrier
from tf_embedding.sharded.engine import Engine

T = TypeVar("T")


def raw_forward_batch(engine: Engine, batch_carrier: BatchCarrier, flat_inputs: list[Any],
                      flat_weights: list[Any], training: tf.Tensor
                      ) -> tuple[str, list[list[Any]]] | None:
    """(kind, each table's features) if this replica's batch may skip the conversion at
    enqueue time (`takes_raw_batches`): a forward-only batch (`training` False when tracing)
    without weights whose features are all rank-2 SparseTensors ("sparse"), all RaggedTensors
    of one ragged dimension ("ragged") or all dense tensors ("dense"), with int64 ids (and row
    splits). Else None."""
    static_training = tf.get_static_value(training)
    if (static_training is None or static_training
            or not takes_raw_batches(engine, batch_carrier)
            or any(weight is not None for weight in flat_weights)):
        return None
    kinds = {_raw_kind(inp) for inp in flat_inputs}
    if len(kinds) != 1 or None in kinds:
        return None
    return kinds.pop(), engine.group_by_table(flat_inputs)


def _raw_kind(inp: Any) -> str | None:
    """The raw batch kind `inp` may wait as, if any."""
    if isinstance(inp, tf.SparseTensor):
        return "sparse" if inp.shape.rank == 2 and inp.values.dtype == tf.int64 else None
    if isinstance(inp, tf.RaggedTensor):
        return ("ragged" if inp.ragged_rank == 1 and inp.shape.rank == 2
                and inp.values.dtype == tf.int64 and inp.row_splits.dtype == tf.int64 else None)
    if isinstance(inp, tf.Tensor):
        return "dense" if inp.dtype == tf.int64 else None
    return None


def takes_raw_batches(engine: Engine, batch_carrier: BatchCarrier) -> bool:
    """Whether forward-only batches may wait in `batch_carrier` unconverted, for `dequeue` to
    convert and look up in one op: engine queues without pipelining, or a compiled function's
    hand-off, and the engine `looks_up_features_directly` (not under ParameterServerStrategy,
    whose functions hand off their batches too)."""
    return batch_carrier.takes_raw_batches and engine.looks_up_features_directly()


def enqueue_batch(engine: Engine, replica: int, flat_inputs: list[Any],
                  flat_weights: list[Any], training: tf.Tensor) -> None:
    """`enqueue` on `replica`: its batch into its carrier, raw (`raw_forward_batch`) or
    converted, on the replica's device."""
    batch_carrier = engine.carrier(replica)
    raw = raw_forward_batch(engine, batch_carrier, flat_inputs, flat_weights, training)
    with tf.device(engine.replica_devices[replica]):
        if raw is not None:
            batch_carrier.put_raw_batch(*raw)
        else:
            batch_carrier.put_batch(engine.convert(flat_inputs, flat_weights, training))


def enqueue_replicas(engine: Engine, strategy: tf.distribute.Strategy, replicas: list[int],
                     flat_inputs: list[Any], flat_weights: list[Any], training: tf.Tensor, *,
                     together: bool, replica_id: Callable[[], int]) -> None:
    """`enqueue` on `replicas`, each with its components of per-replica values (other values
    go to every replica). `together`: every replica of `strategy` in one `strategy.run`
    (`replica_id()` names the running one), so their batches can meet in merge_calls."""
    if together:
        strategy.run(lambda inputs, weights: enqueue_batch(engine, replica_id(), inputs,
                                                           weights, training),
                     args=(flat_inputs, flat_weights))
        return
    for replica in replicas:
        enqueue_batch(engine, replica, [local(strategy, inp, replica) for inp in flat_inputs],
                      [local(strategy, weight, replica) for weight in flat_weights], training)


def local(strategy: tf.distribute.Strategy, value: Any, replica: int) -> Any:
    """`replica`'s component of a per-replica value; other values go to every replica."""
    if value is None:
        return None
    values = strategy.experimental_local_results(value)
    return values[replica] if len(values) > 1 else values[0]


def apply_gradients(engine: Engine, replica: int,
                    flat_gradients: list[tf.Tensor | None]) -> None:
    """`apply_gradients` on `replica`: the flat per-feature activation gradients (None: zeros)
    of its pending training batch, applied to every table."""
    with tf.device(engine.replica_devices[replica]):
        pending = engine.carrier(replica).take_pending()
        engine.apply_table_gradients(pending, engine.activation_gradients(pending,
                                                                          flat_gradients))


def dequeue_outputs(engine: Engine, replica: int, partial: bool) -> list[tf.Tensor]:
    """`dequeue` on `replica`: the flat activations of its next batch, wherever it waits, on
    the replica's device."""
    with tf.device(engine.replica_devices[replica]):
        return _dequeue_outputs(engine, replica, partial)


def _dequeue_outputs(engine: Engine, replica: int, partial: bool) -> list[tf.Tensor]:
    batch_carrier = engine.carrier(replica)
    if batch_carrier is engine.compiled_handoff and not batch_carrier.holds_batch():
        return _batch_outputs(engine, batch_carrier, partial,
                              _batch_of_calling_function(engine, replica))
    if takes_raw_batches(engine, batch_carrier):
        return _from_next_batch(
            batch_carrier,
            lambda kind: _raw_batch_outputs(engine, batch_carrier, kind, partial),
            lambda: _batch_outputs(engine, batch_carrier, partial))
    return _batch_outputs(engine, batch_carrier, partial)


def _from_next_batch(queue: BatchCarrier, raw: Callable[[str], T],
                     converted: Callable[[], T]) -> T:
    """`raw(kind)` or `converted()`, by the kind of `queue`'s next batch: the one an enqueue
    traced in this graph put, known while tracing, else asked at run time (`_unless_raw`; a
    hand-off always knows). REQUIRES: queue.takes_raw_batches."""
    kind = queue.take_kind_put_in_this_graph()
    if kind == "converted":
        return converted()
    if kind is not None:
        return raw(kind)
    return _unless_raw(queue, raw, converted)


def _unless_raw(queue: BatchCarrier, raw: Callable[[str], T],
                converted: Callable[[], T], kinds: tuple[str, ...] = RAW_KINDS) -> T:
    """`raw(kind)` if `queue`'s next batch is a raw one of one of `kinds`, else `converted()`:
    a tf.cond per raw kind, each in the one before's false branch."""
    if not kinds:
        return converted()
    kind = kinds[0]
    return tf.cond(queue.holds_raw_batch(kind), lambda: raw(kind),
                   lambda: _unless_raw(queue, raw, converted, kinds[1:]))


def _batch_outputs(engine: Engine, batch_carrier: BatchCarrier, partial: bool,
                   batch: Batch | None = None) -> list[tf.Tensor]:
    """The flat activations of `batch`, by default the next converted batch of `batch_carrier`;
    kept in `batch_carrier` for apply_gradients if it is a training batch."""
    if batch is None:
        batch = batch_carrier.take_batch()
    outputs = engine.batch_outputs(batch, partial)
    with tf.control_dependencies(outputs):
        batch_carrier.put_pending(batch.tables, batch.training)
    return outputs


def _raw_batch_outputs(engine: Engine, batch_carrier: BatchCarrier, kind: str,
                       partial: bool) -> list[tf.Tensor]:
    """The flat activations of the next raw batch of `kind` (`raw_forward_batch`), each
    table's features converted and looked up in one op."""
    return engine.raw_batch_outputs(batch_carrier.take_raw_batch(kind), partial)


def _batch_of_calling_function(engine: Engine, replica: int) -> Batch:
    """For a compiled dequeue with no batch of its own: the batch enqueued in the function that
    calls the compiled one, taken there (from its queues, converting a waiting sparse batch; or
    its own hand-off when it is compiled too, then further out).

    Raises:
      RuntimeError: no tf.function calls this one (the hand-off's rule says what to move).
    """
    outer = getattr(tf.compat.v1.get_default_graph(), "outer_graph", None)
    if not isinstance(outer, func_graph.FuncGraph):
        return engine.compiled_handoff.take_batch()  # raises, naming the rule
    with outer.as_default():
        # TF enters a compiled function's XLA context on the graph that calls it, so whether
        # the caller is compiled itself is known from its own caller.
        caller = getattr(outer, "outer_graph", None)
        if caller is not None and ops.compiling_with_xla(caller):
            compiled = engine.compiled_handoff
            if compiled.holds_batch():
                return _from_next_batch(compiled, lambda kind: engine.convert_raw_batch(
                    compiled.take_raw_batch(kind)), compiled.take_batch)
            return _batch_of_calling_function(engine, replica)
        queue = engine.replica_carrier(replica)
        with tf.device(engine.replica_devices[replica]):
            # Not `takes_raw_batches(engine, ...)`: this graph is in the compiled function's
            # XLA context now, but a raw batch may wait, put by an enqueue outside it.
            if not queue.takes_raw_batches:
                return _bucketed(queue.take_batch())

            return _bucketed(_from_next_batch(
                queue, lambda kind: engine.convert_raw_batch(queue.take_raw_batch(kind)),
                queue.take_batch))


def _bucketed(batch: Batch) -> Batch:
    """`batch` with each table's lookups padded to the next power of two, for a compiled
    function to take: XLA compiles once per shape of its inputs, so a batch whose lookup count
    changes from step to step compiles once per bucket instead of once per count. The padding
    (id 0, gain 0) lies after `row_splits[-1]`, where the compiled lookup, gradient and apply
    never read (docs/xla.md). Tables whose lookups are deduplicated (`inverse`; several blocks,
    which a compiled function refuses) are left as they are."""
    tables = []
    for table in batch.tables:
        if table.inverse is not None:
            tables.append(table)
            continue
        count = tf.size(table.gains, out_type=tf.int64)
        padding = [[0, _next_power_of_two(count) - count]]
        tables.append(table._replace(unique_ids=tf.pad(table.unique_ids, padding),
                                     gains=tf.pad(table.gains, padding)))
    return batch._replace(tables=tables)


def _next_power_of_two(count: tf.Tensor) -> tf.Tensor:
    """The least power of two >= `count` (int64 scalar; 1 for 0): every bit below the highest
    of `count - 1` set, plus one."""
    bits = tf.maximum(count, 1) - 1
    for shift in (1, 2, 4, 8, 16, 32):
        bits = tf.bitwise.bitwise_or(bits, tf.bitwise.right_shift(bits, tf.constant(shift,
                                                                                   tf.int64)))
    return bits + 1
