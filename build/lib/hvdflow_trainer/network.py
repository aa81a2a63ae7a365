"""The rank's network as the trainer sees it: the address of the interface Gloo binds to."""

from __future__ import annotations

import fcntl
import socket
import struct

SIOCGIFADDR = 0x8915


def interface_address(interface: str) -> str:
    """The IPv4 address of ``interface`` (the one Gloo binds to), or of this host's name if it has none."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", interface[:15].encode()))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()
