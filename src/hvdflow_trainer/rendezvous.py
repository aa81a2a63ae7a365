"""Horovod's own Gloo rendezvous server, run once per job before any rank calls ``hvd.init()``.

The port is written to a file (atomically) that the launcher watches; the server runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import List, Optional

from hvdflow_wire.replace import replaced


def serve(port_file: str) -> None:
    """Start the server, publish its port in ``port_file`` and block until SIGTERM or SIGINT."""
    from horovod.runner.http.http_server import RendezvousServer

    server = RendezvousServer(verbose=0)
    port = server.start()
    with replaced(port_file) as handle:
        handle.write(str(port))
    print(f"rendezvous server listening on port {port}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    server.stop()


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.rendezvous --port-file FILE``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port-file", required=True, help="file to write the listening port to")
    args = parser.parse_args(argv)
    serve(args.port_file)


if __name__ == "__main__":
    main()
