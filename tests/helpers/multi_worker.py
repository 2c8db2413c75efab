"""Loopback MultiWorkerMirroredStrategy clusters for the multi-worker tests: N worker processes
on 127.0.0.1, each with its TF_CONFIG, all bounded in time and killed however the test ends."""

import json
import os
import subprocess
import sys
from typing import Sequence

from tf_embedding.cluster import local_cluster

RUN_TIMEOUT = 600.0
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker_configs(num_workers: int) -> list[str]:
    """Each worker's TF_CONFIG for a fresh cluster of `num_workers` on free ports."""
    cluster = {"worker": [f"127.0.0.1:{port}"
                          for port in local_cluster.free_ports(num_workers)]}
    return [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            for index in range(num_workers)]


def run_workers(num_workers: int, args: Sequence[str], timeout: float = RUN_TIMEOUT,
                environ: dict[str, str] | None = None) -> list[subprocess.CompletedProcess]:
    """Runs `python *args` as every worker of a fresh loopback cluster at once and returns each
    worker's completed process (output in `.stdout`, stderr merged), by task index. A worker
    still running after `timeout` seconds is killed (its returncode then says so)."""
    configs = worker_configs(num_workers)
    processes = [local_cluster.start_process(
                     args, {"TF_CONFIG": config, "PYTHONPATH": _python_path(), **(environ or {})},
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for config in configs]
    results = []
    try:
        for process in processes:
            try:
                stdout, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, _ = process.communicate()
            results.append(subprocess.CompletedProcess(process.args, process.returncode,
                                                       stdout))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


def _python_path() -> str:
    """The test's import path for the workers: this checkout's package and tests/."""
    root = os.path.dirname(TESTS_DIR)
    return os.pathsep.join([root, TESTS_DIR, os.environ.get("PYTHONPATH", "")])


def assert_succeeded(results: Sequence[subprocess.CompletedProcess]) -> None:
    failed = [f"worker {index} failed ({result.returncode}):\n{result.stdout[-4000:]}"
              for index, result in enumerate(results) if result.returncode != 0]
    assert not failed, "\n".join(failed)


def script(name: str) -> str:
    """The path of a worker script in tests/multi_worker/."""
    return os.path.join(TESTS_DIR, "multi_worker", name)


PYTHON = sys.executable
