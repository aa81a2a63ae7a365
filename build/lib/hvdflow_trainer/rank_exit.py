"""How a rank's process ends: normally, or, while PyTorch's Gloo process group is alive, without the C++ teardown.

torch 2.6 (Debian's, in hvdflow-torch-cpu) with Gloo: a rank whose process group is never destroyed can die in the
interpreter's teardown with SIGABRT ("terminate called without an active exception": a joinable Gloo thread
destroyed), after all its outputs are written (CI, 2026-11-27: the DDP allreduce benchmark's rank 1, status 134);
one that calls ``destroy_process_group()`` now and then waited for the store's whole timeout (2026-11-27). Either
happens after the rank's last collective and its last file, so such a rank flushes its streams and logging and
leaves with ``os._exit`` and its own status: no destructor runs, and the status (0, the stop's 75, a user error's)
is the one the trainer chose. Every other process (Keras, Horovod, NCCL's group, which the trainer destroys) ends as
Python ends it.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Callable, NoReturn, Union


def gloo_group_alive() -> bool:
    """Whether this process holds an initialised ``torch.distributed`` group on the Gloo backend."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return False
    return str(dist.get_backend()) == "gloo"


def exit_status(code: Union[int, str, None]) -> int:
    """The process status ``sys.exit(code)`` gives: 0 for None, the int, or 1 after printing any other value."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _leave(status: int) -> NoReturn:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def run_rank(main: Callable[[], None]) -> None:
    """Run a rank's ``main()``; if a Gloo group is alive at its end, leave with its status by ``os._exit``."""
    try:
        main()
    except SystemExit as exc:
        if not gloo_group_alive():
            raise
        _leave(exit_status(exc.code))
    except BaseException:
        if not gloo_group_alive():
            raise
        traceback.print_exc()
        _leave(1)
    if gloo_group_alive():
        _leave(0)
