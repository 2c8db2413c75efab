"""`tf-embedding train` as one worker of a MultiWorkerMirroredStrategy cluster (TF_CONFIG with
`worker` tasks, optionally a `chief`, no `ps`): synchronous training with the TPU's semantics.

Every worker runs the same job, step for step (docs/multi_worker.md):

* **Data.** Each worker reads the input stream and keeps its slice of every global batch of
  --batch-size examples (worker r of N: rows [r B/N, (r + 1) B/N)), so the global batch, the
  examples it holds and the position after a checkpoint's step are those of one process.
* **Steps.** The same custom loop; the embedding's tables are split over the workers (one block
  each) and its exchanges are collectives; the dense model is mirrored, its gradients
  all-reduced by MWMS. The step counter, the malformed count and the progress display's
  metrics are each worker's own (equal on every worker, or for display only).
* **Checkpoints.** Every worker saves at the same steps (a save is a collective): rank 0 (the
  chief) into the model directory, the others into a temporary directory they delete at the end
  (`checkpoint_directory`); `--resume` restores every worker from rank 0's.
* **Evaluation and export.** Every worker evaluates the same held-out batches (the lookups are
  collectives); rank 0 writes metrics.json and the SavedModel, and is the one that prints.
* **A lost worker** makes the others' next exchange fail (at once when its connection drops,
  else after --collective-timeout seconds): each exits with one line naming the task and saying
  to restart the cluster with --resume.
"""

import contextlib
import os
import re
import shutil
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from tf_embedding.cluster import server
from tf_embedding.job import training
from tf_embedding.job.data import common
from tf_embedding.job.options import checkpoint_dir
from tf_embedding.sharded.multi_worker.group import group_of

WORKER_RUNNER = server.Runner(
    "tf-embedding train", ("chief", "worker"),
    "On a cluster without ps tasks, tf-embedding train runs as every worker (and the chief).")

# Where TensorFlow's message names the task it could not reach.
_REMOTE_TARGET = re.compile(r"remote target (/job:(?:chief|worker)/replica:\d+/task:\d+)")
# What a collective says when a peer is gone: its connection dropped, or the timeout passed.
_LOST_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                     tf.errors.AbortedError, tf.errors.CancelledError, tf.errors.InternalError)


class WorkerLostError(RuntimeError):
    """Another worker of the cluster stopped answering during the run."""


def lost_worker_message(error: tf.errors.OpError, model_dir: str, timeout: float) -> str:
    """One line naming the task `error` says was lost, and what to do."""
    targets = _REMOTE_TARGET.findall(error.message)
    if targets:
        what = f"lost {targets[0]}"
    elif isinstance(error, tf.errors.DeadlineExceededError):
        what = f"a worker did not answer within the collective timeout ({timeout:g} s)"
    else:
        what = f"lost a worker of the cluster ({type(error).__name__})"
    return (f"{what}: restart every worker with --resume to continue from the last "
            f"checkpoint in {checkpoint_dir(model_dir)}")


class MultiWorkerExecution(training.Execution):
    """The custom loop on one worker of a MultiWorkerMirroredStrategy cluster."""

    def __init__(self, task: server.Task, model_dir: str, timeout_seconds: float):
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(task.cluster), task_type=task.task_type,
            task_id=task.task_index, rpc_layer=task.protocol)
        super().__init__(tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver,
            communication_options=tf.distribute.experimental.CommunicationOptions(
                timeout_seconds=timeout_seconds or None)))
        self._model_dir = model_dir
        self._timeout = timeout_seconds
        with self._worker_loss():
            self.workers = group_of(self.strategy, timeout_seconds)
        self.is_chief = self.workers.rank == 0

    def worker_rows(self, batch: common.Batch) -> common.Batch:
        """This worker's rows of `batch`: of n rows, rank r of N takes [r n // N, (r + 1) n // N)
        (every row once, in rank order), and rank 0 counts the batch's malformed records."""
        rank, size = self.workers.rank, self.workers.size
        rows = tf.shape(batch["label"], out_type=tf.int64)[0]
        start, stop = rank * rows // size, (rank + 1) * rows // size
        sliced = {key: ({name: tensor[start:stop] for name, tensor in value.items()}
                        if isinstance(value, dict) else value[start:stop])
                  for key, value in batch.items() if key != "malformed"}
        sliced["malformed"] = batch["malformed"] if rank == 0 else tf.zeros_like(
            batch["malformed"])
        return sliced

    def all_rows(self, value: Any) -> tf.Tensor:
        """Every worker's `value` (the per-replica result of its rows), in rank order."""
        return self.strategy.gather(value, axis=0)

    def checkpoint_directory(self, model_dir: str) -> str:
        """Rank 0's checkpoints go to the model directory, the others' to a temporary one (MWMS
        has every worker save; only the chief's are kept)."""
        if self.is_chief:
            return checkpoint_dir(model_dir)
        return os.path.join(model_dir, "temporary", f"worker{self.workers.rank}")

    def finish(self) -> None:
        if not self.is_chief:
            shutil.rmtree(os.path.join(self._model_dir, "temporary"), ignore_errors=True)

    @contextlib.contextmanager
    def local_state(self) -> Iterator[None]:
        """Variables made in here are this worker's own, not mirrored: plain resource variables
        (MWMS would sync every update of a mirrored one across the workers)."""
        def local_variable(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
            del next_creator
            return resource_variable_ops.ResourceVariable(
                initial_value=kwargs["initial_value"], trainable=kwargs.get("trainable"),
                name=kwargs.get("name"), dtype=kwargs.get("dtype"), shape=kwargs.get("shape"))

        with tf.variable_creator_scope(local_variable):
            yield

    def stop_agreed(self, requested: bool) -> bool:
        """Whether any worker was asked to stop (Ctrl-C, SIGTERM): one small gather per step,
        so that every worker stops, and saves, after the same step."""
        with self._worker_loss():
            flags = self.workers.all_gather(tf.constant([int(requested)], tf.int32),
                                            self.workers.exchange_keys()[0])
            return bool(tf.reduce_any(flags > 0))

    def dispatch(self, function: Callable[[common.Batch], Any], batch: common.Batch) -> Any:
        with self._worker_loss():
            return function(batch)

    @contextlib.contextmanager
    def collectives(self) -> Iterator[None]:
        with self._worker_loss():
            yield

    @contextlib.contextmanager
    def _worker_loss(self) -> Iterator[None]:
        """Turns a collective's failure (a worker gone) into a `WorkerLostError`."""
        try:
            yield
        except _LOST_PEER_ERRORS as error:
            raise WorkerLostError(lost_worker_message(error, self._model_dir,
                                                      self._timeout)) from None
