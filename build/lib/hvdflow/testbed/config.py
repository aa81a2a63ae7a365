"""The configuration files of the test-bed Slurm cluster (:mod:`hvdflow.testbed`), rendered from its layout.

One controller (slurmctld, slurmdbd, MariaDB) on the bridge address, and nodes ``n1..nN`` each with its own network,
UTS and mount namespace, address, hostname, fake GPUs of two GRES types, node-local scratch directory, a
second interface ``ib0`` on a network of the nodes alone, and a per-job ``$TMPDIR`` on its local disk (task prolog).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hvdflow.errors import HvdflowError

CLUSTER = "hvdflow-testbed"
NETWORK = "10.213.47"
BRIDGE = "hvdtb0"
FAST_NETWORK = "10.213.48"
FAST_BRIDGE = "hvdtb1"
FAST_INTERFACE = "ib0"
"""Each node's second interface, on a network of the nodes alone (the controller has no address there): the ranks'
high-speed network, as InfiniBand's ib0 on a real cluster."""
CONTROLLER_ADDR = f"{NETWORK}.1"
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
MARIADB_PORT = 13306
DB_USER = "slurm"
DB_PASSWORD = "hvdflow-testbed"  # MariaDB listens on 127.0.0.1 only, in a datadir of the test bed's own
PARTITION = "debug"
OTHER_PARTITION = "accel"
"""A second partition over the same nodes, named as no shipped profile names one, with a time limit: what
``hvdflow site new`` is tested against."""
OTHER_PARTITION_LIMIT = "04:00:00"
GPU_TYPES = ("a100", "h100")
"""Each node's GPUs are half of one GRES type and half of the other (``Gres=gpu:a100:2,gpu:h100:2``): a job may ask
any type (``gpu:4``) or one (``gpu:a100:2``)."""
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
        if self.gpus_per_node % len(GPU_TYPES):
            raise HvdflowError(f"test-bed gpus_per_node {self.gpus_per_node}: must split evenly over {GPU_TYPES}")

    def gpu_ranges(self) -> list[tuple[str, int, int]]:
        """Each GPU type of a node with its first and last device number."""
        each = self.gpus_per_node // len(GPU_TYPES)
        return [(kind, i * each, (i + 1) * each - 1) for i, kind in enumerate(GPU_TYPES)]

    @property
    def node_names(self) -> list[str]:
        """``n1`` .. ``nN``."""
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def node_addr(self, node: str) -> str:
        """The node's address on the bridge."""
        return f"{NETWORK}.{10 + int(node[1:])}"

    def fast_addr(self, node: str) -> str:
        """The node's address on the second network (:data:`FAST_INTERFACE`)."""
        return f"{FAST_NETWORK}.{10 + int(node[1:])}"

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
    def job_tmp_mount(self) -> Path:
        """Where every node sees its own per-job temporary folders (``$TMPDIR``, made by the task prolog)."""
        return self.base / "localtmp"

    def node_job_tmp(self, node: str) -> Path:
        """The directory mounted at :attr:`job_tmp_mount` in ``node``."""
        return self.base / "nodes" / node / "localtmp"

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
    gres = ",".join(f"gpu:{kind}:{last - first + 1}" for kind, first, last in layout.gpu_ranges())
    nodes = "\n".join(
        f"NodeName={n} NodeAddr={layout.node_addr(n)} NodeHostname={n} CPUs={layout.cpus_per_node} "
        f"RealMemory={layout.memory_mb} Gres={gres} State=UNKNOWN"
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
AccountingStorageTRES=gres/gpu,{','.join(f'gres/gpu:{kind}' for kind in GPU_TYPES)}
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
TaskProlog={b}/etc/task_prolog.sh
Epilog={b}/etc/epilog.sh
GresTypes=gpu
{nodes}
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName={OTHER_PARTITION} Nodes=ALL Default=NO MaxTime={OTHER_PARTITION_LIMIT} State=UP
"""


def gres_conf(layout: Layout) -> str:
    """``gres.conf``: each node's GPUs as character devices of its own, of two types."""
    return "".join(f"NodeName={n} Name=gpu Type={kind} File={layout.gpu_dir(n)}/nvidia[{first}-{last}]\n"
                   for n in layout.node_names for kind, first, last in layout.gpu_ranges())


def task_prolog(layout: Layout) -> str:
    """The task prolog (run as the job's user before each task): a ``$TMPDIR`` of the job's own on the node's local
    disk, as many sites give one."""
    folder = f"{layout.job_tmp_mount}/job-$SLURM_JOB_ID"
    return f"#!/bin/sh\nmkdir -p -m 0700 {folder} && echo export TMPDIR={folder}\n"


def epilog(layout: Layout) -> str:
    """The epilog (root, on each node of a job once it ends): the job's ``$TMPDIR`` removed."""
    return f"#!/bin/sh\nrm -rf {layout.job_tmp_mount}/job-$SLURM_JOB_ID\nexit 0\n"


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
