"""The network lab (tools/netlab): its links carry shaped traffic between namespaces, and every
run leaves no namespace, link or process behind, whether it ends normally, a ps task is killed,
the lab gets SIGINT or the run's time limit passes.

Root only: without root, network namespaces or tbf the tests are skipped with the reason.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))

from netlab import cluster, links  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow]

BENCHMARK = [sys.executable, os.path.join(REPO_ROOT, "tools", "ps_benchmark.py"), "--lab",
             "--num-ps", "2", "--tables", "1", "--vocabulary", "1000", "--dim", "16",
             "--batch", "256", "--ids-per-sample", "4", "--warmup", "1", "--traffic", "rows"]
# A hang guard: a lab run of the tiny workload takes well under a minute on an idle machine.
RUN_TIMEOUT = 600


@pytest.fixture(scope="module", autouse=True)
def lab_capability():
    missing = links.missing_capability()
    if missing:
        pytest.skip(missing)


def environ_of(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:  # ended meanwhile
        return {}
    return dict(entry.decode(errors="replace").split("=", 1) for entry in entries if b"=" in entry)


def lab_processes(lab_pid: int) -> dict[int, dict[str, str]]:
    """pid -> environment of every process of the lab run by `lab_pid` (its tasks carry the
    lab's description, which names the lab after that pid)."""
    name = f'"name": "{links.PREFIX}{lab_pid}"'
    processes = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            environ = environ_of(int(entry))
            if name in environ.get(cluster.NETWORK_ENVIRON, ""):
                processes[int(entry)] = environ
    return processes


def lab_namespaces(lab_pid: int) -> list[str]:
    return [name for name in links.existing_namespaces()
            if name.startswith(f"{links.PREFIX}{lab_pid}-")]


def assert_nothing_left(lab_pid: int) -> None:
    assert lab_namespaces(lab_pid) == []
    assert lab_processes(lab_pid) == {}


def task_of(environ: dict[str, str]) -> tuple[str, int]:
    task = json.loads(environ["TF_CONFIG"])["task"]
    return task["type"], task["index"]


def start_endless_run(*extra: str) -> subprocess.Popen:
    """A lab run that would go on for hours, once its worker is sending steps' traffic."""
    # SIGINT at its default disposition, as in a terminal: a script that runs these tests in
    # the background hands them SIGINT ignored, which the lab run would inherit.
    lab = subprocess.Popen([*BENCHMARK, "--steps", "1000000", *extra], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline and lab.poll() is None:
        processes = lab_processes(lab.pid)
        if any(task_of(environ)[0] == "chief" for environ in processes.values()):
            network = links.Network.from_description(
                next(iter(processes.values()))[cluster.NETWORK_ENVIRON])
            if network.counters()["worker0"][0] > 100_000:
                return lab
        time.sleep(1)
    lab.kill()
    pytest.fail("the lab run did not get to its steps:\n" + lab.communicate()[1][-3000:])


def test_links_carry_shaped_traffic_between_namespaces():
    """2 MB from one task's namespace to another's over 20 Mbit/s links take at least 0.8 s, and
    both links count them."""
    network = links.Network(["sender", "receiver"], name=f"{links.PREFIX}{os.getpid()}")
    receiver = f"{network.links['receiver'].address}"
    try:
        network.create()
        network.shape(20.0)
        server = subprocess.Popen(
            [sys.executable, cluster.ENTER, network.links["receiver"].namespace, "-c",
             "import socket\nserver = socket.create_server(('', 5000))\nprint('up', flush=True)\n"
             "connection = server.accept()[0]\nsize = 0\n"
             "while chunk := connection.recv(65536): size += len(chunk)\nprint(size)"],
            stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline() == "up\n"
        start = time.perf_counter()
        subprocess.run([sys.executable, cluster.ENTER, network.links["sender"].namespace, "-c",
                        f"import socket\nsocket.create_connection(('{receiver}', 5000))"
                        f".sendall(bytes(2_000_000))"], check=True, timeout=60)
        assert server.communicate(timeout=60)[0] == "2000000\n"
        seconds = time.perf_counter() - start
        counts = network.counters()
    finally:
        network.remove()
    assert seconds >= 0.8 * 2e6 * 8 / 20e6
    assert counts["sender"][0] >= 2e6 and counts["receiver"][1] >= 2e6
    assert [name for name in links.existing_namespaces() if name.startswith(network.name)] == []


def test_a_normal_run_prints_the_model_and_leaves_nothing():
    lab = subprocess.Popen([*BENCHMARK, "--steps", "2", "--rates", "50"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = lab.communicate(timeout=RUN_TIMEOUT)
    assert lab.returncode == 0, stdout + stderr
    assert_nothing_left(lab.pid)
    rows = [line.split("|")[1:-1] for line in stdout.splitlines() if line.startswith("| 2 |")]
    assert [(row[1].strip(), row[7].strip()) for row in rows] == [("rows", "-"),
                                                                  ("rows", "50.0")]
    assert float(rows[1][9]) > 0 and float(rows[1][10]) > 0  # the model's step time, the ratio
    assert "worker0" in stdout and "ps1" in stdout  # each task's bytes


def test_a_killed_ps_task_ends_the_run_and_leaves_nothing():
    lab = start_endless_run()
    (ps_pid,) = [pid for pid, environ in lab_processes(lab.pid).items()
                 if task_of(environ) == ("ps", 1)]
    os.kill(ps_pid, signal.SIGKILL)
    _, stderr = lab.communicate(timeout=RUN_TIMEOUT)
    assert lab.returncode != 0, stderr
    assert_nothing_left(lab.pid)


def test_sigint_ends_the_run_and_leaves_nothing():
    lab = start_endless_run()
    lab.send_signal(signal.SIGINT)
    _, stderr = lab.communicate(timeout=RUN_TIMEOUT)
    assert lab.returncode != 0
    assert "KeyboardInterrupt" in stderr
    assert_nothing_left(lab.pid)


def test_the_time_limit_ends_the_run_and_leaves_nothing():
    lab = subprocess.Popen([*BENCHMARK, "--steps", "1000000", "--timeout", "60"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = lab.communicate(timeout=RUN_TIMEOUT)
    assert lab.returncode != 0
    assert "the lab run took more than 60 s" in stderr
    assert_nothing_left(lab.pid)
