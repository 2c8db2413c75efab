"""`TPUEmbedding` under `tf.distribute.ParameterServerStrategy`: where blocks go, how a batch
travels from `enqueue` to `apply_gradients`, and the check that every PS can run the fused ops.

* **Blocks** go one per PS task, in task order (`ps_devices`), as row blocks of the engine's
  partition strategy (`layout.ShardLayout`), so a cluster checkpoint is the same full-shape
  tensor per key as a one-process one. The fused lookup and optimizer ops run on the task that
  owns each block.
* **No queues.** `ClusterCoordinator.schedule` runs each function on whichever worker is free,
  so a queue would have to live on the coordinator (shared by every worker, one RPC per queue op)
  or on one worker that the next scheduled function may not reach. Under this strategy `enqueue`,
  `dequeue` and `apply_gradients` must therefore be traced in one function; the batch is handed
  from one call to the next inside that trace (`handoff.FunctionHandoff`), and calls that span
  functions raise `RuntimeError` when the function is traced.
* **Op library.** A task that did not load the library before its server started cannot run the
  fused ops, and TF cannot load it remotely; `check_ops_on` turns the first step's raw
  "Op type not registered" into an error at `build()` naming the task and the remedy.
  Workers are not probed: the coordinator tolerates workers that are not up yet, and a worker
  without the library fails the first step it runs with TF's message.
"""

from typing import Sequence

import tensorflow as tf

from tf_embedding import _loader

_STRATEGIES = (tf.distribute.ParameterServerStrategy,
               tf.distribute.experimental.ParameterServerStrategy)
ONE_FUNCTION = (
    "Under ParameterServerStrategy, enqueue(), dequeue() and apply_gradients() of a batch must "
    "be called in one tf.function scheduled with ClusterCoordinator.schedule: each scheduled "
    "function runs on whichever worker is free, so a batch cannot wait on a worker for the next "
    "one (docs/parameter_server.md).")


def is_parameter_server_strategy(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, _STRATEGIES)


def ps_devices(strategy: tf.distribute.Strategy) -> tuple[str, ...]:
    """The CPU of every PS task of the cluster `strategy` connected to, in task order."""
    del strategy  # connected this process to its cluster, whose devices are now listed
    return tuple(f"/job:ps/replica:0/task:{task}/device:CPU:0" for task in _tasks("ps"))


def worker_count() -> int:
    """The worker tasks of the cluster this process is connected to."""
    return len(_tasks("worker"))


def _tasks(job: str) -> list[int]:
    """The task numbers of `job` among the listed CPU devices, ascending."""
    specs = [tf.DeviceSpec.from_string(device.name)
             for device in tf.config.list_logical_devices("CPU")]
    return sorted({spec.task for spec in specs if spec.job == job})


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
