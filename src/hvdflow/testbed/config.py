"""The configuration files of the test-bed Slurm cluster (:mod:`hvdflow.testbed`), rendered from its layout.

One controller (slurmctld, slurmdbd, MariaDB) on the bridge address, and nodes ``n1..nN`` each with its own network,
UTS and mount namespace, address, hostname, fake GPUs and node-local scratch directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hvdflow.errors import HvdflowError

CLUSTER = "hvdflow-testbed"
NETWORK = "10.213.47"
BRIDGE = "hvdtb0"
CONTROLLER_ADDR = f"{NETWORK}.1"
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
MARIADB_PORT = 13306
DB_USER = "slurm"
DB_PASSWORD = "hvdflow-testbed"  # MariaDB listens on 127.0.0.1 only, in a datadir of the test bed's own
PARTITION = "debug"
PROCTRACK = ("linuxproc", "cgroup")
"""How slurmd tracks a job's processes: ``linuxproc`` (signals reach every process of a task) or ``cgroup`` (a freezer
cgroup per step, as most production clusters run it; signals other than SIGKILL reach only each task's top process)."""
FREEZER = Path("/sys/fs/cgroup/freezer")


@dataclass(frozen=True)
class Layout:
    """Where the test bed keeps its files, how many nodes it has and what each one offers."""

    base: Path
    nodes: int = 2
    cpus_per_node: int = 4
    gpus_per_node: int = 4
    memory_mb: int = 8000
    controller_host: str = "localhost"
    proctrack: str = "linuxproc"

    def __post_init__(self) -> None:
        if self.proctrack not in PROCTRACK:
            raise HvdflowError(f"test-bed proctrack {self.proctrack!r}: expected one of {', '.join(PROCTRACK)}")

    @property
    def node_names(self) -> list[str]:
        """``n1`` .. ``nN``."""
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def node_addr(self, node: str) -> str:
        """The node's address on the bridge."""
        return f"{NETWORK}.{10 + int(node[1:])}"

    def netns(self, node: str) -> str:
        """The name of the node's network namespace."""
        return f"hvdtb-{node}"

    def freezer_dir(self, node: str) -> Path:
        """The node's own freezer cgroup, mounted over :data:`FREEZER` in its mount namespace (proctrack/cgroup)."""
        return FREEZER / f"hvdtb-{node}"

    @property
    def scratch_mount(self) -> Path:
        """The node-local scratch path every node sees (its own directory mounted there)."""
        return self.base / "scratch"

    def node_scratch(self, node: str) -> Path:
        """The directory mounted at :attr:`scratch_mount` in ``node``."""
        return self.base / "nodes" / node / "scratch"

    def gpu_dir(self, node: str) -> Path:
        """Where the node's fake GPU device files are (character devices 195:N, as NVIDIA's)."""
        return self.base / "nodes" / node / "dev"

    @property
    def mysql(self) -> Path:
        """MariaDB's directory (owned by mysql): datadir, socket, pid file and log."""
        return self.base / "mysql"

    @property
    def etc(self) -> Path:
        """The directory of the rendered configuration files."""
        return self.base / "etc"

    @property
    def run(self) -> Path:
        """Pid files and the record of created network objects."""
        return self.base / "run"

    @property
    def log(self) -> Path:
        """Daemon logs."""
        return self.base / "log"


def slurm_conf(layout: Layout) -> str:
    """``slurm.conf``: cons_tres with fake GPUs, accounting through slurmdbd, finished jobs kept 5 min in squeue, a
    requeued job restarting after 10 s (``cred_expire``; 120 s by default), and the layout's process tracking."""
    b = layout.base
    nodes = "\n".join(
        f"NodeName={n} NodeAddr={layout.node_addr(n)} NodeHostname={n} CPUs={layout.cpus_per_node} "
        f"RealMemory={layout.memory_mb} Gres=gpu:{layout.gpus_per_node} State=UNKNOWN"
        for n in layout.node_names
    )
    return f"""# hvdflow test-bed cluster: rendered by hvdflow.testbed.config; do not edit.
ClusterName={CLUSTER}
SlurmctldHost={layout.controller_host}({CONTROLLER_ADDR})
SlurmctldPort={SLURMCTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
SlurmUser=root
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/slurmd-%n
SlurmctldPidFile={b}/run/slurmctld.pid
SlurmdPidFile={b}/run/slurmd-%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd-%n.log
ProctrackType=proctrack/{layout.proctrack}
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=300
KillWait=5
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={SLURMDBD_PORT}
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
GresTypes=gpu
{nodes}
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def gres_conf(layout: Layout) -> str:
    """``gres.conf``: each node's GPUs as character devices of its own."""
    last = layout.gpus_per_node - 1
    return "".join(f"NodeName={n} Name=gpu File={layout.gpu_dir(n)}/nvidia[0-{last}]\n" for n in layout.node_names)


def cgroup_conf(layout: Layout) -> str:
    """``cgroup.conf``: cgroup v1 at the default mount point, which in each node's mount namespace holds only that
    node's own freezer cgroup (read only when ``proctrack`` is ``cgroup``)."""
    return ("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nCgroupMountpoint=/sys/fs/cgroup\n"
            "ConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n")


def slurmdbd_conf(layout: Layout) -> str:
    """``slurmdbd.conf`` (mode 0600, owned by SlurmUser)."""
    b = layout.base
    return f"""AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={SLURMDBD_PORT}
SlurmUser=root
LogFile={b}/log/slurmdbd.log
PidFile={b}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={MARIADB_PORT}
StorageUser={DB_USER}
StoragePass={DB_PASSWORD}
StorageLoc=slurm_acct_db
"""


def mariadb_conf(layout: Layout) -> str:
    """MariaDB's options: a private datadir and socket, loopback only."""
    m = layout.mysql
    return f"""[mysqld]
datadir={m}/data
socket={m}/mysqld.sock
pid-file={m}/mariadbd.pid
log-error={m}/mariadbd.log
port={MARIADB_PORT}
bind-address=127.0.0.1
skip-name-resolve
innodb_buffer_pool_size=64M
innodb_lock_wait_timeout=900
[client]
socket={m}/mysqld.sock
"""


def hosts_file(layout: Layout) -> str:
    """The ``/etc/hosts`` the nodes see: the controller and every node by name."""
    lines = ["127.0.0.1 localhost", f"{CONTROLLER_ADDR} {layout.controller_host}"]
    lines += [f"{layout.node_addr(n)} {n}" for n in layout.node_names]
    return "\n".join(lines) + "\n"
