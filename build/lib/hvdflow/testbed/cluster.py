"""A real Slurm cluster on one machine, for tests and demos: munge, MariaDB, slurmdbd, slurmctld, and one slurmd per
node in its own network, UTS and mount namespace (root only).

The configuration stays in the test bed's own folder: the daemons and the client commands on this machine read it
through ``SLURM_CONF`` (:func:`client_env`), and each node sees it at ``/etc/slurm`` through a bind mount in the node's
own mount namespace (the Snakemake Slurm plugin's job step drops ``SLURM_CONF``, so commands inside a job need the
default path, as on a real compute node). The machine's own ``/etc/slurm`` is never written.

``start`` is idempotent (every daemon whose pid file names a live process is left alone; configuration that would
change under running daemons is refused); ``stop`` ends only the processes named by its pid files and removes only
the namespaces and links that ``start`` recorded. The Debian packages must be installed
(``scripts/lib.sh``: ``HVDFLOW_TESTBED_APT_PACKAGES``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from hvdflow.errors import HvdflowError
from hvdflow.testbed import config as tc

DEFAULT_BASE = Path("/var/lib/hvdflow-testbed")
ETC_SLURM = Path("/etc/slurm")
CONFIG_FILES = {"slurm.conf": tc.slurm_conf, "gres.conf": tc.gres_conf, "cgroup.conf": tc.cgroup_conf,
                "slurmdbd.conf": tc.slurmdbd_conf, "task_prolog.sh": tc.task_prolog, "epilog.sh": tc.epilog}
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


class TestbedError(HvdflowError):
    """The test-bed cluster could not be started or stopped; the message names the daemon and its log."""


def default_layout(base: Optional[Path] = None, nodes: int = 2, proctrack: Optional[str] = None) -> tc.Layout:
    """The layout under ``base`` (default ``$HVDFLOW_TESTBED_DIR`` or /var/lib/hvdflow-testbed), tracking processes
    with ``proctrack`` (default ``$HVDFLOW_TESTBED_PROCTRACK`` or linuxproc)."""
    base = base or Path(os.environ.get("HVDFLOW_TESTBED_DIR", str(DEFAULT_BASE)))
    proctrack = proctrack or os.environ.get("HVDFLOW_TESTBED_PROCTRACK", "linuxproc")
    return tc.Layout(base=base, nodes=nodes, controller_host=socket.gethostname().split(".")[0], proctrack=proctrack)


def client_env(layout: tc.Layout) -> dict[str, str]:
    """This process's environment with ``SLURM_CONF`` naming the test bed's configuration."""
    return {**os.environ, "SLURM_CONF": str(layout.etc / "slurm.conf")}


def _sh(argv: Sequence[str], check: bool = True, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def alive(pid_file: Path) -> Optional[int]:
    """The pid in ``pid_file`` if that process runs and is not a zombie (PID 1 here reaps them late)."""
    try:
        pid = int(pid_file.read_text().split()[0])
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    return None if state in ("Z", "X") else pid


def _wait_for(what: str, check: Callable[[], bool], timeout: float, log: Optional[Path] = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:]) if log and log.exists() else ""
    raise TestbedError(f"{what} not ready after {timeout:.0f} s" + (f"; log {log}:\n{tail}" if log else ""))


def _write_configs(layout: tc.Layout, running: bool) -> None:
    """Render the configs into the test bed's own folder; refuse to change one under running daemons."""
    layout.etc.mkdir(parents=True, exist_ok=True)
    rendered = {name: render(layout) for name, render in CONFIG_FILES.items()}
    rendered["my.cnf"] = tc.mariadb_conf(layout)
    rendered["hosts"] = tc.hosts_file(layout)
    for name, text in rendered.items():
        path = layout.etc / name
        if path.exists() and path.read_text() == text:
            continue
        if running:
            raise TestbedError(f"{path} would change while the test bed runs: stop it first (hvdflow testbed stop)")
        path.write_text(text)
    (layout.etc / "slurmdbd.conf").chmod(0o600)
    for script in ("task_prolog.sh", "epilog.sh"):
        (layout.etc / script).chmod(0o755)
    (layout.etc / "my.cnf").chmod(0o644)


