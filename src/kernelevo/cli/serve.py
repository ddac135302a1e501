"""`kernelevo serve`: keep judges warm per GPU and take jobs over HTTP on this machine."""

from __future__ import annotations

import os
import threading
from typing import Optional

import typer
from rich.markup import escape

from kernelevo.cli.options import console, fail
from kernelevo.errors import KernelEvoError


def serve_command(
    host: str = typer.Option("127.0.0.1", help="address to listen on; beyond loopback the "
                             "token must be set in KERNELEVO_SERVICE_TOKEN"),
    port: int = typer.Option(0, min=0, max=65535, help="port (0: any free one)"),
    gpus: Optional[str] = typer.Option(None, help="GPUs to serve, 'all' or indexes like 0,1 "
                                       "(default: all; none visible: the CPU)"),
    lanes: int = typer.Option(2, min=1, help="jobs judged at once per GPU; their timing "
                              "phases take turns (2 measured best on an H200)"),
    max_judges: int = typer.Option(8, min=1, help="warm judges kept (task, settings, GPU)"),
    max_timeout: float = typer.Option(900.0, min=0.001, help="the most seconds a job may set "
                                      "as its timeout_s or build_timeout_s"),
    read_timeout: float = typer.Option(10.0, min=0.001, help="seconds a client has to send "
                                       "its whole request"),
) -> None:
    """Judge jobs from `eval`, `compare` and the API with judges kept warm (a local service).

    Writes its address and token to service.json in the cache folder (mode 0600);
    `kernelevo eval` and `compare` then judge there unless given --local.
    """
    from kernelevo.evaluate.sandbox.jobs import start_forkserver
    from kernelevo.evaluate.remote.service import Service, ServiceSettings
    from kernelevo.evaluate.remote.client import TOKEN_ENV, cache_dir
    from kernelevo.run.signals import Terminated, sigterm_as_interrupt

    # The forkserver's imports (torch, inductor) run while this process does its own;
    # its Triton mode is guessed from the driver's device file (replaced if wrong).
    threading.Thread(target=start_forkserver, args=(not os.path.exists("/dev/nvidiactl"),),
                     name="kernelevo-forkserver", daemon=True).start()
    try:
        settings = ServiceSettings(host=host, port=port, gpus=_served_gpus(gpus), lanes=lanes,
                                   max_judges=max_judges, token=os.environ.get(TOKEN_ENV, ""),
                                   max_timeout_s=max_timeout, read_timeout_s=read_timeout)
        service = Service(settings, cache_dir())
    except (KernelEvoError, OSError) as exc:
        fail(exc)
    where = ", ".join(f"GPU {g}" for g in settings.gpus) or "the CPU"
    console.print(f"serving on {escape(service.url)} ({where}, {lanes} lane(s) each); "
                  f"address and token in {escape(str(service.record))}")
    try:
        with sigterm_as_interrupt():
            service.serve_forever()
    except (KeyboardInterrupt, Terminated):
        console.print("stopping: killing running jobs, closing the warm judges")
    finally:
        _exit_after(_STOP_GRACE_S)
        service.stop(exiting=True)


# Stopping kills every job's children and bounds each wait, so it takes about
# a second; past this, whatever still holds the process (a thread in a
# driver call) is not worth waiting for.
_STOP_GRACE_S = 10.0


def _exit_after(seconds: float) -> None:
    """End the process after `seconds` whatever is still running (a daemon timer)."""
    import sys

    def leave() -> None:
        print(f"kernelevo serve: still stopping after {seconds:g} s; exiting now",
              file=sys.stderr, flush=True)
        os._exit(1)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()


def _served_gpus(gpus: str | None) -> list[int]:
    import torch

    from kernelevo.run.setup import select_gpus

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count and gpus is None:
        return []
    return select_gpus("all" if gpus is None else gpus, count)
