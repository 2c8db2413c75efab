"""This process's network namespace as its sockets see it: the interfaces that are up (loopback
or not, with their addresses), bringing one up, and which of them a listening port of this
process is reachable on.

Linux only (interface ioctls and /proc/self/net); `listening_interfaces` returns None where
those cannot be read.
"""

import dataclasses
import fcntl
import ipaddress
import os
import socket
import struct

# <linux/sockios.h> and <linux/if.h>.
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_SIOCGIFADDR = 0x8915
_IFF_UP = 0x1
_IFF_LOOPBACK = 0x8
# struct ifreq: the interface's name, then a 24-byte union whose first member is the flags
# (a short) or the address (a sockaddr_in: family, port, then the IPv4 address).
_IFREQ_FLAGS = "16sH22x"
_IFREQ_ADDRESS = "16sHH4s16x"
# /proc/net/tcp's state of a listening socket.
_LISTEN = "0A"
_WILDCARDS = ("0.0.0.0", "::")


@dataclasses.dataclass(frozen=True)
class Interface:
    """A network interface that is up."""

    name: str
    loopback: bool
    addresses: tuple[str, ...]  # IPv4, then IPv6


def _flags(sock: socket.socket, name: str) -> int:
    request = struct.pack(_IFREQ_FLAGS, name.encode(), 0)
    return struct.unpack(_IFREQ_FLAGS, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]


def bring_up(name: str) -> None:
    """Sets interface `name` up (needs CAP_NET_ADMIN in this network namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ_FLAGS, name.encode(), _flags(sock, name) | _IFF_UP)
        fcntl.ioctl(sock, _SIOCSIFFLAGS, request)


def _ipv4_address(sock: socket.socket, name: str) -> tuple[str, ...]:
    """The interface's IPv4 address, or () if it has none."""
    request = struct.pack(_IFREQ_ADDRESS, name.encode(), socket.AF_INET, 0, bytes(4))
    try:
        reply = fcntl.ioctl(sock, _SIOCGIFADDR, request)
    except OSError:  # EADDRNOTAVAIL: no IPv4 address
        return ()
    return (socket.inet_ntoa(struct.unpack(_IFREQ_ADDRESS, reply)[3]),)


def _ipv6_addresses() -> dict[str, list[str]]:
    """Interface name -> its IPv6 addresses (none where IPv6 is off)."""
    addresses: dict[str, list[str]] = {}
    try:
        with open("/proc/self/net/if_inet6") as f:
            for line in f:
                fields = line.split()
                address = str(ipaddress.IPv6Address(bytes.fromhex(fields[0])))
                addresses.setdefault(fields[5], []).append(address)
    except FileNotFoundError:
        pass
    return addresses


def up_interfaces() -> list[Interface]:
    """The interfaces of this network namespace that are up, in index order."""
    ipv6 = _ipv6_addresses()
    interfaces = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            flags = _flags(sock, name)
            if flags & _IFF_UP:
                interfaces.append(Interface(name, bool(flags & _IFF_LOOPBACK),
                                            (*_ipv4_address(sock, name), *ipv6.get(name, ()))))
    return interfaces


def _address(hex_address: str) -> str:
    """An address as /proc/net/tcp{,6} prints it: 32-bit words in host (little-endian) order."""
    raw = b"".join(bytes.fromhex(hex_address[i:i + 8])[::-1]
                   for i in range(0, len(hex_address), 8))
    return str(ipaddress.ip_address(raw))


def listening_addresses(port: int) -> list[str]:
    """The local addresses of this process's sockets listening on TCP `port` ("0.0.0.0" or "::"
    for every interface)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the directory's own descriptor, closed by now
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    addresses = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                hex_address, hex_port = fields[1].split(":")
                if fields[3] == _LISTEN and int(hex_port, 16) == port and fields[9] in inodes:
                    addresses.append(_address(hex_address))
    return addresses


def listening_interfaces(port: int) -> tuple[bool, list[Interface]] | None:
    """(whether this process listens on `port` of every interface, the interfaces it is
    reachable on), or None where this cannot be read (not Linux) or nothing listens."""
    try:
        addresses = listening_addresses(port)
        interfaces = up_interfaces()
    except OSError:
        return None
    if not addresses:
        return None
    if any(address in _WILDCARDS for address in addresses):
        return True, interfaces
    return False, [interface for interface in interfaces
                   if set(interface.addresses) & set(addresses)]
