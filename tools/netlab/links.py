"""The lab's network: a namespace per task, veth links to a bridge, tc shaping, byte counters.

Every name starts with PREFIX and the lab's own id, so a lab removes only what it made and
`remove_leftovers` finds what a killed lab left behind. The bridge lives in a hub namespace of the
lab and each link is created there with its task end moved straight into the task's namespace:
no command of the lab touches the machine's own network namespace.
"""

import dataclasses
import json
import os
import signal
import subprocess
import time
from typing import Sequence

PREFIX = "tfenl"
SUBNET = "10.213.0."
TASK_DEVICE = "eth0"  # the task's end of its link, inside the task's namespace
BRIDGE = "br0"
COMMAND_TIMEOUT = 30.0
KILL_TIMEOUT = 10.0


class LabError(RuntimeError):
    """A lab command failed (not root, a kernel without a qdisc, ...)."""


def _run(command: Sequence[str]) -> str:
    try:
        completed = subprocess.run(list(command), capture_output=True, text=True,
                                   timeout=COMMAND_TIMEOUT)
    except FileNotFoundError:
        raise LabError(f"{command[0]} not found: the lab needs iproute2 (ip, tc)") from None
    if completed.returncode:
        raise LabError(f"`{' '.join(command)}` failed: {completed.stderr.strip()}")
    return completed.stdout


@dataclasses.dataclass(frozen=True)
class Link:
    """One task's link: its namespace, its address there, and the bridge end's device name."""

    task: str  # "chief0", "ps1", "worker0": also the device name of the link's bridge end
    namespace: str
    address: str


class Network:
    """The namespaces and links of one lab. `create` builds them, `remove` takes them down with
    every process inside; `shape` sets the links' rate, `counters` reads their bytes."""

    def __init__(self, tasks: Sequence[str], name: str | None = None):
        if len(tasks) > 250:
            raise LabError(f"{len(tasks)} tasks do not fit in {SUBNET}0/24")
        self.name = name or f"{PREFIX}{os.getpid()}"
        self.hub = f"{self.name}-hub"
        self.links = {task: Link(task, f"{self.name}-{task}", f"{SUBNET}{index + 2}")
                      for index, task in enumerate(tasks)}

    def description(self) -> str:
        """JSON that `from_description` turns back into this network (for a process that
        shapes or counts the links of a lab it did not create, e.g. the chief)."""
        return json.dumps({"name": self.name, "tasks": list(self.links)})

    @classmethod
    def from_description(cls, text: str) -> "Network":
        description = json.loads(text)
        return cls(description["tasks"], description["name"])

    def namespaces(self) -> list[str]:
        return [self.hub] + [link.namespace for link in self.links.values()]

    def create(self) -> None:
        """Adds the namespaces, the bridge and one veth link per task, addresses and all."""
        _run(["ip", "netns", "add", self.hub])
        _run(["ip", "-n", self.hub, "link", "add", "name", BRIDGE, "type", "bridge"])
        _run(["ip", "-n", self.hub, "link", "set", BRIDGE, "up"])
        for link in self.links.values():
            _run(["ip", "netns", "add", link.namespace])
            _run(["ip", "-n", self.hub, "link", "add", "name", link.task, "type", "veth",
                  "peer", "name", TASK_DEVICE, "netns", link.namespace])
            _run(["ip", "-n", self.hub, "link", "set", link.task, "master", BRIDGE, "up"])
            _run(["ip", "-n", link.namespace, "address", "add", f"{link.address}/24",
                  "dev", TASK_DEVICE])
            _run(["ip", "-n", link.namespace, "link", "set", TASK_DEVICE, "up"])
            _run(["ip", "-n", link.namespace, "link", "set", "lo", "up"])

    def _ends(self) -> list[tuple[str, str]]:
        """(namespace, device) of both ends of every link: each end's egress is one direction."""
        return [end for link in self.links.values()
                for end in ((link.namespace, TASK_DEVICE), (self.hub, link.task))]

    def shape(self, rate_mbit: float | None, delay_ms: float = 0.0) -> None:
        """Limits every link to `rate_mbit` in each direction and delays each direction by
        `delay_ms` (so two tasks see a round trip of 4 x delay_ms: two links, both ways).
        None and 0 remove the shaping. A rate alone is a token bucket (tbf); a delay needs netem,
        which LabError reports if the kernel lacks it."""
        for namespace, device in self._ends():
            subprocess.run(["tc", "-n", namespace, "qdisc", "del", "dev", device, "root"],
                           capture_output=True, timeout=COMMAND_TIMEOUT)  # none yet is fine
            if delay_ms:
                rate = ["rate", f"{rate_mbit}mbit"] if rate_mbit else []
                _run(["tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "netem",
                      "delay", f"{delay_ms}ms", *rate, "limit", "10000"])
            elif rate_mbit:
                # A burst of 1 ms at the rate (at least 16 KiB, a few full frames): small
                # enough that a step's transfers see the rate, large enough for the timer.
                burst = max(16 * 1024, int(rate_mbit * 1e6 / 8 / 1000))
                _run(["tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "tbf",
                      "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "100ms"])

    def counters(self) -> dict[str, tuple[int, int]]:
        """Task -> (bytes sent, bytes received) so far on its link, frames with their headers."""
        counts = {}
        for link in self.links.values():
            (device,) = json.loads(_run(["ip", "-n", link.namespace, "-j", "-s", "link", "show",
                                         "dev", TASK_DEVICE]))
            stats = device["stats64"]
            counts[link.task] = (stats["tx"]["bytes"], stats["rx"]["bytes"])
        return counts

    def remove(self) -> None:
        """Kills every process left in the lab's namespaces and deletes them (their links go
        with them). Safe to call on a partly created or already removed network."""
        remove_namespaces([name for name in existing_namespaces()
                           if name in self.namespaces()])


def existing_namespaces() -> list[str]:
    """The named network namespaces of the machine (`ip netns list`)."""
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line]


def namespace_pids(namespace: str) -> list[int]:
    completed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                               text=True, timeout=COMMAND_TIMEOUT)
    return [int(pid) for pid in completed.stdout.split()]


def remove_namespaces(names: Sequence[str]) -> None:
    """SIGKILLs the processes inside `names`, waits until they are gone (a namespace with a
    process in it outlives its name), then deletes the namespaces."""
    deadline = time.monotonic() + KILL_TIMEOUT
    for name in names:
        while pids := namespace_pids(name):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise LabError(f"processes {pids} in {name} survive SIGKILL")
            time.sleep(0.05)
    for name in names:
        _run(["ip", "netns", "delete", name])


def remove_leftovers() -> list[str]:
    """Removes every namespace a lab made (its name starts with PREFIX) with what runs in it,
    e.g. after a lab was SIGKILLed and could not clean up; returns their names."""
    names = [name for name in existing_namespaces() if name.startswith(PREFIX)]
    remove_namespaces(names)
    return names


def missing_capability() -> str | None:
    """Why the lab cannot run here (not root, no iproute2, no namespaces, veth or tbf), or None:
    builds and removes a one-link network to find out."""
    if os.geteuid() != 0:
        return "the network lab needs root (network namespaces, veth links, tc)"
    probe = Network(["probe"], name=f"{PREFIX}{os.getpid()}probe")
    try:
        probe.create()
        probe.shape(10.0)
    except (LabError, OSError, subprocess.TimeoutExpired) as error:
        return f"the network lab cannot build a shaped link here: {error}"
    finally:
        probe.remove()
    return None
