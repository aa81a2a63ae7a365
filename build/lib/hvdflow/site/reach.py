"""Whether two nodes of a partition reach each other on each interface: the probe job's two tasks meet through a
folder on the shared home. The first listens on every interface's address and writes where; the second connects to
each and says its name; the first reports the interfaces a connection came in on (what the ranks' Gloo needs)."""

from __future__ import annotations

import json
import selectors
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.files.atomic import write_json_atomic

MEET_SECONDS = 30.0
"""How long either task waits for the other (the other node's task may start a little later)."""
CONNECT_SECONDS = 5.0
LISTENING = "listening.json"
DONE = "done"


@dataclass(frozen=True)
class Reach:
    """The second node's name (None where it never came: no shared folder, or it did not start) and the interfaces of
    the first node it reached."""

    peer: Optional[str]
    reached: list[str]


def _wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def listen(meet: Path, addresses: dict[str, str]) -> Reach:
    """The first task: listen on each interface's address (``addresses``: name to IPv4), write them into ``meet``,
    and take the second task's connections until it is done or :data:`MEET_SECONDS` pass."""
    selector = selectors.DefaultSelector()
    where = {}
    for name, address in addresses.items():
        server = socket.socket()
        server.bind((address, 0))
        server.listen(4)
        server.setblocking(False)
        selector.register(server, selectors.EVENT_READ, name)
        where[name] = [address, server.getsockname()[1]]
    write_json_atomic(meet / LISTENING, where)
    reached: set[str] = set()
    peer: Optional[str] = None
    deadline = time.monotonic() + MEET_SECONDS
    try:
        while time.monotonic() < deadline and len(reached) < len(where):
            events = selector.select(timeout=1.0)
            for key, _ in events:
                connection, _ = key.fileobj.accept()  # type: ignore[union-attr]
                with connection:
                    connection.settimeout(CONNECT_SECONDS)
                    said = connection.recv(256).decode(errors="replace").strip()
                if said:
                    peer = said
                    reached.add(key.data)
            if not events and (meet / DONE).exists():
                break
    finally:
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        selector.close()
    if peer is None and (meet / DONE).exists():
        peer = (meet / DONE).read_text().strip() or None
    return Reach(peer, sorted(reached))


def connect(meet: Path) -> None:
    """The second task: connect to each address the first one listens on and say this node's name; then mark the
    meeting done (nothing where the first task's file never shows: the nodes share no home folder)."""
    if not _wait_for(meet / LISTENING, MEET_SECONDS):
        return
    host = socket.gethostname()
    for address, port in json.loads((meet / LISTENING).read_text()).values():
        try:
            with socket.create_connection((address, port), timeout=CONNECT_SECONDS) as connection:
                connection.sendall(host.encode())
        except OSError:
            continue
    (meet / DONE).write_text(host)


def reach(meet: Optional[Path], rank: int, addresses: dict[str, str]) -> Optional[Reach]:
    """This task's part of the meeting (``rank`` 0 listens, 1 connects); None where there is no meeting (one node)
    or this is the second task."""
    if meet is None:
        return None
    if rank == 0:
        return listen(meet, addresses)
    connect(meet)
    return None
