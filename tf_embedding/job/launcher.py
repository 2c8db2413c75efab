"""`tf-embedding cluster`: `tf-embedding train` on a cluster on this machine.

With --strategy multi-worker it starts N workers, each `python -m tf_embedding train` with its
TF_CONFIG (a MultiWorkerMirroredStrategy cluster: `tf_embedding.job.multi_worker`), shows worker
0's output, and when a worker dies stops the others and starts them all again with --resume
(`_run_workers`). The rest of this docstring is the parameter-server cluster's (the default).

It starts N ps tasks and 1 worker (`python -m tf_embedding.server` on free ports of 127.0.0.1,
`tf_embedding.cluster.local_cluster`), runs `python -m tf_embedding train` with the train options
it was given and the chief's TF_CONFIG, and returns the chief's exit status once every task is
stopped, however the chief ended. It never imports TensorFlow itself.

TensorFlow's server runs whatever ops reach its port, unauthenticated, and listens on every
interface. So the tasks and the chief all run in one private network namespace
(`tf_embedding.cluster.private_network`) whose only interface is its own loopback: no other
host, and no process outside it, reaches their ports. Where this machine gives no such namespace,
the command refuses to run unless --allow-exposed-ports accepts the exposure.

Every task and the chief run in sessions of their own, so a terminal's Ctrl-C reaches the chief
only through this process, once: SIGINT and SIGTERM are passed on to the chief (SIGINT makes it
save a checkpoint and exit, as `train` does), and the ps and worker tasks are stopped only after
the chief has exited, since its checkpoint is written on them.

Dead tasks are restarted, up to --max-restarts times in one run: a worker in place while the
chief runs; a ps task by starting the cluster anew and running the chief again with --resume.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Iterator, Sequence, TextIO

from tf_embedding.cluster import local_cluster
from tf_embedding.job.options import ClusterOptions, checkpoint_dir
from tf_embedding.cluster.private_network import PrivateNetwork, Unavailable

NUM_WORKERS = 1
# The chief's argv after the interpreter, before the train options.
TRAIN = ("-m", "tf_embedding", "train")
# Seconds between two looks at the chief and the tasks.
POLL_SECONDS = 0.5


class _Restarts:
    """How many tasks (or clusters) were restarted, against --max-restarts: a task that dies
    again and again ends the run instead of looping."""

    def __init__(self, limit: int, stream: TextIO):
        self.limit = limit
        self.used = 0
        self._stream = stream

    def take(self, what: str) -> bool:
        """True, counting one restart, if the limit allows `what`; else says so and False."""
        if self.used >= self.limit:
            _say(self._stream, f"{what} died, and --max-restarts {self.limit} restarts were "
                               "used; giving up (raise --max-restarts, or find why it dies)")
            return False
        self.used += 1
        _say(self._stream, f"{what} died; restarting it (restart {self.used} of {self.limit})")
        return True


class ExposedPortsRefused(RuntimeError):
    """No private network namespace for the tasks, and --allow-exposed-ports not given."""


def _say(stream: TextIO, line: str) -> None:
    stream.write(f"tf-embedding cluster: {line}\n")
    stream.flush()


# What a task's port allows where the tasks cannot be closed to the network.
_EXPOSED = ("each task's port listens on every interface of this machine, where anyone who can "
            "reach it can run any op in the task (reading or writing any file it can)")


def _private_network(allow_exposed_ports: bool, stream: TextIO) -> PrivateNetwork | None:
    """A private network namespace for the cluster's processes; None (after saying so) where
    this machine gives none and `allow_exposed_ports`.

    Raises:
      ExposedPortsRefused: no namespace can be made here and not `allow_exposed_ports`.
    """
    try:
        network = PrivateNetwork.create()
    except Unavailable as error:
        if not allow_exposed_ports:
            raise ExposedPortsRefused(
                f"cannot give the tasks a private network namespace ({error}); without one, "
                f"{_EXPOSED}. Run with --allow-exposed-ports to accept that, on a trusted "
                "network only.") from None
        _say(stream, f"no private network namespace ({error}); running anyway "
                     f"(--allow-exposed-ports): {_EXPOSED}")
        return None
    _say(stream, "the chief and the tasks run in a private network namespace whose only "
                 "interface is its loopback: nothing outside it reaches their ports")
    return network


def run(options: ClusterOptions, train_argv: Sequence[str], stream: TextIO = sys.stdout) -> int:
    """Runs `tf-embedding train *train_argv` as the chief of a loopback cluster of
    `options.num_ps` ps tasks and one worker; returns the chief's exit status (128 + the signal
    number when a signal ended it).

    A worker that dies is restarted at its address while the chief runs (TensorFlow's
    coordinator waits for it and runs its steps again). A ps task that dies takes the tables'
    blocks it held with it, so the chief fails; then the whole cluster is started anew and the
    chief run again with --resume from the last checkpoint. At most `options.max_restarts`
    restarts of either kind happen in one run.

    Raises:
      ExposedPortsRefused: no private network namespace can be made for the cluster's processes
        and not `options.allow_exposed_ports` (nothing is started).
    """
    network = _private_network(options.allow_exposed_ports, stream)
    with network or contextlib.nullcontext():
        if options.strategy == "multi-worker":
            return _run_workers(options, train_argv, network, stream)
        return _run_clusters(options, train_argv, network, stream)


def _run_workers(options: ClusterOptions, train_argv: Sequence[str],
                 network: PrivateNetwork | None, stream: TextIO) -> int:
    """`run` for --strategy multi-worker: the workers, and all of them anew after one died."""
    restarts = _Restarts(options.max_restarts, stream)
    argv = list(train_argv)
    while True:
        _say(stream, f"starting {options.num_workers} workers on 127.0.0.1 "
                     "(MultiWorkerMirroredStrategy)")
        cluster = {"worker": [f"127.0.0.1:{port}"
                              for port in local_cluster.free_ports(options.num_workers)]}
        workers = [local_cluster.start_process(
                       [*TRAIN, *argv], {"TF_CONFIG": local_cluster.tf_config(cluster, "worker",
                                                                              index)},
                       network, stdout=None if index == 0 else subprocess.DEVNULL)
                   for index in range(options.num_workers)]
        statuses, first_failed = _supervise_workers(workers, options.collective_timeout)
        _say(stream, f"the workers exited with statuses {statuses}")
        if first_failed is None or statuses[0] in (-signal.SIGINT, -signal.SIGTERM, 130) or (
                not restarts.take(f"worker {first_failed}")):
            return _exit_status(0 if first_failed is None else statuses[first_failed])
        _resume_from_checkpoint(argv, options.model_dir)


# Seconds a worker has to exit on its own once another died (its next exchange fails at once
# when the dead worker's connection drops, else after the collective timeout).
_WORKER_GRACE = 30.0


def _supervise_workers(workers: list[subprocess.Popen],
                       timeout: float) -> tuple[list[int], int | None]:
    """Waits for every worker to exit, passing SIGINT and SIGTERM on to all of them; once one
    has failed, the others get the collective timeout (and a grace) to fail too before they
    are killed. Returns their exit statuses (negative: the signal that ended it) and the
    index of the first to fail (None: all succeeded)."""
    first_failed = None
    try:
        with _passed_on(*workers):
            deadline = None
            while any(worker.poll() is None for worker in workers):
                if first_failed is None:
                    first_failed = _cause(workers)
                    if first_failed is not None:
                        deadline = time.monotonic() + (timeout or 0) + _WORKER_GRACE
                if deadline is not None and time.monotonic() > deadline:
                    break
                time.sleep(POLL_SECONDS)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
    if first_failed is None:
        first_failed = _cause(workers)
    return [worker.returncode for worker in workers], first_failed


def _cause(workers: list[subprocess.Popen]) -> int | None:
    """The index of the worker whose end failed the others, among those that failed so far: one
    a signal ended (the others exit with status 1 once they lose it, possibly before this
    process looks) before one that exited, then the lowest index; None if none failed."""
    failed = [index for index, worker in enumerate(workers) if worker.poll() not in (None, 0)]
    return min(failed, key=lambda index: (workers[index].returncode >= 0, index), default=None)


def _run_clusters(options: ClusterOptions, train_argv: Sequence[str],
                  network: PrivateNetwork | None, stream: TextIO) -> int:
    """`run` once the network is chosen: a cluster, and new ones after a lost ps task."""
    restarts = _Restarts(options.max_restarts, stream)
    argv = list(train_argv)
    while True:
        _say(stream, f"starting {options.num_ps} ps and {NUM_WORKERS} worker task(s) on "
                     "127.0.0.1")
        with local_cluster.loopback_tasks(options.num_ps, NUM_WORKERS,
                                          network=network) as (cluster, servers):
            status = _supervise(cluster, servers, argv, restarts, network)
            lost_ps = [key for key, server in servers.items()
                       if key[0] == "ps" and server.process.poll() is not None]
            _say(stream, f"the chief exited with status {status}; stopping the ps and worker "
                         "tasks")
        if status == 0 or not lost_ps or not restarts.take(f"ps task {lost_ps[0][1]}"):
            return _exit_status(status)
        _resume_from_checkpoint(argv, options.model_dir)


def _exit_status(status: int) -> int:
    """A process's exit status as a shell reports it: 128 + the signal that ended it."""
    return status if status >= 0 else 128 - status


