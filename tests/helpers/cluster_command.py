"""Running `tf-embedding cluster` in tests: a small job's config, the processes of a run (found by
the TF_CONFIG that names its chief), and a run to its end with an action at a given output line
(SIGINT, a task killed, a look at its processes), checked to leave none of its processes."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Callable, Sequence

from tf_embedding.cluster import local_cluster

# A few seconds of training: small tables, small batches.
CONFIG = {
    "batch_size": 256, "steps": 100, "checkpoint_every": 40, "eval_examples": 4096,
    "embedding_dim": 4, "bottom_mlp": "8", "top_mlp": "16", "progress": "lines",
    "learning_rate": 0.005,
    "tables": [
        {"name": "user", "vocabulary_size": 500, "combiner": "sum", "head_size": 50},
        {"name": "item", "vocabulary_size": 300, "combiner": "mean", "head_size": 50}],
    "features": [
        {"name": "user_id", "table": "user"}, {"name": "item_id", "table": "item"},
        {"name": "history", "table": "item", "max_ids": 4, "effect_scale": 0.5}],
    "num_dense": 2,
}
# A hang guard per cluster run, not a speed check (about 40 s on a busy 2-core machine).
TIMEOUT = 240


def cluster_processes(address: str) -> list[str]:
    """The command lines of this user's processes whose TF_CONFIG names `address` (the tasks
    and the chief of one cluster)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile, or another user's
            continue
        if b"TF_CONFIG=" in environ and address.encode() in environ:
            found.append(f"{pid}: {command}")
    return found


# The chief (or a multi-worker cluster's worker 0) announces its address; every task's TF_CONFIG
# names it.
CHIEF_LINE = re.compile(
    r"training as (?:the chief|worker 0 of \d+) \((?:worker 0, )?(127\.0\.0\.1:\d+)\)")


def tf_config_of(pid: int) -> dict:
    """The TF_CONFIG that process `pid` was started with."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = dict(entry.split(b"=", 1) for entry in f.read().split(b"\0") if b"=" in entry)
    return json.loads(environ[b"TF_CONFIG"])


def kill_task(chief_address: str, task_type: str, index: int) -> None:
    """SIGKILLs task `index` of `task_type` of the cluster whose chief is at `chief_address`."""
    for task in cluster_processes(chief_address):
        pid = int(task.split(":", 1)[0])
        if tf_config_of(pid)["task"] == {"type": task_type, "index": index}:
            os.kill(pid, signal.SIGKILL)
            return
    raise AssertionError(f"no {task_type} task {index} in {cluster_processes(chief_address)}")


def run_cluster(args: list[str], interrupt_after: str | None = None,
                kill_ps_after: str | None = None, kill: str = "ps",
                kill_index: int | None = None,
                inspect_after: tuple[str, Callable[[str], None]] | None = None,
                wrapper: Sequence[str] = ()) -> tuple[int, str]:
    """Runs `tf-embedding cluster` (after the command `wrapper`, if given) to its end, with
    SIGINT once it printed a line starting with `interrupt_after`, or task 1 of `kill` (task 0
    of "worker", or task `kill_index`) killed once it printed one starting with `kill_ps_after`,
    or `inspect_after`'s
    function called with the output so far once it printed a line starting with its text;
    returns its status and output, after checking that none of its processes is left."""
    # SIGINT at its default disposition, as in a terminal: a script that runs these tests in the
    # background hands them SIGINT ignored, and the command then rightly does not pass it on.
    process = subprocess.Popen(
        [*wrapper, sys.executable, "-m", "tf_embedding", "cluster", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=local_cluster.child_environment(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []

    def kill_hung_run():
        """Kills the command and its tasks, which hold its output open until they end."""
        process.kill()
        chief = CHIEF_LINE.search("".join(lines))
        for task in cluster_processes(chief.group(1)) if chief else []:
            os.kill(int(task.split(":", 1)[0]), signal.SIGKILL)

    guard = threading.Timer(TIMEOUT, kill_hung_run)
    guard.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if interrupt_after and line.startswith(interrupt_after):
                process.send_signal(signal.SIGINT)
                interrupt_after = None
            if kill_ps_after and line.startswith(kill_ps_after):
                kill_task(CHIEF_LINE.search("".join(lines)).group(1), kill,
                          int(kill == "ps") if kill_index is None else kill_index)
                kill_ps_after = None
            if inspect_after and line.startswith(inspect_after[0]):
                inspect_after[1]("".join(lines))
                inspect_after = None
        status = process.wait()
    except BaseException:  # a failed check mid-run: stop the run before reporting it
        kill_hung_run()
        process.wait()
        raise
    finally:
        guard.cancel()
    output = "".join(lines)
    chief = CHIEF_LINE.search(output)
    assert chief, output
    assert not cluster_processes(chief.group(1)), output
    return status, output
