"""`tf-embedding cluster`: `tf-embedding train` as the chief of a cluster on this machine.

It starts N ps tasks and 1 worker (`python -m tf_embedding.server` on free ports of 127.0.0.1,
`tf_embedding.local_cluster`), runs `python -m tf_embedding train` with the train options it was
given and the chief's TF_CONFIG, and returns the chief's exit status once every task is stopped,
however the chief ended. It never imports TensorFlow itself.

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

from tf_embedding import local_cluster
from tf_embedding.job.options import ClusterOptions, checkpoint_dir

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


def _say(stream: TextIO, line: str) -> None:
    stream.write(f"tf-embedding cluster: {line}\n")
    stream.flush()


def run(options: ClusterOptions, train_argv: Sequence[str], stream: TextIO = sys.stdout) -> int:
    """Runs `tf-embedding train *train_argv` as the chief of a loopback cluster of
    `options.num_ps` ps tasks and one worker; returns the chief's exit status (128 + the signal
    number when a signal ended it).

    A worker that dies is restarted at its address while the chief runs (TensorFlow's
    coordinator waits for it and runs its steps again). A ps task that dies takes the tables'
    blocks it held with it, so the chief fails; then the whole cluster is started anew and the
    chief run again with --resume from the last checkpoint. At most `options.max_restarts`
    restarts of either kind happen in one run."""
    restarts = _Restarts(options.max_restarts, stream)
    argv = list(train_argv)
    while True:
        _say(stream, f"starting {options.num_ps} ps and {NUM_WORKERS} worker task(s) on "
                     "127.0.0.1")
        with local_cluster.loopback_tasks(options.num_ps, NUM_WORKERS) as (cluster, servers):
            status = _supervise(cluster, servers, argv, restarts)
            lost_ps = [key for key, server in servers.items()
                       if key[0] == "ps" and server.process.poll() is not None]
            _say(stream, f"the chief exited with status {status}; stopping the ps and worker "
                         "tasks")
        if status == 0 or not lost_ps or not restarts.take(f"ps task {lost_ps[0][1]}"):
            return status if status >= 0 else 128 - status
        if "--resume" not in argv and has_checkpoint(options.model_dir):
            argv.append("--resume")


def has_checkpoint(model_dir: str) -> bool:
    """Whether `model_dir` holds a checkpoint to resume from (TF's index file of the
    checkpoints; the launcher does not import TensorFlow)."""
    return os.path.exists(os.path.join(checkpoint_dir(model_dir), "checkpoint"))


def _supervise(cluster: dict[str, list[str]],
               servers: dict[local_cluster.TaskKey, local_cluster.ServerProcess],
               argv: Sequence[str], restarts: _Restarts) -> int:
    """Runs the chief to its end, restarting a worker that dies meanwhile; returns the chief's
    exit status (negative: the signal that ended it)."""
    chief = subprocess.Popen(
        [sys.executable, *TRAIN, *argv], start_new_session=True,
        env=local_cluster.child_environment(
            {"TF_CONFIG": local_cluster.tf_config(cluster, "chief", 0)}))
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
def _passed_on(process: subprocess.Popen) -> Iterator[None]:
    """SIGINT and SIGTERM sent to this process go to `process` while in the block, unless this
    process ignores them (as a job started in the background by a script ignores SIGINT; the
    chief then inherits that too)."""
    def pass_on(signum: int, frame: object) -> None:
        del frame
        process.send_signal(signum)

    previous = {signum: signal.signal(signum, pass_on)
                for signum in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# `tf-embedding cluster` options that are its own, not passed on to `train`.
_OWN_OPTIONS = ("--num-ps", "--max-restarts")


def train_argv(argv: Sequence[str]) -> list[str]:
    """The train options of `tf-embedding cluster` arguments (after the subcommand): all but
    --num-ps, --max-restarts and their values, which the cluster subcommand takes in full
    spelling only."""
    forwarded: list[str] = []
    skip = False
    for argument in argv:
        if skip:
            skip = False
        elif argument in _OWN_OPTIONS:
            skip = True
        elif not argument.startswith(tuple(f"{option}=" for option in _OWN_OPTIONS)):
            forwarded.append(argument)
    return forwarded
