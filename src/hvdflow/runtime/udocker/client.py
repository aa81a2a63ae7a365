"""udocker, run as an ordinary user, offline, with one ``UDOCKER_DIR`` per user.

hvdflow never lets udocker reach the internet: the engine tarball is built from Debian's binaries
(:mod:`hvdflow.images.udocker_tools`) and a config file sets ``installinfo = /dev/null``. Running as root is refused unless
the caller opts in, because udocker's containers are meant to run with the user's own rights.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from hvdflow.errors import UdockerError
from hvdflow.files.atomic import write_text_atomic
from hvdflow.files.private import in_shared_place, private_dir
from hvdflow.images.runc_probe import host_runc
from hvdflow.images.udocker_tools import HOST_PROOT, build_tools_tarball, engine_wrapper

ROOT_REFUSAL = (
    "hvdflow runs udocker as an ordinary user and refuses to run it as root (uid 0): containers would get root's "
    "rights and files owned by root. Run as your own user, or pass --allow-root (HVDFLOW_ALLOW_ROOT=1) if you mean it."
)


LAUNCHER = Path(__file__).with_name("launcher.py")
"""What hvdflow runs as ``udocker``: udocker's command line with its R1 mode made sound (the module's docstring)."""
def udocker_interpreter(executable: str) -> str:
    """The Python that runs the ``udocker`` script ``executable`` (its ``#!`` line), which has udocker installed."""
    with open(executable, "rb") as script:
        first = script.readline().decode(errors="replace").strip()
    if not first.startswith("#!") or not first[2:].strip():
        raise UdockerError(f"{executable} does not start with a #! line naming its Python")
    return first[2:].split()[0]


def udocker_executable() -> str:
    """The ``udocker`` of the running interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).parent / "udocker"
    if beside.exists():
        return str(beside)
    found = shutil.which("udocker")
    if not found:
        raise UdockerError("udocker is not installed: pip install udocker==1.3.17 into hvdflow's environment")
    return found


@dataclass(frozen=True)
class Udocker:
    """One user's udocker: its directory and how to call it."""

    udocker_dir: Path
    allow_root: bool = False
    executable: str = field(default_factory=udocker_executable)
    proot: Path = HOST_PROOT
    """The proot binary udocker's P1/P2 modes run (:func:`hvdflow.images.udocker_tools.engine_binary`)."""

    def __post_init__(self) -> None:
        if os.geteuid() == 0 and not self.allow_root:
            raise UdockerError(ROOT_REFUSAL)

    @property
    def state_dir(self) -> Path:
        """hvdflow's own files beside udocker's: config, tools tarball, locks, container records."""
        return self.udocker_dir / ".hvdflow"

    @property
    def config_file(self) -> Path:
        """The udocker config file hvdflow passes with ``--config``."""
        return self.state_dir / "udocker.conf"

    def prepare(self) -> None:
        """Create the directory, the tools tarball and the config, and install the tools (idempotent).

        A directory in a place every user can write (a site's scratch) is made the user's alone, or refused by name
        (:func:`hvdflow.files.private.private_dir`): another user's folder or link there would hold the images.
        """
        if in_shared_place(self.udocker_dir):
            private_dir(self.udocker_dir, "keep udocker's images and containers")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tarball = build_tools_tarball(self.state_dir)
        config = f"[DEFAULT]\ntarball = {tarball}\ninstallinfo = /dev/null\n"
        if not self.config_file.exists() or self.config_file.read_text() != config:
            write_text_atomic(self.config_file, config)
        version = self.udocker_dir / "lib" / "VERSION"
        if not version.exists():
            self.check("install")
            if not version.exists():
                raise UdockerError(f"udocker install did not install its tools from {tarball} into {self.udocker_dir}")

    def env(self) -> dict[str, str]:
        """The environment udocker runs with: the caller's, plus the directory and the engine choices."""
        env = dict(os.environ)
        env.update({
            "UDOCKER_DIR": str(self.udocker_dir),
            "UDOCKER_USE_PROOT_EXECUTABLE": str(engine_wrapper(self.state_dir, self.proot)),
        })
        runc = host_runc()
        if runc:
            env["UDOCKER_USE_RUNC_EXECUTABLE"] = runc
        env.pop("UDOCKER_TARBALL", None)
        return env

    def argv(self, *args: str) -> list[str]:
        """The command line for ``udocker ARGS`` (root allowed only when opted in), through :data:`LAUNCHER`."""
        extra = ["--allow-root"] if os.geteuid() == 0 else []
        return [udocker_interpreter(self.executable), str(LAUNCHER), *extra, f"--config={self.config_file}", *args]

    def call(self, *args: str, timeout: float | None = None, stdin_text: str | None = None
             ) -> subprocess.CompletedProcess[str]:
        """Run ``udocker ARGS`` and capture its output, whatever its exit status; ``stdin_text`` is its input."""
        return subprocess.run(self.argv(*args), env=self.env(), capture_output=True, text=True, timeout=timeout,
                              input=stdin_text, stdin=subprocess.DEVNULL if stdin_text is None else None)

    def check(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``udocker ARGS``; raise UdockerError with its output if it exits non-zero."""
        proc = self.call(*args, timeout=timeout)
        if proc.returncode != 0:
            raise UdockerError(f"udocker {' '.join(args)} failed (exit {proc.returncode}): {output_tail(proc)}")
        return proc


def output_tail(proc: subprocess.CompletedProcess[str], lines: int = 12) -> str:
    text = (proc.stdout or "") + (proc.stderr or "")
    return "\n".join(text.strip().splitlines()[-lines:])


def run_argv(
    udocker: Udocker,
    container: str,
    command: Sequence[str],
    env: Mapping[str, str] = {},
    volumes: Sequence[str] = (),
    hostenv: bool = False,
    as_user: bool = True,
) -> list[str]:
    """The ``udocker run`` command line for ``command`` in ``container``.

    ``volumes`` are paths bound at the same place inside; ``/etc/hosts`` is always bound (udocker does not, and Gloo
    needs the host name to resolve). Processes run with the caller's uid and the host's passwd/group (``--hostauth
    --user``): Open MPI's PMIx server rejects clients whose uid differs from its own, and proot's default is uid 0.
    ``as_user`` False leaves ``--user`` out: runc's rootless mode (R1) runs the command as root of a user namespace
    that is the caller on the host (its files are the caller's) and refuses any other user with a warning on stdout.
    ``hostenv`` passes the caller's environment (Open MPI's variables under mpirun).
    """
    args = ["run", "--nobanner", "--pull=never", "-v", "/etc/hosts", "--hostauth"]
    if as_user:
        args.append(f"--user={os.getuid()}")
    if hostenv:
        args.append("--hostenv")
    for volume in volumes:
        args += ["-v", volume]
    for key in sorted(env):
        args.append(f"--env={key}={env[key]}")
    return udocker.argv(*args, container, *command)
