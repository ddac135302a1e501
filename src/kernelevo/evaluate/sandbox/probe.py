"""Which confinement a child gets on this machine, asked of a child confined as the judge's are.

For `evolve`'s start-up line: the same calls as a real job's (confine.py),
in a small process that imports no torch, so a layer the machine refuses is
named before the first verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelevo.evaluate.sandbox import confine
from kernelevo.evaluate.sandbox.environment import candidate_environment


def describe_here(isolate_network: bool = True, timeout_s: float = 30.0) -> str:
    """The layers a child gets on this machine, from a child confined as the judge's are."""
    command = [sys.executable, "-c", "import sys; from kernelevo.evaluate.sandbox.probe "
               "import probe_main; probe_main(sys.argv[1] == '1')", "1" if isolate_network else "0"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        layers = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return "unknown (the probe failed)"
    return ", ".join(str(layer) for layer in layers)


def probe_main(isolate_network: bool) -> None:
    """A child confined like the judge's, printing its layers as JSON (for describe_here)."""
    scratch = Path(tempfile.mkdtemp(prefix="kernelevo-probe-"))
    try:
        environment = candidate_environment(os.environ)
        plan = confine.plan_for(scratch, environment)
        pid = os.fork()
        if pid == 0:
            network = confine.unshare_network() if isolate_network else "shared (not asked)"
            layers, _ = confine.confine(plan)
            print(json.dumps([f"network {network}"] + layers), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
