"""The workers of a `MultiWorkerMirroredStrategy` cluster as one collective group: who they are,
in which order, and the collective ops the engine exchanges ids, rows and gradients with.

* **Members and ranks.** Every worker task (and the chief, if the cluster has one) runs one
  replica on its CPU. TF orders a collective group's members by device name, so ranks follow the
  sorted task names (`/job:chief` before `/job:worker`, `task:10` before `task:2`); rather than
  assume that, `WorkerGroup` learns the order once, at creation, by gathering every member's
  task. Rank 0 is MWMS's chief (the chief task, else worker 0), which writes the checkpoint.
* **Keys.** The group has its own group key (`GROUP_KEY`, far from the range MWMS allocates
  from 1 upwards). A collective instance's shape is fixed by its first call, and the engine's
  shapes change from step to step, so every exchange takes fresh instance keys at run time: an
  int32 counter variable, incremented once per exchange (`exchange_keys`) in program order,
  which every worker runs identically, so equal calls get equal keys on every worker. Keys of
  one exchange are `base * KEYS_PER_EXCHANGE + k`; they wrap after 2^31 / KEYS_PER_EXCHANGE
  (134 million) exchanges of one process.
* **Equal shapes.** `CollectiveAllToAllV2` and `CollectiveGatherV2` need the same shape on
  every member. `all_to_all_padded` pads each member's parts to a capacity agreed in the same
  step (the largest part of any member, which every member learns from a gathered count matrix)
  and cuts the padding off what arrives.
* **Timeouts.** Every collective fails with DeadlineExceeded after `timeout_seconds` without its
  peers (0: wait forever), which is how a lost worker stops the others (docs/multi_worker.md).
"""

import weakref
from typing import Sequence

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from tf_embedding.sharded.multi_worker import memory

GROUP_KEY = 0x7E5D0001
KEYS_PER_EXCHANGE = 16
DEFAULT_TIMEOUT_SECONDS = 600.0
# How a task is encoded in the start-up gather: job * 2^32 + task index.
_JOB_CODES = {"chief": 0, "worker": 1}

_groups: "weakref.WeakKeyDictionary[tf.distribute.Strategy, WorkerGroup]" = (
    weakref.WeakKeyDictionary())


def is_multi_worker_strategy(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, (tf.distribute.MultiWorkerMirroredStrategy,
                                 tf.distribute.experimental.MultiWorkerMirroredStrategy))


def group_of(strategy: tf.distribute.Strategy,
             timeout_seconds: float | None = None) -> "WorkerGroup":
    """The one `WorkerGroup` of `strategy` (every TPUEmbedding under it shares its key counter,
    so their exchanges never reuse an instance key). Created, with a collective across the
    workers, on first use; `timeout_seconds` applies from then on when given."""
    group = _groups.get(strategy)
    if group is None:
        group = _groups[strategy] = WorkerGroup(strategy)
    if timeout_seconds is not None:
        group.timeout_seconds = checked_timeout(timeout_seconds)
    return group


def checked_timeout(timeout_seconds: float) -> float:
    if not timeout_seconds >= 0:
        raise ValueError(f"collective_timeout_seconds must be >= 0 (0: no timeout), got "
                         f"{timeout_seconds!r}.")
    return float(timeout_seconds)


