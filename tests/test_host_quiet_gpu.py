"""A launch-bound timing stands the judge's other jobs still, on a real GPU (-m gpu)."""

import subprocess
import sys
import time

import pytest

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.sandbox import quiet
from kernelevo.task import load_task
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu

GELU = ROOT / "examples" / "gelu"


class _Limit:
    def __init__(self) -> None:
        self.at = time.monotonic() + 600.0


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.parametrize("hold", [True, False])
def test_a_launch_bound_timing_stands_another_lanes_job_still_only_while_its_calls_are_timed(hold):
    # another lane's job: a process spinning on a core, registered as the sandbox registers its jobs
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    limit = _Limit()
    quiet.register(spinner.pid, limit)
    try:
        task = load_task(str(GELU / "task.py")).with_constants({"batch_size": 16, "dim": 1024})
        config = EvalConfig(timing=TimingConfig(baselines=("eager",), stored_baselines=False,
                                                hold_other_jobs=hold))
        verdict = Judge(task, config).evaluate(load_candidate(GELU / "triton_candidate.py"))
        assert verdict.reason == "passed", verdict.message
        said = [note for note in verdict.notes if "stood still" in note]
        if hold:
            assert said and "at most" in said[0], verdict.notes
        else:
            assert not said, said
        # going on as before, its limit where it was give or take the time it stood
        before = _cpu_ticks(spinner.pid)
        time.sleep(0.5)
        assert _cpu_ticks(spinner.pid) > before
        assert quiet.held() == [] and limit.at != float("inf")
    finally:
        quiet.unregister(spinner.pid)
        spinner.kill()
        spinner.wait()
