"""`python enter.py NAMESPACE ARGS...`: `python ARGS...` in the named network namespace.

Like `ip netns exec NAMESPACE python ARGS...`, but the process that enters the namespace becomes
the Python program (exec keeps the pid), so whoever started it stops the program itself by pid
(local_cluster.ServerProcess does). Root on Linux.
"""

import ctypes
import os
import sys

CLONE_NEWNET = 0x40000000


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python enter.py NAMESPACE ARGS...")
    namespace, args = sys.argv[1], sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/run/netns/{namespace}", "rb") as handle:
        if libc.setns(handle.fileno(), CLONE_NEWNET):
            sys.exit(f"cannot enter network namespace {namespace}: "
                     f"{os.strerror(ctypes.get_errno())}")
    os.execv(sys.executable, [sys.executable, *args])


if __name__ == "__main__":
    main()
