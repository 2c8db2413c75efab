"""`tf-embedding cluster` closed to the network: while it trains, its chief and tasks share a
network namespace of their own whose only interface is loopback, none of their sockets is in
this machine's namespace (the test's), their ports refuse connections at every address of it,
and the namespace is gone with them. Where no namespace can be made (a process the kernel
refuses one, for real), the command refuses in one line unless --allow-exposed-ports, with
which it runs with its ports on every interface (seen by the same checks)."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from tf_embedding.cluster import local_cluster

from helpers.cluster import processes_in
from helpers.cluster_command import CHIEF_LINE, CONFIG, cluster_processes, run_cluster, tf_config_of

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# A few seconds of training, inspected at its first progress line.
SHORT = {**CONFIG, "steps": 60, "checkpoint_every": 60, "eval_examples": 1024}
FIRST_STEP = "step "
# A process that may make no namespace, refused by the kernel itself: in a user namespace of its
# own whose limit of nested user namespaces is 0 (`unshare --map-root-user` gets "No space left
# on device"), with every capability dropped (`unshare --net` gets "Operation not permitted").
NO_NAMESPACES = ("unshare", "--user", "--map-root-user", "--", "sh", "-c",
                 "echo 0 > /proc/sys/user/max_user_namespaces && "
                 'exec setpriv --bounding-set=-all --inh-caps=-all "$@"', "sh")
# /proc/net/tcp's state of a listening socket.
LISTEN = "0A"


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def tcp_sockets(proc: str) -> list[dict[str, str]]:
    """The TCP sockets of the network namespace of /proc/`proc` (a pid, or "self")."""
    sockets = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{proc}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                address, port = fields[1].split(":")
                sockets.append({"address": address, "port": int(port, 16), "state": fields[3],
                                "inode": fields[9]})
    return sockets


def main_namespace_addresses() -> list[str]:
    """The addresses of this machine's network namespace (the test's) that a connection can
    name (no link-local ones, which need a scope), as `ip` lists them."""
    if not shutil.which("ip"):
        pytest.skip("ip (iproute2) is needed to list this machine's addresses")
    links = json.loads(subprocess.run(["ip", "-j", "addr", "show"], capture_output=True,
                                      text=True, check=True).stdout)
    return [info["local"] for link in links for info in link.get("addr_info", ())
            if info.get("scope") in ("host", "global")]


def reachable(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as sock:
        sock.settimeout(5)
        try:
            sock.connect((address, port))
        except OSError:
            return False
    return True


def run_inspected(tmp_path, wrapper=(), flags=()) -> tuple[str, dict, str]:
    """Runs a short `tf-embedding cluster --num-ps 1` and, at its first progress line, takes
    stock of its processes; returns (output, what was seen, the test's network namespace)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SHORT))
    seen = {}

    def inspect(output: str) -> None:
        chief = CHIEF_LINE.search(output).group(1)
        pids = [int(entry.split(":", 1)[0]) for entry in cluster_processes(chief)]
        ports = [int(address.rsplit(":", 1)[1])
                 for addresses in tf_config_of(pids[0])["cluster"].values()
                 for address in addresses]
        inodes = set().union(*(socket_inodes(pid) for pid in pids))
        seen.update(
            pids=pids, ports=ports, inodes=inodes,
            namespaces={os.readlink(f"/proc/{pid}/ns/net") for pid in pids},
            interfaces={line.split(":")[0].strip()
                        for line in open(f"/proc/{pids[0]}/net/dev").readlines()[2:]},
            own_listening=[s for s in tcp_sockets(str(pids[0]))
                           if s["state"] == LISTEN and s["inode"] in inodes],
            main_sockets=[s for s in tcp_sockets("self") if s["inode"] in inodes],
            reachable=[(address, port) for address in main_namespace_addresses()
                       for port in ports if reachable(address, port)],
            ss=subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
            if shutil.which("ss") else "")

    status, output = run_cluster(
        ["--num-ps", "1", "--config", str(config), "--model-dir", str(tmp_path / "run"),
         *flags], inspect_after=(FIRST_STEP, inspect), wrapper=wrapper)
    assert status == 0, output
    assert "step 60/60" in output and "exported SavedModel" in output, output
    return output, seen, os.readlink("/proc/self/ns/net")


def test_cluster_processes_listen_only_in_their_private_network(tmp_path):
    output, seen, main_namespace = run_inspected(tmp_path)
    assert ("tf-embedding cluster: the chief and the tasks run in a private network namespace "
            "whose only interface is its loopback" in output), output
    # The chief, the ps task and the worker, in one namespace that is not this machine's, whose
    # only interface is loopback.
    assert len(seen["pids"]) == 3, output
    assert len(seen["namespaces"]) == 1 and main_namespace not in seen["namespaces"], seen
    assert seen["interfaces"] == {"lo"}, seen
    # They listen there, on every cluster port, and nowhere in this machine's namespace: no
    # socket of theirs is in its tables, `ss` lists none, no address of it reaches their ports.
    assert {s["port"] for s in seen["own_listening"]} == set(seen["ports"]), seen
    assert seen["main_sockets"] == [], seen
    assert not any(f"pid={pid}," in seen["ss"] for pid in seen["pids"]), seen["ss"]
    assert seen["reachable"] == [], seen
    # Nothing is left: run_cluster found none of its processes, and nothing holds the namespace.
    assert processes_in(seen["namespaces"].pop()) == []


def no_namespaces_allowed() -> tuple[str, ...]:
    """NO_NAMESPACES, once checked that this machine can set it up."""
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        pytest.skip("util-linux's unshare and setpriv are needed")
    if subprocess.run([*NO_NAMESPACES, "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine gives no user namespace to set up a namespace-less process")
    return NO_NAMESPACES


def test_without_a_namespace_the_command_refuses_in_one_line(tmp_path):
    result = subprocess.run(
        [*no_namespaces_allowed(), sys.executable, "-m", "tf_embedding", "cluster",
         "--num-ps", "1", "--model-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, env=local_cluster.child_environment())
    assert result.returncode == 1, result
    assert result.stdout == "", result
    assert re.fullmatch(
        r"tf-embedding cluster: cannot give the tasks a private network namespace \(unshare "
        r"--net: unshare failed: Operation not permitted; unshare --map-root-user --net: "
        r"unshare failed: No space left on device\); without one, each task's port listens on "
        r"every interface of this machine, where anyone who can reach it can run any op in the "
        r"task \(reading or writing any file it can\)\. Run with --allow-exposed-ports to accept "
        r"that, on a trusted network only\.\n", result.stderr), result.stderr
    assert not (tmp_path / "run").exists()


def test_allow_exposed_ports_runs_with_the_ports_on_every_interface(tmp_path):
    """What the checks above would see of a cluster that is not closed: its sockets listen on
    the wildcard address of this machine's namespace, and its ports answer there."""
    output, seen, main_namespace = run_inspected(
        tmp_path, no_namespaces_allowed(), ["--allow-exposed-ports"])
    assert ("tf-embedding cluster: no private network namespace (unshare --net: unshare failed: "
            "Operation not permitted; unshare --map-root-user --net: unshare failed: No space "
            "left on device); running anyway (--allow-exposed-ports): each task's port listens "
            "on every interface of this machine" in output), output
    assert seen["namespaces"] == {main_namespace}, seen
    wildcards = {"0" * 8, "0" * 32}
    assert {s["port"] for s in seen["main_sockets"]
            if s["state"] == LISTEN and s["address"] in wildcards} == set(seen["ports"]), seen
    if shutil.which("ss"):
        assert all(f"pid={pid}," in seen["ss"] for pid in seen["pids"]), seen["ss"]
    if any(not is_loopback(address) for address in main_namespace_addresses()):
        assert {port for address, port in seen["reachable"]
                if not is_loopback(address)} == set(seen["ports"]), seen


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"
