"""Which address and interface Horovod's Gloo uses between nodes: named in the profile, or found from the route.

``network_interface: auto`` takes, on the node that runs the rendezvous server, the address its hostname resolves
to; every rank then uses the interface that holds or routes to that address on its own node.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess

from hvdflow.errors import LaunchError

AUTO = "auto"


def _ip(*args: str) -> str:
    proc = subprocess.run(["ip", "-o", "-4", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise LaunchError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def address_of(interface: str) -> str:
    """The first IPv4 address of ``interface``."""
    for line in _ip("addr", "show", "dev", interface).splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    raise LaunchError(f"network interface {interface!r} has no IPv4 address on {socket.gethostname()} "
                      f"(set network_interface in the profile's hvdflow.yaml)")


def interface_for(address: str) -> str:
    """The interface that holds ``address`` on this node, or else the one the route to it leaves by."""
    for line in _ip("addr", "show", "to", f"{address}/32").splitlines():
        return line.split()[1]
    fields = _ip("route", "get", address).split()
    if "dev" not in fields:
        raise LaunchError(f"no route to {address} from {socket.gethostname()}")
    return fields[fields.index("dev") + 1]


def rendezvous_address(interface: str) -> str:
    """The address the other nodes reach this one at: of ``interface``, or of this host's name under ``auto``."""
    if interface != AUTO:
        return address_of(interface)
    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError as exc:
        raise LaunchError(f"cannot resolve this node's name {host!r}: {exc}; set network_interface in the profile") from None
    if ipaddress.ip_address(address).is_loopback:
        raise LaunchError(f"{host} resolves to the loopback address {address}, which other nodes cannot reach: "
                          f"set network_interface in the profile's hvdflow.yaml")
    return address


def rank_interface(interface: str, rendezvous: str) -> str:
    """The interface a rank binds Gloo to: the profile's, or under ``auto`` the one towards the rendezvous server."""
    return interface_for(rendezvous) if interface == AUTO else interface
