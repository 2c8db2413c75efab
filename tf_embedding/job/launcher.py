"""`tf-embedding cluster`: `tf-embedding train` as the chief of a cluster on this machine.

It starts N ps tasks and 1 worker (`python -m tf_embedding.server` on free ports of 127.0.0.1,
`tf_embedding.local_cluster`), runs `python -m tf_embedding train` with the train options it was
given and the chief's TF_CONFIG, and returns the chief's exit status once every task is stopped,
however the chief ended. It never imports TensorFlow itself.

Every task and the chief run in sessions of their own, so a terminal's Ctrl-C reaches the chief
only through this process, once: SIGINT and SIGTERM are passed on to the chief (SIGINT makes it
save a checkpoint and exit, as `train` does), and the ps and worker tasks are stopped only after
the chief has exited, since its checkpoint is written on them.
"""

import contextlib
import signal
import subprocess
import sys
from typing import Iterator, Sequence, TextIO

from tf_embedding import local_cluster
from tf_embedding.job.options import ClusterOptions

NUM_WORKERS = 1
# The chief's argv after the interpreter, before the train options.
TRAIN = ("-m", "tf_embedding", "train")


def run(options: ClusterOptions, train_argv: Sequence[str], stream: TextIO = sys.stdout) -> int:
    """Runs `tf-embedding train *train_argv` as the chief of a loopback cluster of
    `options.num_ps` ps tasks and one worker; returns the chief's exit status (128 + the signal
    number when a signal ended it)."""
    stream.write(f"tf-embedding cluster: starting {options.num_ps} ps and {NUM_WORKERS} worker "
                 "task(s) on 127.0.0.1\n")
    stream.flush()
    with local_cluster.loopback_cluster(options.num_ps, NUM_WORKERS) as cluster:
        chief = subprocess.Popen(
            [sys.executable, *TRAIN, *train_argv], start_new_session=True,
            env=local_cluster.child_environment(
                {"TF_CONFIG": local_cluster.tf_config(cluster, "chief", 0)}))
        try:
            with _passed_on(chief):
                status = chief.wait()
        finally:
            # Only when this process failed or was stopped otherwise: no chief is left behind.
            if chief.poll() is None:
                chief.kill()
                chief.wait()
        stream.write("tf-embedding cluster: the chief exited with status "
                     f"{status}; stopping the ps and worker tasks\n")
        stream.flush()
    return status if status >= 0 else 128 - status


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


def train_argv(argv: Sequence[str]) -> list[str]:
    """The train options of `tf-embedding cluster` arguments (after the subcommand): all but
    --num-ps and its value, which the cluster subcommand takes in full spelling only."""
    forwarded: list[str] = []
    skip = False
    for argument in argv:
        if skip:
            skip = False
        elif argument == "--num-ps":
            skip = True
        elif not argument.startswith("--num-ps="):
            forwarded.append(argument)
    return forwarded
