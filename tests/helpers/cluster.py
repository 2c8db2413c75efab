"""Loopback clusters for the parameter-server tests (`tf_embedding.cluster.local_cluster`), plus
what only tests need: a PS task without the op library, and the chief run as a script.

The chief never runs in the pytest process: connecting to a cluster rewires the process-wide eager
context, which the other tests share. Tests run the chief as a script (`run_chief`).
"""

import os
import subprocess
import sys
from typing import Mapping, Sequence

from tf_embedding.cluster import server
from tf_embedding.cluster.local_cluster import (SERVER, ServerProcess, child_environment,
                                                free_ports, loopback_cluster, tf_config)

__all__ = ["PLAIN_SERVER", "SERVER", "ServerProcess", "free_ports", "loopback_cluster",
           "processes_in", "run_chief", "tf_config"]

# A stock TF server that never loads tf_embedding's op library (what a task started without
# `python -m tf_embedding.server` is), with the same readiness line.
PLAIN_SERVER = ("-c", f"""
import json, os, threading
import tensorflow as tf
config = json.loads(os.environ["TF_CONFIG"])
tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=config["task"]["type"],
                     task_index=config["task"]["index"], start=True)
print({server.READY_MARKER!r}, flush=True)
threading.Event().wait()
""")


def run_chief(script: Sequence[str], cluster: Mapping[str, Sequence[str]],
              timeout: float = 600.0,
              environ: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs `script` (argv after the interpreter) as the cluster's chief, with `environ` added
    to this process's; a hang guard, not a speed check, bounds it."""
    return subprocess.run([sys.executable, *script], capture_output=True, text=True,
                          timeout=timeout,
                          env=child_environment(
                              {**(environ or {}), "TF_CONFIG": tf_config(cluster, "chief", 0)}))


def processes_in(namespace: str) -> list[str]:
    """The pids of the processes in network namespace `namespace` ("net:[inode]"), or holding
    it open: while there are none, it no longer exists."""
    def link(path: str) -> str:
        try:
            return os.readlink(path)
        except OSError:  # ended or closed meanwhile
            return ""

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        if namespace in [link(f"/proc/{pid}/ns/net")] + [link(f"/proc/{pid}/fd/{fd}")
                                                            for fd in fds]:
            found.append(pid)
    return found
