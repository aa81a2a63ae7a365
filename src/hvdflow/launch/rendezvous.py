"""Horovod's rendezvous server for a Gloo launch: started from the runtime, ready once it accepts connections.

Horovod's HTTP store retries only 3 × 500 ms, so the ranks start only after the server answers. The server listens
on the one address the ranks use (its store has no authentication) and writes the port it bound to
``rendezvous.port`` in the launch's log folder.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Mapping, Sequence

from hvdflow.errors import LaunchError
from hvdflow.launch.supervise import Supervised, log_tail, start, stop
from hvdflow.runtime import Runtime

RENDEZVOUS_TIMEOUT = 300.0


def start_rendezvous_server(runtime: Runtime, logs: Path, binds: Sequence[Path], env: Mapping[str, str],
                            address: str) -> tuple[Supervised, int]:
    """Start the server in ``runtime``, listening on ``address`` only, with its log in ``logs``; return it and its
    port once it serves.

    If it dies or never serves, it is stopped before the LaunchError goes up."""
    port_file = logs / "rendezvous.port"
    port_file.unlink(missing_ok=True)
    argv = runtime.command(["python3", "-m", "hvdflow_trainer.rendezvous", "--port-file", str(port_file),
                            "--address", address], {}, binds)
    server = start("rendezvous server", argv, logs / "rendezvous.log", env)
    try:
        return server, wait_for_rendezvous(server, port_file, address, RENDEZVOUS_TIMEOUT)
    except BaseException:
        stop([server])
        raise


def wait_for_rendezvous(server: Supervised, port_file: Path, address: str, timeout: float) -> int:
    """The port of a rendezvous server once it accepts TCP connections at ``address``; LaunchError if it dies or
    never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise LaunchError(f"the rendezvous server exited with code {server.proc.returncode} before serving. "
                              f"Log: {server.log}\n{log_tail(server.log)}")
        if port_file.exists() and port_file.read_text().strip():
            port = int(port_file.read_text())
            try:
                with socket.create_connection((address, port), timeout=1.0):
                    return port
            except OSError:
                pass
        time.sleep(0.2)
    raise LaunchError(f"the rendezvous server did not accept connections within {timeout:.0f} s. Log: {server.log}")
