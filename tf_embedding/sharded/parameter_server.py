"""`TPUEmbedding` under `tf.distribute.ParameterServerStrategy`: where blocks go, how a batch
travels from `enqueue` to `apply_gradients`, and the check that every PS can run the fused ops.

* **Blocks** go one per PS task, in task order (`ps_devices`), as row blocks of the engine's
  partition strategy (`layout.ShardLayout`), so a cluster checkpoint is the same full-shape
  tensor per key as a one-process one. The fused lookup and optimizer ops run on the task that owns each block.
* **No queues.** `ClusterCoordinator.schedule` runs each function on whichever worker is free,
  so a queue would have to live on the coordinator (shared by every worker, one RPC per queue op)
  or on one worker that the next scheduled function may not reach. Under this strategy `enqueue`,
  `dequeue` and `apply_gradients` must therefore be traced in one function; the batch is handed
  from one call to the next inside that trace (`FunctionHandoff`), and calls that span functions
  raise `RuntimeError` when the function is traced.
* **Op library.** A task that did not load the library before its server started cannot run the
  fused ops, and TF cannot load it remotely; `check_ops_on` turns the first step's raw
  "Op type not registered" into an error at `build()` naming the task and the remedy.
  Workers are not probed: the coordinator tolerates workers that are not up yet, and a worker
  without the library fails the first step it runs with TF's message.
"""

import dataclasses
import weakref
from typing import Any, Sequence

import tensorflow as tf

from tf_embedding import _loader
from tf_embedding.sharded import queues

_STRATEGIES = (tf.distribute.ParameterServerStrategy,
               tf.distribute.experimental.ParameterServerStrategy)
_ONE_FUNCTION = (
    "Under ParameterServerStrategy, enqueue(), dequeue() and apply_gradients() of a batch must "
    "be called in one tf.function scheduled with ClusterCoordinator.schedule: each scheduled "
    "function runs on whichever worker is free, so a batch cannot wait on a worker for the next "
    "one (docs/parameter_server.md).")


def is_parameter_server_strategy(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, _STRATEGIES)


def ps_devices(strategy: tf.distribute.Strategy) -> tuple[str, ...]:
    """The CPU of every PS task of the cluster `strategy` connected to, in task order."""
    del strategy  # connected this process to its cluster, whose devices are now listed
    specs = [tf.DeviceSpec.from_string(device.name)
             for device in tf.config.list_logical_devices("CPU")]
    tasks = sorted(spec.task for spec in specs if spec.job == "ps")
    return tuple(f"/job:ps/replica:0/task:{task}/device:CPU:0" for task in tasks)


def check_ops_on(devices: Sequence[str | None]) -> None:
    """Runs a fused op on each device's task once, eagerly from the coordinator.

    Raises:
      RuntimeError: a task lacks the op library (its server was not started by
        `python -m tf_embedding.server`).
    """
    library = _loader.load_ops()
    for device in dict.fromkeys(devices):  # each task once, in order
        try:
            with tf.device(device):
                library.tfe_embedding_lookup_dense(
                    table=tf.zeros([1, 1]), row_splits=tf.zeros([1], tf.int64),
                    ids=tf.zeros([0], tf.int64), gains=tf.zeros([0]), table_name="probe")
        except tf.errors.NotFoundError as error:
            # Eagerly TF says "'TfeEmbeddingLookupDense' is neither a type of a primitive
            # operation nor a name of a function registered in binary"; in a function part,
            # "Op type not registered 'TfeEmbeddingLookupDense'".
            if "TfeEmbeddingLookupDense" not in error.message:
                raise
            raise RuntimeError(
                f"The task of {device} cannot run tf_embedding's ops: its server did not load "
                "the op library before starting. Start every ps and worker task with "
                "`python -m tf_embedding.server` (or call tf_embedding._loader.load_ops() "
                f"before tf.distribute.Server). TensorFlow said: {error.message}") from None


@dataclasses.dataclass
class _FunctionState:
    """What one traced function holds between the calls of its step."""

    batch: queues.Batch | None = None
    # A dequeued training batch's lookups, and its training flag when only known at run time.
    pending: list[queues.TableBatch] | None = None
    pending_training: tf.Tensor | None = None


class FunctionHandoff:
    """The stand-in for a replica's `queues.ReplicaQueues` under ParameterServerStrategy.

    Same methods, but the batch is kept in Python per traced graph, so it travels from `enqueue`
    to `dequeue` to `apply_gradients` as tensors of that one function and never leaves the worker
    running it. Misuse raises `RuntimeError` while tracing (a queue's checks fire at run time).
    """

    def __init__(self) -> None:
        # Graphs die with their functions; so does what was left in them.
        self._states: "weakref.WeakKeyDictionary[Any, _FunctionState]" = (
            weakref.WeakKeyDictionary())

    def _state(self, method: str) -> _FunctionState:
        if tf.executing_eagerly():
            raise RuntimeError(f"{method}() was called eagerly. {_ONE_FUNCTION}")
        return self._states.setdefault(tf.compat.v1.get_default_graph(), _FunctionState())

    def put_batch(self, batch: queues.Batch) -> None:
        state = self._state("enqueue")
        if state.batch is not None:
            raise RuntimeError("enqueue() called twice in one function without a dequeue() "
                               f"between them. {_ONE_FUNCTION}")
        state.batch = batch

    def take_batch(self) -> queues.Batch:
        state = self._state("dequeue")
        if state.batch is None:
            raise RuntimeError("dequeue() called without an enqueue() before it in the same "
                               f"function. {_ONE_FUNCTION}")
        batch, state.batch = state.batch, None
        return batch

    def put_pending(self, tables: list[queues.TableBatch], training: tf.Tensor) -> None:
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

    def take_pending(self) -> list[queues.TableBatch]:
        state = self._state("apply_gradients")
        if state.pending is None:
            raise RuntimeError(
                "apply_gradients() called without a dequeue() of a training batch before it "
                "in the same function (nothing dequeued, the batch was enqueued with "
                f"training=False, or its gradients were already applied). {_ONE_FUNCTION}")
        tables, training = state.pending, state.pending_training
        state.pending = state.pending_training = None
        if training is None:
            return tables
        # `training` was a tensor: the check can only run with the step.
        with tf.control_dependencies([tf.debugging.Assert(training, [
                "apply_gradients() called for a batch enqueued with training=False."])]):
            return [queues.TableBatch(*[tf.identity(tensor) for tensor in table])
                    for table in tables]
