"""Elastic Horovod ranks without ssh: Horovod's driver runs in the image, this launcher starts and watches the workers.

The host has no Horovod (hvdflow's host side is Snakemake, udocker and PyYAML; ``pip install horovod`` compiles), so
the driver, Horovod's own ``ElasticDriver`` and elastic rendezvous server, runs from the image like the ranks
(``python -m hvdflow_trainer.elastic_driver``, same Horovod as the workers). It reaches this launcher through files in
``<logs>/elastic/`` (each defined in :mod:`hvdflow_wire.elastic`): this side writes which hosts may run workers
(``hosts.json``, from a :class:`Workers` source: the machine's slots, or the Slurm job's healthy nodes), starts a
worker for each request (a local process, or a job step on its node) and reports each exit.

What happens, in one line of the rule's log each: a worker started or gone (its exit status, host, log), the hosts
that may run workers changed, and each new membership (rank 0 of it writes ``membership.jsonl``: epoch, step, ranks,
hosts). The run ends when the driver does; it succeeded only if the driver says the last workers all succeeded. A
worker that exits 0 without its rank's result (written after the last epoch) failed: Horovod's elastic wrapper
swallows errors that are not its own, and udocker can report a rank killed in the container as status 0. The driver
is told :data:`EARLY_EXIT` for it, and the log names it. A stop signal (Ctrl-C here, or Slurm's warning that
reaches the workers) makes the ranks checkpoint and exit with STOPPED_EXIT together; no worker is started after that.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from hvdflow.errors import LaunchError
from hvdflow.launch.request import ElasticLaunch, LaunchRequest
from hvdflow.launch.supervise import (
    ProgressFollower,
    StopRelay,
    Supervised,
    exit_text,
    log_tail,
    note,
    signal_group,
    start,
    stop,
    stopped_error,
)
from hvdflow.runtime import Runtime
from hvdflow_runstate import STOPPED_EXIT
from hvdflow_wire.elastic import (
    DriverResult,
    EpochEnd,
    Event,
    EventAppender,
    EventReader,
    ExitAppender,
    Hosts,
    MembershipReader,
    RequestReader,
    Slot,
    StartWorker,
    WorkerExit,
)
from hvdflow_wire.rank import RankResult
from hvdflow_wire.values import to_json

HOSTS_EVERY = 1.0
"""Seconds between two reads of the worker source's hosts (Horovod's driver polls the file every second)."""
MEMBERSHIP = "membership.jsonl"
EVENTS = "events.jsonl"
EARLY_EXIT = 70
"""The status Horovod's driver is told for a worker that exited 0 without its result (it then counts as failed)."""


class Workers(Protocol):
    """Where workers may run and how one is started: on this machine, or as a Slurm job step on its node."""

    def hosts(self) -> dict[str, int]:
        """``{host: slots}`` that may run workers now."""

    def start(self, worker: int, slot: Slot, argv: Sequence[str], env: Mapping[str, str], log: Path) -> Supervised:
        """Start ``argv`` as one worker for Horovod's ``slot`` (hostname, ranks) with ``env``; its output in ``log``."""

    def drop(self, process: Supervised) -> None:
        """End a worker Horovod's driver gave up at once, without the stop signal (which would stop the whole run:
        the ranks agree on a stop)."""


