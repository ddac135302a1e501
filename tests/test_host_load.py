"""bench/host_load.py on the CPU: each load runs beside the plain runs, stopped ones stand still,
and none is left behind."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# A stand-in for plain_timing.py --one: it reports the state of every load process of the bench
# (its siblings whose command lines hold the load's loop; a machine's other processes are not
# counted), and fixed times.
FAKE_PLAIN = r'''
import json, os, sys
states, pids = [], []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            said = handle.read()
        with open(f"/proc/{pid}/stat") as handle:
            state, parent = handle.read().rsplit(")", 1)[1].split()[:2]
    except OSError:
        continue
    if b"while True" in said and int(pid) != os.getpid() and int(parent) == os.getppid():
        states.append(state)
        pids.append(int(pid))
print(json.dumps({"loop_ms_ref": 0.01, "loop_ms_cand": 0.02, "loop_speedup": 0.5,
                  "load_states": sorted(states), "load_pids": pids}))
'''


def _kb(tmp_path):
    """A KernelBench-shaped folder with level-1 task 19."""
    folder = tmp_path / "kb" / "KernelBench" / "level1"
    folder.mkdir(parents=True)
    (folder / "19_ReLU.py").write_text("# a task\n")
    return tmp_path / "kb"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores and CPU affinity")
def test_each_load_runs_beside_the_plain_runs_and_the_stopped_ones_stand_still(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text(FAKE_PLAIN)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "host_load.py"), "--kb",
                           str(_kb(tmp_path)), "--out", str(out), "--plain", str(plain),
                           "--only", "l1_19", "--runs", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads((out / "host_load.json").read_text())
    states = {row["load"]: row["load_states"] for row in found["rows"]}
    loaded = len(os.sched_getaffinity(0)) - 1  # one load a core, the timing core left out
    assert states["none"] == []
    assert len(states["spin"]) == loaded and "T" not in states["spin"]
    assert len(states["stream"]) == loaded and "T" not in states["stream"]
    assert states["stream-stopped"] == ["T"] * loaded
    assert [entry["load"] for entry in found["table"]] == ["none", "spin", "stream",
                                                            "stream-stopped"]
    assert "| l1_19_ReLU | none |" in (out / "host_load.md").read_text()
    # nothing of the loads is left running
    seen = [pid for row in found["rows"] for pid in row["load_pids"]]
    assert len(seen) == 3 * loaded
    assert [pid for pid in seen if os.path.exists(f"/proc/{pid}")] == []


def test_an_unknown_load_is_refused(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "host_load.py"), "--kb",
                           str(_kb(tmp_path)), "--out", str(tmp_path / "out"), "--plain",
                           str(tmp_path), "--loads", "none,bogus"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown loads ['bogus']" in done.stderr