def _start_munge(layout: tc.Layout) -> None:
    """munged on the default socket (sacctmgr and slurmdbd use no other), with a key of the test bed's own."""
    if _sh(["munge", "-n"], check=False).returncode == 0:
        return
    munge = layout.base / "munge"
    munge.mkdir(mode=0o700, exist_ok=True)
    key = munge / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    entry = pwd.getpwnam("munge")
    for path in (munge, key):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    key.chmod(0o400)
    MUNGE_SOCKET.parent.mkdir(mode=0o755, exist_ok=True)
    os.chown(MUNGE_SOCKET.parent, entry.pw_uid, entry.pw_gid)
    _sh(["runuser", "-u", "munge", "--", "munged", f"--key-file={key}", f"--pid-file={munge}/munged.pid",
         f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"])
    (layout.run / "munged.started").write_text(f"{munge}/munged.pid\n")
    _wait_for("munged", lambda: _sh(["munge", "-n"], check=False).returncode == 0, 10, munge / "munged.log")


def _start_network(layout: tc.Layout) -> None:
    """The bridge with the controller's address, and per node a namespace joined to it by a veth pair."""
    record = layout.run / "net.created"
    created = record.read_text().split() if record.exists() else []

    def remember(name: str) -> None:
        created.append(name)
        record.write_text("\n".join(created) + "\n")

    for bridge in (tc.BRIDGE, tc.FAST_BRIDGE):
        if _sh(["ip", "link", "show", bridge], check=False).returncode != 0:
            _sh(["ip", "link", "add", bridge, "type", "bridge"])
            remember(f"link:{bridge}")
            if bridge == tc.BRIDGE:
                _sh(["ip", "addr", "add", f"{tc.CONTROLLER_ADDR}/24", "dev", bridge])
        _sh(["ip", "link", "set", bridge, "up"])
    for node in layout.node_names:
        ns = layout.netns(node)
        if not Path(f"/run/netns/{ns}").exists():
            _sh(["ip", "netns", "add", ns])
            remember(f"netns:{ns}")
        links = ((ns, "eth0", tc.BRIDGE, layout.node_addr(node)),
                 (f"{ns}-ib", tc.FAST_INTERFACE, tc.FAST_BRIDGE, layout.fast_addr(node)))
        for host_side, inside, bridge, address in links:
            if _sh(["ip", "link", "show", host_side], check=False).returncode != 0:
                _sh(["ip", "link", "add", host_side, "type", "veth", "peer", "name", inside, "netns", ns])
                remember(f"link:{host_side}")
                _sh(["ip", "link", "set", host_side, "master", bridge])
                _sh(["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", inside])
            _sh(["ip", "link", "set", host_side, "up"])
            _sh(["ip", "-n", ns, "link", "set", inside, "up"])
        _sh(["ip", "-n", ns, "link", "set", "lo", "up"])


def _start_mariadb(layout: tc.Layout) -> None:
    """MariaDB in a private datadir on 127.0.0.1, with the accounting database's user."""
    cnf = layout.etc / "my.cnf"
    pid_file = layout.mysql / "mariadbd.pid"
    if alive(pid_file):
        return
    data = layout.mysql / "data"
    mysql = pwd.getpwnam("mysql")
    if not (data / "mysql").is_dir():
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        _sh(["mariadb-install-db", f"--defaults-file={cnf}", "--user=mysql", "--skip-test-db",
             "--auth-root-authentication-method=socket"])
    for path in (data.parent, data):
        os.chown(path, mysql.pw_uid, mysql.pw_gid)
    log = layout.mysql / "mariadbd.log"
    subprocess.Popen(["mariadbd", f"--defaults-file={cnf}", "--user=mysql"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait_for("MariaDB", lambda: alive(pid_file) is not None and _sh(
        ["mariadb", f"--defaults-file={cnf}", "-uroot", "-e", "SELECT 1"], check=False).returncode == 0, 30, log)
    sql = (f"CREATE USER IF NOT EXISTS '{tc.DB_USER}'@'127.0.0.1' IDENTIFIED BY '{tc.DB_PASSWORD}'; "
           f"GRANT ALL ON slurm_acct_db.* TO '{tc.DB_USER}'@'127.0.0.1';")
    _sh(["mariadb", f"--defaults-file={cnf}", "-uroot", "-e", sql])


def _start_slurmdbd(layout: tc.Layout) -> None:
    env = client_env(layout)
    if not alive(layout.run / "slurmdbd.pid"):
        _sh(["slurmdbd"], env=env)
    _wait_for("slurmdbd", lambda: _sh(["sacctmgr", "-n", "list", "cluster"], check=False, env=env).returncode == 0,
              30, layout.log / "slurmdbd.log")
    if tc.CLUSTER not in _sh(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], env=env).stdout.split():
        _sh(["sacctmgr", "-i", "add", "cluster", tc.CLUSTER], env=env)


def _make_node_dirs(layout: tc.Layout) -> None:
    """Each node's spool, scratch (mode 1777) and GPU devices (``mknod c 195 N``, as NVIDIA's)."""
    for mount in (layout.scratch_mount, layout.job_tmp_mount):
        mount.mkdir(parents=True, exist_ok=True)
        mount.chmod(0o755)  # the host's own view: nothing writes here outside a node
    for node in layout.node_names:
        for scratch in (layout.node_scratch(node), layout.node_job_tmp(node)):
            scratch.mkdir(parents=True, exist_ok=True)
            scratch.chmod(0o1777)
        dev = layout.gpu_dir(node)
        dev.mkdir(parents=True, exist_ok=True)
        for i in range(layout.gpus_per_node):
            if not (dev / f"nvidia{i}").exists():
                os.mknod(dev / f"nvidia{i}", 0o666 | 0o020000, os.makedev(195, i))


def _make_freezer_dir(layout: tc.Layout, node: str) -> None:
    """The node's own freezer cgroup (proctrack/cgroup), recorded so that :func:`stop` removes it."""
    if not tc.FREEZER.is_dir():
        raise TestbedError(f"proctrack/cgroup needs the cgroup v1 freezer at {tc.FREEZER}, which this machine lacks: "
                           "start the test bed with proctrack linuxproc")
    path = layout.freezer_dir(node)
    if not path.is_dir():
        path.mkdir()
        with open(layout.run / "cgroup.created", "a") as record:
            record.write(f"{path}\n")


def _remove_freezer_dirs(layout: tc.Layout) -> None:
    """Remove the freezer cgroups :func:`_make_freezer_dir` made, with what Slurm left inside them (deepest first)."""
    record = layout.run / "cgroup.created"
    if not record.exists():
        return
    for top in record.read_text().split():
        nested = [Path(root, d) for root, dirs, _ in os.walk(top, topdown=False) for d in dirs]
        for path in [*nested, Path(top)] if Path(top).is_dir() else []:
            try:
                path.rmdir()
            except OSError as exc:
                raise TestbedError(f"cannot remove the test bed's cgroup {path}: {exc.strerror} (a process of a job "
                                   "still in it?)") from exc
    record.unlink()


def _empty(folder: Path) -> None:
    """Remove everything in ``folder`` (links removed, never followed)."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _start_nodes(layout: tc.Layout) -> None:
    """One slurmd per node, in the node's network namespace and a new UTS and mount namespace.

    In its mount namespace the node sees the test bed's hosts file, its own scratch, the test bed's configuration
    at ``/etc/slurm`` and, with proctrack/cgroup, its own freezer cgroup at the freezer's mount point; the machine's
    own files stay as they are. ``nsenter --net`` rather than ``ip netns exec``, which remounts /sys and leaves slurmd
    without /sys/fs/cgroup.
    """
    for node in layout.node_names:
        if alive(layout.run / f"slurmd-{node}.pid"):
            continue
        for local in (layout.node_scratch(node), layout.node_job_tmp(node)):
            _empty(local)  # a node that boots has an empty /tmp: nothing of an earlier session's users
        mounts = [(f"{layout.etc}/hosts", "/etc/hosts"), (str(layout.etc), str(ETC_SLURM)),
                  (str(layout.node_scratch(node)), str(layout.scratch_mount)),
                  (str(layout.node_job_tmp(node)), str(layout.job_tmp_mount))]
        if layout.proctrack == "cgroup":
            _make_freezer_dir(layout, node)
            mounts.append((str(layout.freezer_dir(node)), str(tc.FREEZER)))
        script = " && ".join([f"hostname {node}", *(f"mount --bind {src} {dst}" for src, dst in mounts),
                              f"exec slurmd -N {node}"])
        _sh(["nsenter", f"--net=/run/netns/{layout.netns(node)}", "unshare", "--uts", "--mount", "sh", "-c", script],
            env=client_env(layout))


def nodes_idle(layout: tc.Layout) -> bool:
    """Whether every node of the layout reports idle (or allocated/mixed: busy but up)."""
    proc = _sh(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, env=client_env(layout))
    states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
    return all(states.get(n, "").rstrip("*") in ("idle", "mixed", "allocated") for n in layout.node_names)


def start(layout: tc.Layout) -> None:
    """Start (or complete) the test bed; return when every node is up."""
    if os.geteuid() != 0:
        raise TestbedError("the test bed needs root (it starts daemons and creates network namespaces)")
    for tool in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "sacctmgr", "nsenter"):
        if shutil.which(tool) is None:
            raise TestbedError(f"{tool} not found: install HVDFLOW_TESTBED_APT_PACKAGES (scripts/lib.sh)")
    if not ETC_SLURM.is_dir():
        raise TestbedError(f"{ETC_SLURM} is missing (the nodes mount the test bed's configuration there): reinstall "
                           "slurm-client")
    for d in (layout.run, layout.log, layout.base / "state", layout.base / "spool"):
        d.mkdir(parents=True, exist_ok=True)
    running = any(alive(p) for p in [*layout.run.glob("*.pid"), layout.mysql / "mariadbd.pid"])
    _write_configs(layout, running)
    _start_munge(layout)
    _make_node_dirs(layout)
    _start_network(layout)
    _start_mariadb(layout)
    _start_slurmdbd(layout)
    if not alive(layout.run / "slurmctld.pid"):
        _sh(["slurmctld"], env=client_env(layout))
    _wait_for("slurmctld", lambda: _sh(["scontrol", "ping"], check=False, env=client_env(layout)).returncode == 0, 30,
              layout.log / "slurmctld.log")
    _start_nodes(layout)
    _wait_for("the nodes", lambda: nodes_idle(layout), 60, layout.log / f"slurmd-{layout.node_names[0]}.log")


def _terminate(pid_files: Sequence[Path], grace: float = 15.0) -> None:
    pids = [pid for pid in (alive(p) for p in pid_files) if pid]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pid_files):
        time.sleep(0.2)
    for path in pid_files:
        pid = alive(path)
        if pid:
            os.kill(pid, signal.SIGKILL)


def stop(layout: tc.Layout) -> None:
    """Stop what :func:`start` started, and remove what it created in the network."""
    if os.geteuid() != 0:
        raise TestbedError("stopping the test bed needs root")
    if alive(layout.run / "slurmctld.pid"):
        _sh(["scancel", "--full", f"--partition={tc.PARTITION}"], check=False, env=client_env(layout))
    run = layout.run
    _terminate(sorted(run.glob("slurmd-*.pid")))
    _terminate([run / "slurmctld.pid"])
    _terminate([run / "slurmdbd.pid"])
    _terminate([layout.mysql / "mariadbd.pid"])
    munged = run / "munged.started"
    if munged.exists():
        _terminate([Path(munged.read_text().strip())])
        munged.unlink()
    record = run / "net.created"
    if record.exists():
        entries = record.read_text().split()
        for entry in [e for e in entries if e.startswith("link:")][::-1]:  # veths first, so their peers go at once
            _sh(["ip", "link", "del", entry.split(":", 1)[1]], check=False)
        for entry in [e for e in entries if e.startswith("netns:")]:
            _sh(["ip", "netns", "del", entry.split(":", 1)[1]], check=False)
        record.unlink()
    _remove_freezer_dirs(layout)


def status(layout: tc.Layout) -> dict[str, Optional[int]]:
    """The pid of each daemon the test bed runs, or None."""
    names = ["slurmdbd", "slurmctld", *[f"slurmd-{n}" for n in layout.node_names]]
    return {"mariadbd": alive(layout.mysql / "mariadbd.pid"), **{name: alive(layout.run / f"{name}.pid") for name in names}}