@dataclass
class _Channel:
    """This side of the driver's files (:mod:`hvdflow_wire.elastic`)."""

    folder: Path

    def __post_init__(self) -> None:
        self.requests = RequestReader(str(self.folder / "requests.jsonl"))
        """The driver's requests written since the last call of ``new``."""
        self.exits = ExitAppender(str(self.folder / "exits.jsonl"))

    def reset(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in ("hosts.json", "requests.jsonl", "exits.jsonl", "result.json"):
            (self.folder / name).unlink(missing_ok=True)

    def write_hosts(self, hosts: Mapping[str, int]) -> None:
        Hosts(dict(hosts)).write(str(self.folder / "hosts.json"))

    def exited(self, worker: int, code: int) -> None:
        self.exits.append(WorkerExit(worker, code, int(time.time())))

    def result(self) -> Optional[DriverResult]:
        """What the driver wrote last; None if it wrote nothing."""
        path = self.folder / "result.json"
        return DriverResult.read(str(path)) if path.exists() else None


@dataclass
class _Worker:
    process: Supervised
    slot: Slot

    @property
    def where(self) -> str:
        return f"worker {self.process.label} (rank {self.slot.rank} of {self.slot.size} on {self.slot.hostname})"


@dataclass
class ElasticRun:
    """The state of one elastic launch: the workers, the events and what the rule's log has been told."""

    logs: Path
    progress: Optional[Path]
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.memberships = MembershipReader(str(self.logs / MEMBERSHIP))
        """The memberships and epoch ends rank 0 wrote since the last call of ``new``."""
        self.event_lines = EventAppender(str(self.logs / EVENTS))

    def event(self, kind: str, line: Optional[str], **facts: Any) -> None:
        """Record one event (``events.jsonl``; a ``unix`` among ``facts`` is its time) and say ``line`` in the rule's
        log."""
        record = Event(float(facts.pop("unix", time.time())), kind, facts)
        self.events.append(record)
        self.event_lines.append(record)
        if line is not None:
            note(self.progress, f"hvdflow: elastic: {line}")


@dataclass(frozen=True)
class ElasticJob:
    """What an elastic run's driver and workers need, made from the launch request where they run (this machine, or
    the Slurm job's nodes after staging): ``command`` (each worker's, without ``--membership``), its ranks' results in
    ``out_dir``, ``paths`` bound into the driver's container, ``address`` and ``iface`` where the workers reach the
    driver, the rule's ``progress`` log."""

    command: Sequence[str]
    logs: Path
    out_dir: Path
    paths: Sequence[Path]
    elastic: ElasticLaunch
    address: str
    iface: str
    timeout: Optional[float]
    progress: Optional[Path]

    @classmethod
    def of(cls, request: LaunchRequest, command: Sequence[str], paths: Sequence[Path], address: str,
           iface: str) -> "ElasticJob":
        """The elastic run of ``request`` (whose ``elastic`` is set) with its workers' ``command`` and binds."""
        assert request.elastic is not None
        job = request.job
        return cls(command, job.logs_dir, job.out_dir, paths, request.elastic, address, iface, request.timeout,
                   request.progress)


def launch_elastic(runtime: Runtime, workers: Workers, job: ElasticJob) -> list[Event]:
    """Run ``job`` as an elastic Horovod job set for its ranks; the events, in order.

    It starts with the run's ranks, or with every slot ``workers`` offers if fewer (Horovod's driver waits for at
    least ``min_ranks``), and grows up to ``max_ranks`` as slots come. Each worker's command gets ``--membership
    <logs>/membership.jsonl``. Raises RunStopped when the ranks stopped on a signal after a checkpoint, LaunchError
    when the driver gives up (fewer than ``min_ranks`` left for its timeout, a worker failing at once everywhere) or a
    worker exited 0 early; every worker and the driver are stopped whatever happens.
    """
    logs = job.logs
    logs.mkdir(parents=True, exist_ok=True)
    for stale in (MEMBERSHIP, EVENTS):
        (logs / stale).unlink(missing_ok=True)
    channel = _Channel(logs / "elastic")
    channel.reset()
    run = ElasticRun(logs, job.progress)
    hosts = workers.hosts()
    channel.write_hosts(hosts)
    run.event("hosts", f"hosts {describe_hosts(hosts)}", hosts=hosts)
    settings = job.elastic.settings
    first = max(settings.min_ranks, min(job.elastic.ranks, sum(hosts.values())))
    driver = start("elastic driver", runtime.command(
        ["python3", "-m", "hvdflow_trainer.elastic_driver", "--channel", str(channel.folder), "--address", job.address,
         "--iface", job.iface, *settings.driver_args(first)], {}, [logs, *job.paths]), logs / "elastic-driver.log",
        runtime.process_env())
    loop = _ElasticLoop(job, workers, channel, run, driver, hosts)
    try:
        loop.run()
    finally:
        stop([w.process for w in loop.running.values()] + [driver])
    return finish(run, channel, driver, loop.relay)


class _ElasticLoop:
    """The launcher's side of a running elastic job, one pass every 0.2 s until it ends: the driver's requests
    started, exited workers reported, rank 0's memberships said, the hosts re-read, a stop signal passed on."""

    def __init__(self, job: ElasticJob, workers: Workers, channel: _Channel, run: ElasticRun, driver: Supervised,
                 hosts: dict[str, int]) -> None:
        self.job, self.workers, self.channel, self.run_state, self.driver = job, workers, channel, run, driver
        self.argv = [*job.command, "--membership", str(job.logs / MEMBERSHIP)]
        self.running: dict[int, _Worker] = {}
        self.follower: Optional[ProgressFollower] = None
        self.deadline = None if job.timeout is None else time.monotonic() + job.timeout
        self.relay = StopRelay(driver.interrupts_before)
        self.stopping = False
        self.hosts, self.hosts_read = hosts, time.monotonic()

    def run(self) -> None:
        """Pass after pass until the run ends; LaunchError past the job's timeout."""
        while True:
            self.start_requested()
            self.report_exits()
            self.follow_memberships()
            # the end: the driver is done and its workers are gone; or the ranks stopped on a signal (the driver
            # would wait for new slots); or the driver died, and its workers would wait for it forever
            if (not self.running and (self.stopping or self.driver.proc.poll() is not None)) or \
                    self.driver.proc.poll() not in (None, 0):
                return
            now = time.monotonic()
            self.refresh_hosts(now)
            self.relay_stop()
            if self.deadline is not None and now > self.deadline:
                raise LaunchError(f"the elastic run was still going after {self.job.timeout:.0f} s; stopped. "
                                  f"Logs: {self.job.logs}")
            time.sleep(0.2)

    def start_requested(self) -> None:
        """Start the workers the driver asked for (none once the run is stopping) and drop those it gave up."""
        for request in self.channel.requests.new():
            if isinstance(request, StartWorker):
                worker, slot = request.worker, request.slot
                if self.stopping:  # the run is stopping on a signal: no new worker
                    self.channel.exited(worker, STOPPED_EXIT)
                    continue
                env = {**request.env, "HVDFLOW_ELASTIC_WORKER": str(worker)}
                process = self.workers.start(worker, slot, self.argv, env, self.job.logs / f"worker-{worker}.log")
                self.running[worker] = _Worker(process, slot)
                self.run_state.event("start", f"started {self.running[worker].where}", worker=worker,
                                     slot=to_json(slot))
            elif request.worker in self.running:
                self.workers.drop(self.running[request.worker].process)

    def report_exits(self) -> None:
        """Tell the driver of each worker that exited, and the rule's log."""
        for worker, w in list(self.running.items()):
            code = w.process.proc.poll()
            if code is None:
                continue
            del self.running[worker]
            if code == 0 and not finished_training(w, self.job.out_dir):
                # a worker killed inside udocker can exit 0, and Horovod's elastic wrapper returns quietly from
                # errors that are not its own: without its result this worker failed, and Horovod is told so
                code = EARLY_EXIT
            self.channel.exited(worker, code)
            what = ("exited 0 without finishing the training (killed in its container, or an error Horovod's "
                    "elastic wrapper swallowed)" if code == EARLY_EXIT else f"exited with {exit_text(code)}")
            self.run_state.event("exit", f"{w.where} {what}" + ("" if code in (0, STOPPED_EXIT)
                                                                  else f"; log {w.process.log}"),
                                 worker=worker, code=code, host=w.slot.hostname, why=what)
            # the ranks agreed to stop after the same step: the others are saving or exiting too
            self.stopping = self.stopping or code == STOPPED_EXIT

    def follow_memberships(self) -> None:
        """Say each new membership and epoch end rank 0 wrote; copy the progress lines of the current rank 0."""
        for record in self.run_state.memberships.new():
            facts = to_json(record)
            del facts["kind"]
            if isinstance(record, EpochEnd):
                self.run_state.event("epoch", None, **facts)
                continue
            self.run_state.event("membership", f"{record.ranks} ranks on {', '.join(sorted(set(record.hosts)))}"
                                 f" from epoch {record.epoch} step {record.step}", **facts)
            leader = self.job.logs / f"worker-{record.worker}.log"
            self.follower = ProgressFollower(leader, self.job.progress) if leader.exists() else self.follower
        if self.follower is not None:
            self.follower()

    def refresh_hosts(self, now: float) -> None:
        """The worker source's hosts re-read every :data:`HOSTS_EVERY` seconds, and the driver told of a change."""
        if now - self.hosts_read < HOSTS_EVERY:
            return
        self.hosts_read, fresh = now, self.workers.hosts()
        if fresh != self.hosts:
            self.hosts = fresh
            self.channel.write_hosts(fresh)
            self.run_state.event("hosts", f"hosts now {describe_hosts(fresh)}", hosts=fresh)

    def relay_stop(self) -> None:
        """A stop signal counted here goes to the local ranks, which checkpoint and stop together (Slurm steps get
        scancel's signals)."""
        relayed = self.relay.due()
        if relayed is not None:
            self.stopping = True
            for w in self.running.values():
                if w.process.rank:
                    signal_group(w.process.proc, relayed)


def finished_training(worker: _Worker, out_dir: Path) -> bool:
    """Whether a worker wrote its rank's result (after the last epoch: the trainer writes it only then)."""
    for path in out_dir.glob("rank-*.json"):
        if str(RankResult.read(str(path)).elastic_worker) == worker.process.label:
            return True
    return False


def finish(run: ElasticRun, channel: _Channel, driver: Supervised, relay: StopRelay) -> list[Event]:
    """The run's events if the driver says the last workers succeeded; RunStopped or LaunchError otherwise."""
    exits = [e.facts for e in run.events if e.event == "exit"]
    if any(e["code"] == STOPPED_EXIT for e in exits):
        raise stopped_error("the elastic run's ranks", relay, f"Logs: {run.logs}")
    result = channel.result()
    if result is None or not result.ok:
        failed = [e for e in exits if e["code"] != 0]
        last = (f"; the last failure: worker {failed[-1]['worker']} on {failed[-1]['host']} {failed[-1]['why']} "
                f"(log {run.logs / ('worker-%s.log' % failed[-1]['worker'])})" if failed else "")
        why = result.error if result and result.error else "a worker of the last membership failed"
        raise LaunchError(f"the elastic run failed: {why}{last}. Driver log: {driver.log}\n{log_tail(driver.log)}")
    return run.events


def describe_hosts(hosts: Mapping[str, int]) -> str:
    """``n1 (2 slots), n2 (1 slot)``; ``none`` for none."""
    return ", ".join(f"{h} ({s} slot{'s' if s != 1 else ''})" for h, s in sorted(hosts.items())) or "none"


@dataclass
class LocalWorkers:
    """Workers on this machine: ``slots`` one-slot hosts named ``<name>-<i>`` (so that Horovod, which blacklists a
    whole host after a failure, drops only the failed worker's slot and can take it back after the cooldown)."""

    runtime: Runtime
    name: str
    slots: int
    cores: Sequence[Optional[Sequence[int]]]
    extra_env: Mapping[str, str]
    binds: Sequence[Path]

    def hosts(self) -> dict[str, int]:
        return {f"{self.name}-{i}": 1 for i in range(self.slots)}

    def start(self, worker: int, slot: Slot, argv: Sequence[str], env: Mapping[str, str], log: Path) -> Supervised:
        index = int(slot.hostname.rsplit("-", 1)[1])
        command = self.runtime.command(argv, {**env, **self.extra_env}, self.binds)
        return start(str(worker), command, log, self.runtime.process_env(), rank=True, cores=self.cores[index])

    def drop(self, process: Supervised) -> None:
        signal_group(process.proc, signal.SIGKILL)



def timeline(events: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, object]]]:
    """The run record's ``elastic`` section from a launch's events (``events.jsonl``): each membership (seconds since
    the start, epoch and step it began at, ranks, hosts, and why it changed: the worker exits and host changes since
    the one before, and the workers started for it) and each epoch's end (ranks, samples, seconds). Each event as
    its line of ``events.jsonl`` (:meth:`hvdflow_wire.elastic.Event.to_json`)."""
    memberships: list[dict[str, object]] = []
    epochs: list[dict[str, object]] = []
    start = float(events[0]["unix"]) if events else 0.0
    why: list[str] = []
    for e in events:
        at = round(float(e["unix"]) - start, 3)
        if e["event"] == "membership":
            memberships.append({"seconds": at, "epoch": e["epoch"], "step": e["step"], "ranks": e["ranks"],
                                "hosts": sorted(set(e["hosts"])), "reason": "; ".join(why) or "start"})
            why = []
        elif e["event"] == "epoch":
            epochs.append({"seconds": at, "epoch": e["epoch"], "ranks": e["ranks"], "samples": e["samples"],
                           "epoch_seconds": e["seconds"]})
        elif e["event"] == "exit" and e["code"] != 0:
            why.append(f"worker {e['worker']} on {e['host']} {e['why']}")
        elif e["event"] == "hosts" and memberships:
            why.append(f"hosts now {describe_hosts(e['hosts'])}")
        elif e["event"] == "start" and memberships:
            why.append(f"worker {e['worker']} started on {e['slot']['hostname']}")
    return {"memberships": memberships, "epochs": epochs}


def read_events(logs: Path) -> list[dict[str, Any]]:
    """The events of the last elastic launch whose logs are in ``logs``, each as its line of ``events.jsonl``."""
    return [event.to_json() for event in EventReader(str(logs / EVENTS)).new()]
