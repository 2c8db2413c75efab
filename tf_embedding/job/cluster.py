"""`tf-embedding train` as the chief of the parameter-server cluster that TF_CONFIG names.

Without TF_CONFIG, or with one that names no cluster (TF's own reading of `{}`), the job trains in
its own process. With a cluster it must be the cluster's `chief` task, the cluster must have `ps`
and `worker` tasks (each running `python -m tf_embedding.server`), and the embedding must be the
sharded one; anything else is a ValueError naming the problem before any connection is made.

On a cluster the job is the same loop, checkpoints, evaluation and export (`training.train`);
only where the steps run changes (`ClusterExecution`): `ParameterServerStrategy` creates the
run's variables on the ps tasks, the tables split in row blocks over them, and each training step
and each evaluation batch is one function scheduled by a `ClusterCoordinator` on a free worker.
"""

import contextlib
import logging
import os
import re
from typing import Any, Callable, Iterator, Mapping, TextIO

import tensorflow as tf

from tf_embedding.cluster import server
from tf_embedding.job import multi_worker
from tf_embedding.job import training
from tf_embedding.job.data import common
from tf_embedding.job.options import TrainOptions, check_cluster_training, checkpoint_dir

CHIEF_RUNNER = server.Runner(
    "tf-embedding train", ("chief",),
    "tf-embedding train is the cluster's chief (the coordinator); every ps and worker task runs "
    "`python -m tf_embedding.server`.")


class TaskLostError(RuntimeError):
    """A ps or worker task of the cluster stopped answering during the run."""


# Where TensorFlow's message names the task it lost: a gRPC error's remote target, and the
# address it could not reach.
_REMOTE_TARGET = re.compile(r"remote target (/job:(?:ps|worker)/replica:\d+/task:\d+)")
_ADDRESS = re.compile(r"ipv[46]:([0-9.]+:\d+|\[[0-9a-fA-F:]+\]:\d+)")


def lost_task_message(error: tf.errors.UnavailableError, model_dir: str) -> str:
    """One line naming the task `error` says was lost (a ps task before a worker: the tables
    live there) and what to do."""
    targets = _REMOTE_TARGET.findall(error.message)
    ps_targets = [target for target in targets if "/job:ps/" in target]
    task = (ps_targets or targets or ["a task of the cluster"])[0]
    address = _ADDRESS.search(error.message)
    where = f" ({address.group(1)})" if address else ""
    return (f"lost {task}{where}: restart it, then run tf-embedding train again with --resume "
            f"to continue from the last checkpoint in {checkpoint_dir(model_dir)}")


# The coordinator's reports of the steps a lost task failed (a dozen lines each): the failure
# itself (UnavailableError) and the steps cancelled after it (CancelledError), from the worker
# thread that ran the step or from its failure handler.
_LOST_TASK_REPORT = re.compile(
    r"(Remote function on worker \S+ failed with"
    r"|\s*/job:worker/task:\d+ encountered the following error when processing"
    r"(?: resource)? closure:) (?:UnavailableError|CancelledError)\(")


class _LostTaskFilter(logging.Filter):
    """Drops the coordinator's reports of a lost task: `TaskLostError`'s one line says what
    happened and what to do."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _LOST_TASK_REPORT.match(record.getMessage())


class _SaveRetracingFilter(logging.Filter):
    """Drops TF's retracing warning about its own checkpoint save: a checkpoint spanning several
    tasks is saved by a tf.function that TF defines anew on every save, so from the fifth
    checkpoint on each one would print that warning, which no code here can act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "MultiDeviceSaver.save.<locals>.tf_function_save" not in record.getMessage()


