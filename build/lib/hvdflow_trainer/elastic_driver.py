"""Horovod's elastic driver without ssh or ``horovodrun``: run inside the image, workers started by hvdflow's launcher.

``python -m hvdflow_trainer.elastic_driver --channel DIR --address A --iface I --ranks N --min-ranks M --max-ranks X
--cooldown S --timeout T`` runs Horovod's own :class:`ElasticDriver` and its elastic rendezvous server (the image's
Horovod, the same as the workers'), but neither discovers hosts nor starts processes itself. Both go through files in
the channel folder ``DIR`` that hvdflow's launcher on the host (:mod:`hvdflow.launch.elastic`) keeps, each defined in
:mod:`hvdflow_wire.elastic`:

- ``hosts.json`` (launcher → driver, replaced atomically): ``{host: slots}`` that may run a worker now; read every
  second by the driver's discovery thread.
- ``requests.jsonl`` (driver → launcher, appended): a start of a worker with Horovod's variables for its slot, or a
  stop when the driver gives a worker up (its host was removed, blacklisted after a failure, or the job ends).
- ``exits.jsonl`` (launcher → driver, appended): a worker has gone, with its exit status.
- ``result.json`` (driver, last): the workers' exit codes of the final rendezvous and Horovod's error message.

The driver exits 0 when the last rendezvous' workers all succeeded, 1 otherwise. Horovod blacklists a host on which a
worker failed, and brings it back after ``--cooldown`` seconds if discovery still lists it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Dict, List, Optional, Tuple

from hvdflow_wire.elastic import (
    DriverResult,
    ExitReader,
    Hosts,
    RequestAppender,
    Slot,
    StartWorker,
    StopWorker,
    WorkerResult,
)

from .options import ElasticDriverOptions

POLL = 0.2
"""Seconds between two reads of the launcher's exits file."""


class FileDiscovery:
    """Horovod's host discovery from the launcher's ``hosts.json`` (``find_available_hosts_and_slots``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        """``{host: slots}`` as the launcher last wrote it."""
        return Hosts.read(self.path).slots


class LauncherChannel:
    """Starts and stops workers through the launcher's files and waits for their exits."""

    def __init__(self, folder: str) -> None:
        self.requests = RequestAppender(os.path.join(folder, "requests.jsonl"))
        self.exit_lines = ExitReader(os.path.join(folder, "exits.jsonl"))
        self.lock = threading.Lock()
        self.next_id = 0
        self.exits: Dict[int, Tuple[int, int]] = {}

    def start(self, slot: Slot, env: Dict[str, str]) -> int:
        """Ask the launcher to start a worker for ``slot``; its id."""
        with self.lock:
            worker, self.next_id = self.next_id, self.next_id + 1
            self.requests.append(StartWorker(worker, slot, env))
        return worker

    def stop(self, worker: int) -> None:
        """Ask the launcher to stop a worker (its process group)."""
        with self.lock:
            self.requests.append(StopWorker(worker))

    def _read_exits(self) -> None:
        for gone in self.exit_lines.new():
            self.exits[gone.worker] = (gone.code, gone.unix)

    def wait(self, worker: int, events: List[threading.Event]) -> Tuple[int, int]:
        """``(exit code, unix time)`` once the worker has gone; asks for a stop first when one of ``events`` is set."""
        stopped = False
        while True:
            with self.lock:
                self._read_exits()
                if worker in self.exits:
                    return self.exits[worker]
            if not stopped and any(event.is_set() for event in events):
                self.stop(worker)
                stopped = True
            time.sleep(POLL)


def slot_record(slot_info) -> Slot:  # type: ignore[no-untyped-def]
    """A Horovod ``SlotInfo`` as the wire's slot."""
    return Slot(hostname=slot_info.hostname, rank=slot_info.rank, size=slot_info.size, local_rank=slot_info.local_rank,
                local_size=slot_info.local_size, cross_rank=slot_info.cross_rank, cross_size=slot_info.cross_size)


def run_driver(args: ElasticDriverOptions) -> int:
    """Run the elastic job to its end; 0 when the final workers all succeeded."""
    from horovod.runner.elastic.driver import ElasticDriver
    from horovod.runner.elastic.rendezvous import create_rendezvous_handler
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousServer

    channel = LauncherChannel(args.channel)
    rendezvous = RendezvousServer(verbose=args.verbose)
    driver = ElasticDriver(rendezvous, FileDiscovery(os.path.join(args.channel, "hosts.json")), args.min_ranks,
                           args.max_ranks, timeout=args.timeout, cooldown_range=(args.cooldown, args.cooldown),
                           verbose=args.verbose)
    port = rendezvous.start(create_rendezvous_handler(driver))
    print("hvdflow elastic driver: rendezvous on %s:%d, %d to %d ranks" % (args.address, port, args.min_ranks,
                                                                           args.max_ranks), flush=True)
    run_env = {key: str(value) for key, value in
               create_run_env_vars(args.address, [args.iface], port, elastic=True).items()}
    error: Optional[str] = None
    try:
        driver.wait_for_available_slots(args.ranks)

        def create_worker(slot_info, events):  # type: ignore[no-untyped-def]
            env = dict(run_env, **{key: str(value) for key, value in create_slot_env_vars(slot_info).items()})
            worker = channel.start(slot_record(slot_info), env)
            return channel.wait(worker, list(events or []))

        driver.start(args.ranks, create_worker)
        results = driver.get_results()
        error = results.error_message
        workers = {name: WorkerResult(code, unix) for name, (code, unix) in results.worker_results.items()}
    except Exception as exc:  # Horovod's own errors: no slots in time, no host left to broadcast from
        error, workers = "%s: %s" % (type(exc).__name__, exc), {}
    finally:
        driver.stop(error)
    ok = error is None and bool(workers) and all(w.code == 0 for w in workers.values())
    DriverResult(error, workers, ok).write(os.path.join(args.channel, "result.json"))
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> None:
    """Command line (see the module's docstring)."""
    args = ElasticDriverOptions.parse(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                        format="%(asctime)s elastic driver %(levelname)s %(message)s")
    raise SystemExit(run_driver(args))


if __name__ == "__main__":
    main()