class WorkerGroup:
    """The collective group of an MWMS cluster's workers, as the sharded engine uses it.

    Attributes:
      size: the number of workers (each runs one replica).
      rank: this worker's rank, its position in the group's order.
      devices: every member's CPU device, by rank.
      device: this worker's CPU device.
      timeout_seconds: how long a collective waits for its peers (0: forever).
      least_available_bytes: the least memory a member had available when the group formed
        (`memory.available_bytes`), what a table read whole on every worker must fit.
    """

    def __init__(self, strategy: tf.distribute.Strategy):
        """Learns the members' order with one gather across the workers (every worker must
        create its group, as every worker builds its TPUEmbedding).

        Raises:
          ValueError: a worker runs more than one replica (e.g. several GPUs per worker).
        """
        local_devices = tuple(strategy.extended.worker_devices)
        if len(local_devices) != 1:
            raise ValueError(
                "TPUEmbedding under MultiWorkerMirroredStrategy needs one replica per worker "
                f"(its CPU), but this worker runs {len(local_devices)}: {list(local_devices)}. "
                "Run one worker task per machine, without accelerators.")
        self.device = local_devices[0]
        self.size = int(strategy.num_replicas_in_sync)
        self.timeout_seconds = DEFAULT_TIMEOUT_SECONDS
        with tf.init_scope():
            self._counter = _local_counter(self.device)
            self.tasks = self._gather_tasks()
        spec = tf.DeviceSpec.from_string(self.device)
        self.rank = self.tasks.index((spec.job, spec.task))
        self.devices = tuple(f"/job:{job}/replica:0/task:{task}/device:CPU:0"
                             for job, task in self.tasks)

    def _gather_tasks(self) -> list[tuple[str, int]]:
        """Every member's (job, task index), by rank, and the least memory any member has
        available (`least_available_bytes`): one gather, eagerly, at start-up."""
        spec = tf.DeviceSpec.from_string(self.device)
        code = tf.constant([[_JOB_CODES[spec.job] * 2 ** 32 + spec.task,
                             memory.available_bytes()]], tf.int64)
        codes = self.all_gather(code, self.exchange_keys()[0]).numpy()
        self.least_available_bytes = int(codes[:, 1].min())
        names = {code: name for name, code in _JOB_CODES.items()}
        return [(names[int(value) >> 32], int(value) & 0xFFFFFFFF) for value in codes[:, 0]]

    def ranks_of(self, devices: Sequence[str]) -> tuple[int, ...]:
        """The rank of each of `devices` (members' devices, as `devices` names them)."""
        return tuple(self.devices.index(device) for device in devices)

    def exchange_keys(self) -> list[tf.Tensor]:
        """`KEYS_PER_EXCHANGE` fresh instance keys (int32 scalars) for one exchange."""
        with tf.device(self.device):
            base = self._counter.assign_add(1) * KEYS_PER_EXCHANGE
            return [base + offset for offset in range(KEYS_PER_EXCHANGE)]

    def all_gather(self, value: tf.Tensor, instance_key: tf.Tensor) -> tf.Tensor:
        """Every member's `value` (same shape everywhere), concatenated along dim 0 by rank."""
        if self.size == 1:
            return value  # a cluster of one worker: nothing to exchange
        with tf.device(self.device):
            return tf.raw_ops.CollectiveGatherV2(
                input=value, group_size=self.size, group_key=GROUP_KEY,
                instance_key=instance_key, ordering_token=[], communication_hint="ring",
                timeout_seconds=self.timeout_seconds)

    def all_to_all(self, value: tf.Tensor, instance_key: tf.Tensor) -> tf.Tensor:
        """`value` [size, ...] (same shape everywhere): slice i goes to rank i; slice i of the
        result came from rank i."""
        if self.size == 1:
            return value
        with tf.device(self.device):
            return tf.raw_ops.CollectiveAllToAllV2(
                input=value, group_size=self.size, group_key=GROUP_KEY,
                instance_key=instance_key, ordering_token=[], communication_hint="ring",
                timeout_seconds=self.timeout_seconds)

    def all_to_all_padded(self, parts: Sequence[tf.Tensor], sent_counts: tf.Tensor,
                          received_counts: tf.Tensor, capacity: tf.Tensor,
                          instance_key: tf.Tensor) -> list[tf.Tensor]:
        """Sends 1-D `parts[i]` (length `sent_counts[i]`) to rank i, padded to `capacity`
        (>= every member's every count, agreed in this step); returns what each rank sent
        here, cut to `received_counts[i]`."""
        with tf.device(self.device):
            padded = tf.stack([tf.pad(part, [[0, capacity - count]])
                               for part, count in zip(parts, tf.unstack(sent_counts,
                                                                         num=self.size))])
            received = tf.unstack(self.all_to_all(padded, instance_key), num=self.size)
            return [part[:count] for part, count in
                    zip(received, tf.unstack(received_counts, num=self.size))]


def _local_counter(device: str) -> tf.Variable:
    """The instance-key counter: a plain resource variable on this worker (a tf.Variable made
    under MWMS's scope would be mirrored and kept in sync by collectives of its own)."""
    with tf.device(device):
        return resource_variable_ops.ResourceVariable(0, dtype=tf.int32, trainable=False,
                                                      name="tf_embedding_collective_keys")
