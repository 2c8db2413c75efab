"""Private network namespaces: processes of this machine that reach each other, on their own
loopback interface, and nothing else reaches (the chief and tasks of `tf-embedding cluster`).

A namespace is made by util-linux's `unshare --net` (root, or CAP_SYS_ADMIN) or, for a user
without that privilege where the kernel allows user namespaces, `unshare --map-root-user --net`
(a user namespace mapping only this user, which owns the network namespace). The short-lived
process that makes it brings its only interface, `lo`, up; this process keeps the namespace by
file descriptors, and children join it through `nsenter`. No name is registered anywhere (as
`ip netns add` would): the namespace ends once the descriptors are closed and its last process
has exited, however this process ends.

```python
with PrivateNetwork.create() as network:
    subprocess.run(network.command([sys.executable, "task.py"]), pass_fds=network.fds)
```
"""

import os
import shutil
import subprocess
import sys
from typing import Sequence

from tf_embedding.cluster import network_interfaces

# What the process that made a namespace prints once its loopback interface is up.
_READY = "private network up"
# The ways to make one, tried in order: with CAP_SYS_ADMIN; in a user namespace of its own.
_UNSHARE_COMMANDS = (("unshare", "--net"), ("unshare", "--map-root-user", "--net"))
_HOLDER_TIMEOUT = 60.0


class Unavailable(OSError):
    """No private network namespace can be made here; the message says why."""


class PrivateNetwork:
    """A network namespace with only its loopback interface, up, that processes started with
    `command` (and `fds` passed to them) join. Close it (or leave its `with` block) once no
    more processes are to join."""

    def __init__(self, namespace_fds: dict[str, int]):
        """Takes open descriptors of the namespaces to join: "net", and "user" when the network
        namespace belongs to a user namespace of its own."""
        self._fds = namespace_fds

    @classmethod
    def create(cls) -> "PrivateNetwork":
        """Makes a namespace, as root if this process may, else in a user namespace.

        Raises:
          Unavailable: neither is allowed here (each attempt's error in the message), or
            util-linux's unshare and nsenter are not installed.
        """
        missing = [tool for tool in ("unshare", "nsenter") if not shutil.which(tool)]
        if missing:
            raise Unavailable(f"{' and '.join(missing)} (util-linux) not found")
        failures = []
        for unshare in _UNSHARE_COMMANDS:
            try:
                return cls(_made_by(unshare))
            except Unavailable as error:
                failures.append(f"{' '.join(unshare)}: {error}")
        raise Unavailable("; ".join(failures))

    @property
    def fds(self) -> tuple[int, ...]:
        """The descriptors a process started with `command` must inherit (`pass_fds`)."""
        return tuple(self._fds.values())

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespace (it keeps its pid: nsenter execs it)."""
        joins = [f"--net=/proc/self/fd/{self._fds['net']}"]
        if "user" in self._fds:
            # Entering the user namespace first gives the capability to enter the network
            # namespace it owns; the process keeps its uid (this user, root inside).
            joins += [f"--user=/proc/self/fd/{self._fds['user']}", "--preserve-credentials"]
        return ["nsenter", *joins, "--", *argv]

    def close(self) -> None:
        """Releases this process's hold on the namespace; it ends with its last process."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def __enter__(self) -> "PrivateNetwork":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _made_by(unshare: Sequence[str]) -> dict[str, int]:
    """The namespaces of a process started by `unshare` that brings its `lo` up, opened before
    that process exits; raises Unavailable with unshare's error if it cannot start."""
    # A session of its own, as the cluster's tasks: a terminal's Ctrl-C goes to the caller,
    # whose exit closes this process's stdin, which ends it.
    holder = subprocess.Popen(
        [*unshare, "--", sys.executable, "-m", __name__], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    fds: dict[str, int] = {}
    try:
        if holder.stdout.readline().strip() == _READY:
            for kind in ("net", "user"):
                fds[kind] = os.open(f"/proc/{holder.pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            if os.fstat(fds["user"]).st_ino == os.stat("/proc/self/ns/user").st_ino:
                os.close(fds.pop("user"))  # made with CAP_SYS_ADMIN, in this user namespace
    finally:
        try:
            _, error = holder.communicate(timeout=_HOLDER_TIMEOUT)  # closes its stdin: it exits
        except subprocess.TimeoutExpired:
            holder.kill()
            _, error = holder.communicate()
        if holder.returncode != 0 or "net" not in fds:
            for fd in fds.values():
                os.close(fd)
            fds = {}
    if not fds:
        lines = error.strip().splitlines() or [f"exit status {holder.returncode}"]
        raise Unavailable(lines[-1].removeprefix("unshare: "))
    return fds


def _hold() -> None:
    """The process `_made_by` starts inside a new namespace: sets its loopback interface up,
    says so, and waits until its caller has opened the namespace (its stdin closes)."""
    network_interfaces.bring_up("lo")
    print(_READY, flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    _hold()
