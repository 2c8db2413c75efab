"""`python -m tf_embedding.server`: one `ps` or `worker` task of a parameter-server cluster.

Every `ps` and `worker` task of a `tf.distribute.ParameterServerStrategy` cluster that trains a
`tf_embedding.TPUEmbedding` runs this module's `main` (the command `python -m tf_embedding.server`
is `tf_embedding/server.py`, which only calls it); the chief (the coordinator) runs the user's
script. It reads the cluster and this task from `TF_CONFIG` (TF's convention), then:

* loads tf_embedding's op library *before* starting the server: the fused lookup and optimizer
  ops run on the task that owns each table block, and a running server cannot load an op library
  later (a task without it fails the first step with "Op type not registered");
* sets TF's thread pools so that the tasks sharing a machine do not oversubscribe it (a loopback
  cluster on a 2-core box runs 4 or 5 TF processes);
* starts `tf.distribute.Server`, prints one readiness line (`READY_MARKER ...`, naming the
  interfaces its port listens on and who can reach it) and serves until SIGTERM or SIGINT, on
  which it exits with status 0.

TensorFlow's server listens on every interface, whatever host TF_CONFIG names, and runs any op
that reaches its port, with no authentication or encryption: keep a cluster on a trusted network,
its tasks' ports reachable only from its own hosts (docs/parameter_server.md).

A missing or malformed `TF_CONFIG` exits with status 2 and a message saying what is wrong.
"""

import argparse
import dataclasses
import json
import os
import signal
import sys
from typing import Any, Mapping, Sequence

from tf_embedding.cluster import network_interfaces

READY_MARKER = "tf_embedding.server ready:"
_EXAMPLE = ('TF_CONFIG=\'{"cluster": {"chief": ["host0:2222"], "ps": ["host1:2222"], '
            '"worker": ["host2:2222"]}, "task": {"type": "ps", "index": 0}}\'')


@dataclasses.dataclass(frozen=True)
class Runner:
    """A program that runs some task types of a cluster, for TF_CONFIG's checks and messages."""

    name: str
    task_types: tuple[str, ...]
    # Said when TF_CONFIG names another task type: what runs that one instead.
    hint: str


SERVER_RUNNER = Runner("python -m tf_embedding.server", ("ps", "worker"),
                       "The chief is the coordinator: it runs the training script "
                       "(ParameterServerStrategy + ClusterCoordinator), not this server.")


class ConfigError(ValueError):
    """TF_CONFIG is missing or does not describe a task of its cluster that the program runs."""


@dataclasses.dataclass(frozen=True)
class Task:
    """This process's task in its cluster, from TF_CONFIG."""

    cluster: dict[str, list[str]]  # task type -> addresses, in index order
    task_type: str
    task_index: int
    protocol: str

    @property
    def address(self) -> str:
        return self.cluster[self.task_type][self.task_index]

    @property
    def host(self) -> str:
        return _host(self.address)

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def tasks_on_this_host(self) -> int:
        """How many tasks of the cluster (chief included) share this task's host."""
        return sum(_host(address) == self.host
                   for addresses in self.cluster.values() for address in addresses)


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0]


def parse_tf_config(text: str | None, runner: Runner = SERVER_RUNNER) -> Task:
    """The task described by the JSON text of TF_CONFIG, one that `runner` runs.

    Raises:
      ConfigError: `text` is None or empty, not a JSON object, lacks `cluster` or `task`, or
        names a task type `runner` does not run or an index outside the cluster.
    """
    if not text:
        raise ConfigError(
            f"TF_CONFIG is not set: {runner.name} needs the cluster and this task's type and "
            f"index, e.g. {_EXAMPLE}")
    return _parse_task(_json_object(text), runner)


def parse_optional_tf_config(text: str | None, runner: Runner) -> Task | None:
    """As `parse_tf_config`, but None when TF_CONFIG is unset or empty or names no cluster
    (no or an empty "cluster"), which TF also takes for a process outside any cluster."""
    if not text or not text.strip():
        return None
    config = _json_object(text)
    if not config.get("cluster"):
        return None
    return _parse_task(config, runner)


def _json_object(text: str) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({error}): {text!r}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"TF_CONFIG must be a JSON object, got {text!r}")
    return config


def _parse_task(config: dict[str, Any], runner: Runner) -> Task:
    cluster = _parse_cluster(config.get("cluster"))
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ConfigError(
            f"TF_CONFIG needs \"task\": {{\"type\": ..., \"index\": ...}}, got {task!r}")
    task_type, index = task["type"], task["index"]
    if task_type not in runner.task_types:
        raise ConfigError(f"TF_CONFIG task type {task_type!r} is not run by {runner.name}, "
                          f"which runs {runner.task_types} tasks. {runner.hint}")
    if task_type not in cluster:
        raise ConfigError(f"TF_CONFIG task type {task_type!r} has no entry in the cluster "
                          f"{sorted(cluster)}.")
    if isinstance(index, bool) or not isinstance(index, int) or not (
            0 <= index < len(cluster[task_type])):
        raise ConfigError(f"TF_CONFIG task index {index!r} is not an index of the "
                          f"{len(cluster[task_type])} {task_type!r} task(s) of the cluster.")
    protocol = task.get("rpc_layer") or config.get("rpc_layer") or "grpc"
    return Task(cluster, task_type, index, protocol)