def _resume_from_checkpoint(argv: list[str], model_dir: str) -> None:
    """Adds --resume to the train arguments `argv` once `model_dir` holds a checkpoint, for a
    run started anew after a lost task."""
    if "--resume" not in argv and has_checkpoint(model_dir):
        argv.append("--resume")


def has_checkpoint(model_dir: str) -> bool:
    """Whether `model_dir` holds a checkpoint to resume from (TF's index file of the
    checkpoints; the launcher does not import TensorFlow)."""
    return os.path.exists(os.path.join(checkpoint_dir(model_dir), "checkpoint"))


def _supervise(cluster: dict[str, list[str]],
               servers: dict[local_cluster.TaskKey, local_cluster.ServerProcess],
               argv: Sequence[str], restarts: _Restarts, network: PrivateNetwork | None) -> int:
    """Runs the chief (in `network` if given) to its end, restarting a worker that dies
    meanwhile; returns the chief's exit status (negative: the signal that ended it)."""
    chief = local_cluster.start_process(
        [*TRAIN, *argv], {"TF_CONFIG": local_cluster.tf_config(cluster, "chief", 0)}, network)
    try:
        with _passed_on(chief):
            while chief.poll() is None:
                for key, server in list(servers.items()):
                    if key[0] != "worker" or server.process.poll() is None:
                        continue
                    if not restarts.take(f"worker task {key[1]}"):
                        chief.kill()
                        return chief.wait()
                    local_cluster.restart_task(cluster, servers, key)
                time.sleep(POLL_SECONDS)
            return chief.returncode
    finally:
        # Only when this process failed or was stopped otherwise: no chief is left behind.
        if chief.poll() is None:
            chief.kill()
            chief.wait()


