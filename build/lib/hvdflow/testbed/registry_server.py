"""Serve a container registry on loopback with Debian's ``docker-registry`` (distribution 2.8), for tests and demos."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from hvdflow.errors import RegistryError

REGISTRY_BIN = "/usr/bin/docker-registry"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(storage: Path, port: int, config: Path) -> None:
    """A registry config: filesystem storage under ``storage``, deletes allowed, plain http on 127.0.0.1:``port``."""
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {storage}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0, ready_status: int = 200) -> None:
    """Wait until ``GET url/v2/`` answers ``ready_status`` (401 where it asks for authentication); RegistryError if
    the process dies or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RegistryError(f"{REGISTRY_BIN} exited with code {proc.returncode} before serving {url}")
        try:
            with urllib.request.urlopen(f"{url}/v2/", timeout=2) as response:
                if response.status == ready_status:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code == ready_status:
                return
            time.sleep(0.1)
        except OSError:
            time.sleep(0.1)
    raise RegistryError(f"registry at {url} did not answer within {timeout:.0f} s")


def start_registry(state_dir: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start a registry storing under ``state_dir``; return the process and its URL once it serves."""
    if not Path(REGISTRY_BIN).exists():
        raise RegistryError(f"{REGISTRY_BIN} is missing: install Debian's docker-registry package")
    port = port or free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    config = state_dir / "config.yml"
    write_config(state_dir / "storage", port, config)
    log = open(state_dir / "registry.log", "ab")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin")})
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
    except RegistryError:
        proc.kill()
        proc.wait()
        raise
    return proc, url
