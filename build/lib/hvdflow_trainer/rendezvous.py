"""Horovod's Gloo rendezvous server (its own handler and store), bound to one address, run once per job before any
rank calls ``hvd.init()``.

The port is written to a file (atomically) that the launcher watches; the server runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import List, Optional

from hvdflow_wire.replace import replaced


def serve(port_file: str, address: str) -> None:
    """Start Horovod's rendezvous server on ``address`` only, publish its port in ``port_file`` and block until
    SIGTERM or SIGINT.

    Horovod's own ``RendezvousServer`` listens on every interface; its store has no authentication, so this one
    serves Horovod's handler from the one address the ranks use (loopback on one machine, the cluster's network
    under Slurm), and a host on another network cannot reach it.
    """
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    httpd = RendezvousHTTPServer((address, 0), RendezvousHandler, 0)
    port = httpd.server_address[1]
    listener = threading.Thread(target=httpd.serve_forever, daemon=True)
    listener.start()
    with replaced(port_file) as handle:
        handle.write(str(port))
    print(f"rendezvous server listening on {address}:{port}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    httpd.shutdown()
    listener.join()


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.rendezvous --port-file FILE --address ADDRESS``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port-file", required=True, help="file to write the listening port to")
    parser.add_argument("--address", required=True, help="the one address to listen on")
    args = parser.parse_args(argv)
    serve(args.port_file, args.address)


if __name__ == "__main__":
    main()