def _parse_cluster(cluster: Any) -> dict[str, list[str]]:
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError(f"TF_CONFIG needs a non-empty \"cluster\" object of task type -> "
                          f"[\"host:port\", ...], got {cluster!r}")
    parsed = {}
    for task_type, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(
                isinstance(address, str) and ":" in address for address in addresses):
            raise ConfigError(f"TF_CONFIG cluster entry {task_type!r} must be a list of "
                              f"\"host:port\" strings, got {addresses!r}")
        parsed[task_type] = list(addresses)
    return parsed


def thread_counts(task: Task, cpus: int) -> tuple[int, int]:
    """(intra-op, inter-op) thread counts for `task` on a machine with `cpus` cores.

    The kernels parallelise with the intra-op pool, so the cores are shared among the tasks on
    this host (a one-task-per-machine cluster keeps them all). The inter-op pool runs the
    concurrently arriving function parts and mostly waits; TF's multi-worker tests need at least
    `workers + 1` of those or the cluster can hang (b/172296720), and 4 leaves room for the
    chief's and the save/restore calls.
    """
    intra = max(1, cpus // task.tasks_on_this_host())
    inter = max(4, len(task.cluster.get("worker", ())) + 1)
    return intra, inter


def reach(port: int) -> str:
    """Which interfaces this process's `port` listens on, and who can therefore reach it."""
    listening = network_interfaces.listening_interfaces(port)
    if listening is None:
        return (f"port {port} listens on the interfaces TensorFlow's server binds (every one; "
                "they cannot be read here): anyone who can reach this machine can run any op "
                "in this task.")
    every, reachable = listening
    names = ", ".join(f"{interface.name} ({' '.join(interface.addresses)})"
                      if interface.addresses else interface.name for interface in reachable)
    where = "every interface of its network namespace" if every else "the interfaces"
    if all(interface.loopback for interface in reachable):
        who = "only processes in this network namespace can reach it."
    else:
        who = ("anyone who can reach one of these addresses can run any op in this task, "
               "unauthenticated: keep it on a trusted network, firewalled to the cluster's "
               "hosts.")
    return f"port {port} listens on {where}: {names}; {who}"


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tf_embedding.server",
        description="Runs the ps or worker task given by TF_CONFIG of a ParameterServerStrategy "
                    "cluster that trains tf_embedding.TPUEmbedding (docs/parameter_server.md).")
    parser.add_argument("--intra-op-threads", type=int, default=0,
                        help="threads of the kernels' pool (default: this machine's cores "
                             "divided by the cluster's tasks on this host)")
    parser.add_argument("--inter-op-threads", type=int, default=0,
                        help="threads that run concurrent ops (default: max(4, workers + 1))")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    """Runs the server until SIGTERM or SIGINT; returns the exit status."""
    args = _parse_args(argv)
    try:
        task = parse_tf_config(environ.get("TF_CONFIG"))
    except ConfigError as error:
        print(f"tf_embedding.server: {error}", file=sys.stderr)
        return 2
    intra, inter = thread_counts(task, _available_cpus())
    intra, inter = args.intra_op_threads or intra, args.inter_op_threads or inter

    # Blocked before TensorFlow starts its threads, which inherit the mask: a Python handler
    # would run only when the kernel happened to deliver the signal to the main thread, which
    # otherwise sleeps on in C. The main thread takes the signals with sigwait once the server is
    # up; one that arrives during startup waits until then.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)

    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from tf_embedding import _loader  # pylint: disable=import-outside-toplevel

    # Before the server starts: ops are looked up in this process's registry when a worker's
    # function part arrives, and cannot be added once the server runs.
    _loader.load_ops()
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra,
                                      inter_op_parallelism_threads=inter)
    try:
        tf.distribute.Server(tf.train.ClusterSpec(task.cluster), job_name=task.task_type,
                             task_index=task.task_index, protocol=task.protocol, config=config,
                             start=True)
    except tf.errors.OpError as error:
        print(f"tf_embedding.server: cannot start {task.task_type} {task.task_index} at "
              f"{task.address}: {error.message}", file=sys.stderr)
        return 1
    print(f"{READY_MARKER} {task.task_type} {task.task_index} at {task.address} "
          f"(pid {os.getpid()}, intra-op threads {intra}, inter-op threads {inter}); "
          f"{reach(task.port)}", flush=True)
    received = signal.sigwait(stop_signals)
    print(f"tf_embedding.server: {task.task_type} {task.task_index} stopping on "
          f"{signal.Signals(received).name}", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # TF cannot stop a running gRPC server, and its destructors at interpreter exit may block on
    # the server's threads; leave without them.
    os._exit(0)  # pylint: disable=protected-access


if __name__ == "__main__":
    sys.exit(main())