@contextlib.contextmanager
def _passed_on(*processes: subprocess.Popen) -> Iterator[None]:
    """SIGINT and SIGTERM sent to this process go to `processes` while in the block, unless
    this process ignores them (as a job started in the background by a script ignores SIGINT;
    the chief then inherits that too)."""
    def pass_on(signum: int, frame: object) -> None:
        del frame
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    previous = {signum: signal.signal(signum, pass_on)
                for signum in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# `tf-embedding cluster` options that are its own, not passed on to `train`: with a value, and
# switches.
_OWN_OPTIONS = ("--strategy", "--num-ps", "--num-workers", "--max-restarts")
_OWN_SWITCHES = ("--allow-exposed-ports", "--no-allow-exposed-ports")


def train_argv(argv: Sequence[str]) -> list[str]:
    """The train options of `tf-embedding cluster` arguments (after the subcommand): all but
    --strategy, --num-ps, --num-workers, --max-restarts and their values and
    --[no-]allow-exposed-ports, which the cluster subcommand takes in full spelling only."""
    forwarded: list[str] = []
    skip = False
    for argument in argv:
        if skip:
            skip = False
        elif argument in _OWN_OPTIONS:
            skip = True
        elif argument not in _OWN_SWITCHES and not argument.startswith(
                tuple(f"{option}=" for option in _OWN_OPTIONS)):
            forwarded.append(argument)
    return forwarded