class ClusterExecution(training.Execution):
    """The steps and the evaluation batches as functions scheduled on the cluster's workers.

    The chief reads the input and passes each batch to its function as the argument, instead of
    each worker reading a per-worker dataset: TF gives a per-worker dataset no worker index, so
    every worker would read the whole stream. So each batch is trained once, a run with one
    worker takes the batches in the stream's order (the one-process run, with the tables in
    blocks), and `--resume` continues with the batch an uninterrupted run would have read. The
    price is that the input pipeline runs on the chief.
    """

    # Steps scheduled between two joins: a join lets the worker run dry while the chief
    # schedules the next steps, and the checkpoints and the progress display need one.
    steps_per_wait = 25
    # The chief reads the input and passes each batch to its step (the class docstring).
    steps_read_input = False

    def __init__(self, task: server.Task, model_dir: str):
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(task.cluster), task_type=task.task_type,
            task_id=task.task_index, rpc_layer=task.protocol)
        super().__init__(tf.distribute.ParameterServerStrategy(resolver))
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self._model_dir = model_dir
        tf.get_logger().addFilter(_SaveRetracingFilter())
        tf.get_logger().addFilter(_LostTaskFilter())

    def dispatch(self, function: Callable[[common.Batch], Any], batch: common.Batch) -> Any:
        with self._task_loss():
            return self.coordinator.schedule(function, args=(batch,))

    def result(self, value: Any) -> Any:
        with self._task_loss():
            return value.fetch()

    def wait(self) -> None:
        with self._task_loss():
            self.coordinator.join()

    @contextlib.contextmanager
    def _task_loss(self) -> Iterator[None]:
        """Turns TF's UnavailableError (a task stopped answering) into a `TaskLostError`."""
        try:
            yield
        except tf.errors.UnavailableError as error:
            raise TaskLostError(lost_task_message(error, self._model_dir)) from None


def execution_for(options: TrainOptions, stream: TextIO,
                  environ: Mapping[str, str] = os.environ) -> training.Execution:
    """Where `tf-embedding train` runs: this process; the parameter-server cluster of TF_CONFIG
    as its chief; or, when that cluster has no ps tasks, as one of its workers
    (MultiWorkerMirroredStrategy, `multi_worker`).

    Raises:
      ValueError: TF_CONFIG is malformed (`server.ConfigError`), names another task than the
        chief of a parameter-server cluster, a cluster without worker tasks, --embedding-api is
        not sharded, or --jit-compile is given.
    """
    text = environ.get("TF_CONFIG")
    task = server.parse_optional_tf_config(text, multi_worker.WORKER_RUNNER)
    if task is None:
        return training.Execution()
    if not task.cluster.get("ps"):
        return _worker_execution(task, options, stream)
    task = server.parse_optional_tf_config(text, CHIEF_RUNNER)
    missing = [task_type for task_type in ("ps", "worker") if not task.cluster.get(task_type)]
    if missing:
        raise ValueError(
            f"TF_CONFIG names a cluster without {' or '.join(missing)} tasks: tf-embedding train "
            "trains on a parameter-server cluster (a chief, ps and worker tasks) or, without "
            "TF_CONFIG, in one process.")
    check_cluster_training(options)
    stream.write(f"training as the chief ({task.address}) of {len(task.cluster['ps'])} ps and "
                 f"{len(task.cluster['worker'])} worker task(s)\n")
    return ClusterExecution(task, options.model_dir)


def _worker_execution(task: server.Task, options: TrainOptions,
                      stream: TextIO) -> multi_worker.MultiWorkerExecution:
    """This process as its task of a MultiWorkerMirroredStrategy cluster."""
    if not task.cluster.get("worker"):
        raise ValueError(
            "TF_CONFIG names a cluster without worker tasks: tf-embedding train trains on a "
            "parameter-server cluster (a chief, ps and worker tasks), on a multi-worker one "
            "(worker tasks, optionally a chief) or, without TF_CONFIG, in one process.")
    check_cluster_training(options)
    execution = multi_worker.MultiWorkerExecution(task, options.model_dir,
                                                  options.collective_timeout)
    workers = execution.workers
    stream.write(f"training as worker {workers.rank} of {workers.size} "
                 f"({task.task_type} {task.task_index}, {task.address}), synchronously\n")
    return execution
