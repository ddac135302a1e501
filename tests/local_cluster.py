"""A real Dask cluster on 127.0.0.1: a scheduler and named workers, each its own process.

    with LocalDaskCluster(tmp_path, workers=2) as cluster:
        cluster.address            # tcp://127.0.0.1:PORT
        cluster.kill("w1")         # SIGKILL, as a lost host
        cluster.worker_names()     # {address: name} of the workers connected now

Workers run without a nanny, so a killed worker stays dead and its jobs can
only go to the others; each has one thread, so it judges one job at a time,
as a worker started per GPU does. Logs go to FOLDER/NAME.log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 120.0


class LocalDaskCluster:
    def __init__(self, folder: Path, workers: int = 2,
                 environment: dict[str, str] | None = None) -> None:
        self.folder = Path(folder)
        self.names = [f"w{i + 1}" for i in range(workers)]
        self.environment = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
                            "TRITON_INTERPRET": "1", **(environment or {})}
        self.processes: dict[str, subprocess.Popen] = {}
        self.address = ""

    def __enter__(self) -> "LocalDaskCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        scheduler_file = self.folder / "scheduler.json"
        scheduler_file.unlink(missing_ok=True)
        self._spawn("scheduler", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                    "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file))
        self.address = self._read_address(scheduler_file)
        for name in self.names:
            self._spawn(name, "distributed.cli.dask_worker", self.address, "--name", name,
                        "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host",
                        "127.0.0.1", "--local-directory", str(self.folder / name))
        self.wait_for_workers(len(self.names))

    def _spawn(self, name: str, module: str, *arguments: str) -> None:
        log = open(self.folder / f"{name}.log", "wb")
        self.processes[name] = subprocess.Popen([sys.executable, "-m", module, *arguments],
                                                cwd=ROOT, env=self.environment, stdout=log,
                                                stderr=subprocess.STDOUT)
        log.close()

    def _read_address(self, scheduler_file: Path) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.processes["scheduler"].poll() is not None:
                raise RuntimeError(f"the scheduler exited: {self.log('scheduler')[-2000:]}")
            try:
                return json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
        raise RuntimeError("the scheduler wrote no address in time")

    def wait_for_workers(self, count: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(self.worker_names()) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} workers did not join in time: "
                                   + " | ".join(self.log(n)[-800:] for n in self.names))
            time.sleep(0.5)

    def worker_names(self) -> dict[str, str]:
        """{address: name} of the workers connected to the scheduler now."""
        from distributed import Client

        with Client(self.address, timeout=30, set_as_default=False) as client:
            workers = client.scheduler_info(n_workers=-1).get("workers", {})
        return {address: str(info.get("name")) for address, info in workers.items()}

    def kill(self, name: str) -> None:
        process = self.processes[name]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """The workers, then the scheduler: SIGTERM, and SIGKILL what is left after a while.

        A worker whose scheduler is gone first hangs in its shutdown.
        """
        workers = [p for name, p in self.processes.items() if name != "scheduler"]
        self._terminate(workers)
        self._terminate([p for name, p in self.processes.items() if name == "scheduler"])

    @staticmethod
    def _terminate(processes: list[subprocess.Popen]) -> None:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15.0
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
