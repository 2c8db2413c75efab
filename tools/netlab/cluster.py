"""A parameter-server cluster in the lab: its ps and worker tasks as `python -m tf_embedding.server`
in their namespaces, the chief's namespace ready for the caller's program, everything removed on
the way out (a normal end, an error, Ctrl-C, SIGTERM or the run's time limit).

```python
with bounded(600), lab_cluster(num_ps=2, num_workers=1) as (network, cluster):
    network.shape(rate_mbit=200)
    subprocess.run(chief_command(network, ["train.py"]), timeout=...,
                   env=local_cluster.child_environment(
                       {"TF_CONFIG": local_cluster.tf_config(cluster, "chief", 0)}))
```
"""

import contextlib
import os
import signal
import sys
from typing import Iterator, Sequence

from tf_embedding.cluster import local_cluster

from netlab import links

PORT = 2222  # every task has an address of its own, so all use the same port
ENTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enter.py")
# The lab's description, in every task's environment: for a chief that shapes or counts, and so
# that a lab's processes can be told apart from any other.
NETWORK_ENVIRON = "TFE_NETLAB"


def task_names(num_ps: int, num_workers: int) -> list[str]:
    return (["chief0"] + [f"ps{index}" for index in range(num_ps)]
            + [f"worker{index}" for index in range(num_workers)])


def in_namespace(network: links.Network, task: str, args: Sequence[str]) -> list[str]:
    """The argv after the interpreter that runs `python *args` in `task`'s namespace."""
    return [ENTER, network.links[task].namespace, *args]


def chief_command(network: links.Network, args: Sequence[str]) -> list[str]:
    """The full argv of `python *args` as the lab's chief."""
    return [sys.executable, *in_namespace(network, "chief0", args)]


def cluster_spec(network: links.Network) -> dict[str, list[str]]:
    spec: dict[str, list[str]] = {"chief": [], "ps": [], "worker": []}
    for task, link in network.links.items():
        spec[task.rstrip("0123456789")].append(f"{link.address}:{PORT}")
    return spec


@contextlib.contextmanager
def lab_cluster(num_ps: int, num_workers: int = 1
                ) -> Iterator[tuple[links.Network, dict[str, list[str]]]]:
    """Creates the lab's network, starts the ps and worker tasks and waits until each is ready;
    yields (the network, the cluster spec). On exit stops the tasks (SIGTERM, then SIGKILL) and
    removes every namespace with whatever still runs in it (the chief included)."""
    network = links.Network(task_names(num_ps, num_workers))
    cluster = cluster_spec(network)
    # The tasks share this machine's cores as on loopback; each sees only its own address, so
    # the server would otherwise give every task all the cores.
    intra = max(1, (os.cpu_count() or 1) // len(network.links))
    servers = {}
    try:
        network.create()
        for task_type in ("ps", "worker"):
            for index in range(len(cluster[task_type])):
                servers[task_type, index] = local_cluster.ServerProcess(
                    {"TF_CONFIG": local_cluster.tf_config(cluster, task_type, index),
                     NETWORK_ENVIRON: network.description()},
                    in_namespace(network, f"{task_type}{index}",
                                 [*local_cluster.SERVER, "--intra-op-threads", str(intra)]))
        for (task_type, index), server in servers.items():
            if not server.wait_ready():
                raise RuntimeError(f"{task_type} {index} exited before it was ready:\n"
                                   + server.remaining_output())
        yield network, cluster
    finally:
        with deferred_signals():
            try:
                for server in servers.values():
                    server.stop()
            finally:
                network.remove()


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Holds SIGINT, SIGTERM and SIGALRM until the block ends, so that a second Ctrl-C or the
    time limit cannot cut the removal of the lab short; they arrive after it."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGALRM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class RunTimeout(Exception):
    """The lab run went past its time limit."""


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Raises RunTimeout in the block after `seconds`, and turns SIGTERM into SystemExit, so
    that the `finally` clauses inside (the lab's removal) run on both; Ctrl-C raises
    KeyboardInterrupt as usual."""

    def on_alarm(signum, frame):
        raise RunTimeout(f"the lab run took more than {seconds:.0f} s")

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    previous = (signal.signal(signal.SIGALRM, on_alarm), signal.signal(signal.SIGTERM, on_term))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
