"""Loopback clusters: the ps and worker tasks of a `ParameterServerStrategy` cluster as
`python -m tf_embedding.server` subprocesses on 127.0.0.1, for trying the parameter-server path on
one machine, tests and benchmarks.

Each task gets a free port, is awaited until it prints its readiness line, and is stopped by pid
(SIGTERM, then SIGKILL) however the caller ends. The chief, which runs the training script, is
not started here: connecting to a cluster rewires a process's eager context, so it is usually a
process of its own with `TF_CONFIG=tf_config(cluster, "chief", 0)`.

TensorFlow's server listens on every interface of the machine, whatever host TF_CONFIG names,
and runs any op that reaches it (docs/parameter_server.md, "Who can reach a task"). Given a
`PrivateNetwork`, the tasks (and a chief started with `start_process`) run in it instead, where
nothing outside reaches their ports.

```python
with local_cluster.loopback_cluster(num_ps=2, num_workers=1) as cluster:
    subprocess.run([sys.executable, "train.py"],
                   env=local_cluster.child_environment(
                       {"TF_CONFIG": local_cluster.tf_config(cluster, "chief", 0)}))
```
"""

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

from tf_embedding.cluster import server
from tf_embedding.cluster.private_network import PrivateNetwork

READY_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
# A task's argv after the interpreter.
SERVER = ("-m", "tf_embedding.server")


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `environ` added, output unbuffered (readiness lines
    must arrive as printed) and TF's C++ info logs off unless TF_CPP_MIN_LOG_LEVEL is set."""
    return {"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ, "PYTHONUNBUFFERED": "1",
            **(environ or {})}


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now. A port can be taken between this and the server's bind (the
    caller retries on "Could not start gRPC server")."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cluster_spec(num_ps: int, num_workers: int) -> dict[str, list[str]]:
    """A chief, `num_ps` PS and `num_workers` worker tasks on free ports of 127.0.0.1."""
    ports = iter(free_ports(1 + num_ps + num_workers))
    return {"chief": [f"127.0.0.1:{next(ports)}"],
            "ps": [f"127.0.0.1:{next(ports)}" for _ in range(num_ps)],
            "worker": [f"127.0.0.1:{next(ports)}" for _ in range(num_workers)]}


def tf_config(cluster: Mapping[str, Sequence[str]], task_type: str, index: int) -> str:
    """The TF_CONFIG of one task of `cluster`."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def start_process(args: Sequence[str], environ: Mapping[str, str],
                  network: PrivateNetwork | None = None, **popen_args: Any) -> subprocess.Popen:
    """Starts `python *args` as a task (or the chief) of a local cluster: with `environ` (e.g.
    its TF_CONFIG) added to this process's, in `network` if given, in a session of its own.

    The session: a terminal's Ctrl-C must not stop a task before the chief, which still saves
    its checkpoint on the task; tasks are stopped by pid instead, the chief is passed the
    signal."""
    argv = [sys.executable, *args]
    if network is not None:
        argv, popen_args = network.command(argv), {**popen_args, "pass_fds": network.fds}
    return subprocess.Popen(argv, env=child_environment(environ), start_new_session=True,
                            **popen_args)


class ServerProcess:
    """One `python -m tf_embedding.server` subprocess; its output lines arrive in `lines`."""

    def __init__(self, environ: Mapping[str, str], args: Sequence[str] = SERVER,
                 network: PrivateNetwork | None = None):
        """Starts `python *args` with `environ` (e.g. its TF_CONFIG) added to this process's,
        in `network` if given."""
        self.network = network
        self.process = start_process(args, environ, network, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: "queue.Queue[str | None]" = queue.Queue()
        self.output: list[str] = []
        self._ended = False  # the reader's end marker was taken from `lines`
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> bool:
        """True once the readiness line is printed; False if the process ends first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no readiness line within {timeout} s:\n"
                                   + "".join(self.output)) from None
            if line is None:
                self._ended = True
                return False
            self.output.append(line)
            if line.startswith(server.READY_MARKER):
                return True

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def remaining_output(self) -> str:
        """Everything printed so far (call after the process ended)."""
        self.process.wait()
        while not self._ended:
            line = self.lines.get()
            if line is None:
                self._ended = True
            else:
                self.output.append(line)
        return "".join(self.output)


@contextlib.contextmanager
def loopback_cluster(
        num_ps: int, num_workers: int = 1, attempts: int = 3,
        command: Callable[[str, int], Sequence[str]] = lambda task_type, index: SERVER
) -> Iterator[dict[str, list[str]]]:
    """Starts the ps and worker tasks of a fresh cluster and yields its spec (the chief's address
    included, for the chief script's TF_CONFIG); stops every task on exit. `command(task_type,
    index)` is a task's argv after the interpreter."""
    with loopback_tasks(num_ps, num_workers, attempts, command) as (cluster, _):
        yield cluster


# A task of a loopback cluster: (task type, index).
TaskKey = tuple[str, int]


@contextlib.contextmanager
def loopback_tasks(
        num_ps: int, num_workers: int = 1, attempts: int = 3,
        command: Callable[[str, int], Sequence[str]] = lambda task_type, index: SERVER,
        network: PrivateNetwork | None = None
) -> Iterator[tuple[dict[str, list[str]], dict[TaskKey, ServerProcess]]]:
    """`loopback_cluster`, also yielding each task's process, for a caller that watches them:
    it may replace a dead one with `restart_task`, and the tasks in the mapping at exit are the
    ones stopped. The tasks run in `network` if given."""
    for attempt in range(attempts):
        cluster = cluster_spec(num_ps, num_workers)
        servers = {(task_type, index): ServerProcess(
                       {"TF_CONFIG": tf_config(cluster, task_type, index)},
                       command(task_type, index), network)
                   for task_type in ("ps", "worker") for index in range(len(cluster[task_type]))}
        try:
            ready = {key: process.wait_ready() for key, process in servers.items()}
            if all(ready.values()):
                yield cluster, servers
                return
            outputs = [servers[key].remaining_output() for key, ok in ready.items() if not ok]
            # A port taken between picking and binding: pick again.
            if attempt + 1 == attempts or not all("Could not start gRPC server" in output
                                                  for output in outputs):
                raise RuntimeError("a cluster task exited early:\n" + "\n".join(outputs))
        finally:
            for process in servers.values():
                process.stop()


def restart_task(cluster: Mapping[str, Sequence[str]], servers: dict[TaskKey, ServerProcess],
                 key: TaskKey, command: Sequence[str] = SERVER) -> None:
    """Starts task `key` of `cluster` anew at its address (its process having ended), as a task
    restarted after a crash would be, in the same network, and waits until it is ready; the new
    process replaces the old in `servers`. Raises RuntimeError if it exits before it is ready."""
    servers[key].stop()
    servers[key] = ServerProcess({"TF_CONFIG": tf_config(cluster, *key)}, command,
                                 servers[key].network)
    if not servers[key].wait_ready():
        raise RuntimeError(f"{key[0]} task {key[1]} exited while restarting:\n"
                           + servers[key].remaining_output())
