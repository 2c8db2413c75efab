"""`tf_embedding.cluster.private_network` (a namespace whose only interface, loopback, is up;
joined by children; gone with them), made by root and by an unprivileged user, and the server's
ready line (`python -m tf_embedding.server`), which names the interfaces its port listens on and
who can reach it, against this machine's interfaces as /sys lists them."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tf_embedding.cluster.private_network import PrivateNetwork, Unavailable

from helpers.cluster import SERVER, ServerProcess, free_ports, processes_in, tf_config
from helpers.paths import REPO_ROOT

pytestmark = pytest.mark.cluster

# A child's view of its network: its namespace, its interfaces (/proc/self/net is the
# process's own namespace; /sys/class/net would be its mount's), and a connection over loopback
# (refused with "Network is unreachable" while lo is down).
CHILD = """
import os, socket
names = [line.split(":")[0].strip() for line in open("/proc/self/net/dev").readlines()[2:]]
with socket.socket() as server, socket.socket() as client:
    server.bind(("127.0.0.1", 0))
    server.listen()
    client.connect(server.getsockname())
print(os.readlink("/proc/self/ns/net"), ",".join(names), "connected")
"""
# /sys/class/net/*/flags (<linux/if.h>).
IFF_UP, IFF_LOOPBACK = 0x1, 0x8


def private_network() -> PrivateNetwork:
    try:
        return PrivateNetwork.create()
    except Unavailable as error:
        pytest.skip(f"this machine gives no private network namespace: {error}")


def test_children_join_a_namespace_with_only_loopback_up_that_ends_with_them():
    with private_network() as network:
        children = [subprocess.run(network.command([sys.executable, "-c", CHILD]),
                                   pass_fds=network.fds, capture_output=True, text=True,
                                   timeout=60, check=True).stdout.split() for _ in range(2)]
        namespace = children[0][0]
        assert children[0] == children[1] == [namespace, "lo", "connected"]
        assert namespace != os.readlink("/proc/self/ns/net")
        assert processes_in(namespace) == [str(os.getpid())]  # held by this process only
    assert processes_in(namespace) == []


def system_python() -> str:
    """A Python 3.10+ any user can run: the private network needs only the standard library,
    and the test's own interpreter may sit where another user cannot read it."""
    for python in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(python, os.X_OK) and subprocess.run(
                [python, "-c", "import sys; assert sys.version_info >= (3, 10)"]).returncode == 0:
            return python
    pytest.skip("no system Python 3.10+ to run as an unprivileged user")


def test_an_unprivileged_user_gets_one_through_a_user_namespace():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a process as another user")
    script = f"""
import subprocess, sys
from tf_embedding.cluster.private_network import PrivateNetwork
with PrivateNetwork.create() as network:
    print(network.command(["child"])[:-2])
    print(subprocess.run(network.command([sys.executable, "-c", {CHILD!r}]),
                         pass_fds=network.fds, capture_output=True, text=True).stdout.strip())
"""
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", system_python(), "-c",
         script], capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": REPO_ROOT})
    if "No space left on device" in result.stderr or "Operation not permitted" in result.stderr:
        pytest.skip(f"user namespaces are off here: {result.stderr.strip().splitlines()[-1]}")
    assert result.returncode == 0, result.stderr
    command, child = result.stdout.splitlines()
    # It entered a user namespace of its own to enter the network namespace that one owns.
    assert "--user=/proc/self/fd/" in command and "--preserve-credentials" in command
    namespace, names, connected = child.split()
    assert (names, connected) == ("lo", "connected")
    assert namespace != os.readlink("/proc/self/ns/net")


def up_interfaces() -> list[tuple[str, bool]]:
    """(name, loopback) of this machine's interfaces that are up, as /sys lists them (in this
    process's namespace: the machine's)."""
    found = []
    for name in sorted(os.listdir("/sys/class/net")):
        with open(f"/sys/class/net/{name}/flags") as f:
            flags = int(f.read(), 16)
        if flags & IFF_UP:
            found.append((name, bool(flags & IFF_LOOPBACK)))
    return found


def ready_line(network: PrivateNetwork | None) -> tuple[int, str]:
    port = free_ports(1)[0]
    process = ServerProcess({"TF_CONFIG": tf_config({"ps": [f"127.0.0.1:{port}"]}, "ps", 0)},
                            [*SERVER, "--intra-op-threads", "1"], network)
    try:
        assert process.wait_ready(), process.remaining_output()
    finally:
        assert process.stop() == 0, process.remaining_output()
    return port, process.output[-1]


def test_the_ready_line_names_every_interface_and_who_can_reach_the_port():
    port, line = ready_line(None)
    interfaces = up_interfaces()
    listed = line.split(f"port {port} listens on every interface of its network namespace: ")[1]
    names = re.sub(r" \([^)]*\)", "", listed.split("; ")[0]).split(", ")
    assert sorted(names) == [name for name, _ in interfaces], line
    if all(loopback for _, loopback in interfaces):
        assert line.endswith("; only processes in this network namespace can reach it.\n")
    else:
        assert line.endswith(
            "; anyone who can reach one of these addresses can run any op in this task, "
            "unauthenticated: keep it on a trusted network, firewalled to the cluster's "
            "hosts.\n"), line


def test_in_a_private_network_the_ready_line_says_only_its_processes_reach_the_port():
    with private_network() as network:
        port, line = ready_line(network)
    assert re.search(rf"; port {port} listens on every interface of its network namespace: "
                     r"lo \(127\.0\.0\.1( ::1)?\); only processes in this network namespace "
                     r"can reach it\.\n$", line), line
