"""The judge's own process on a GPU (run with -m gpu on the GPU machine)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu

SOFTMAX = ROOT / "examples" / "softmax"

WARMED_AHEAD = f"""
import threading
from kernelevo.config import EvalConfig
from kernelevo.evaluate.analysis import decide
from kernelevo.evaluate.parent.gate import gate_for
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task

calls, original = [], decide.warm_comparisons
decide.warm_comparisons = lambda device: (original(device), calls.append(device))
task = load_task({str(SOFTMAX / "task.py")!r})
Judge(task, EvalConfig())
(warm,) = [t for t in threading.enumerate() if t.name == "kernelevo-warm-comparisons"]
warm.join(120)
assert not warm.is_alive() and calls == ["cuda:0"], calls
assert gate_for("cuda", None).holders() == (0, False)
Judge(task, EvalConfig())  # once per process
assert not [t for t in threading.enumerate() if t.name == "kernelevo-warm-comparisons"]
print("warmed once")
"""


def test_a_judge_warms_its_comparisons_once_per_process_and_lets_the_gate_go():
    done = subprocess.run([sys.executable, "-c", WARMED_AHEAD], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0 and "warmed once" in done.stdout, done.stderr[-3000:]


def test_eval_ends_cleanly_while_the_judge_still_warms_its_comparisons(tmp_path):
    # A static verdict comes at once, while the warm-up thread may still run.
    candidate = tmp_path / "fallback.py"
    candidate.write_text("import torch\nimport triton\n\n\nclass ModelNew(torch.nn.Module):\n"
                         "    def forward(self, x):\n        try:\n            return x.softmax(-1)\n"
                         "        except Exception:\n            return torch.softmax(x, dim=-1)\n")
    done = subprocess.run([sys.executable, "-m", "kernelevo.cli.app", "eval",
                           str(SOFTMAX / "task.py"), str(candidate), "--local"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "try_fallback" in done.stdout
    for crash in ("terminate called", "Segmentation fault", "Traceback", "core dumped"):
        assert crash not in done.stderr, done.stderr[-3000:]


NO_KERNELS_WHILE_COMPILING = f"""
import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile
from kernelevo.config import EvalConfig
from kernelevo.evaluate.child.baselines import warm_baselines
from kernelevo.evaluate.shared import inputs
from kernelevo.evaluate.shared.messages import WorkerJob

class Window:  # the stretch without a GPU hold, marked for the profiler
    def __init__(self):
        self.mark, self.opened, self.closed = None, 0, 0
    def cpu_only(self):
        self.mark = record_function("kernelevo_no_gpu_hold"); self.mark.__enter__()
        self.opened += 1
    def kernels(self):
        if self.mark is not None:
            self.mark.__exit__(None, None, None); self.mark = None; self.closed += 1

source = open({str(SOFTMAX / "task.py")!r}).read()
task = inputs.import_source(source, "kernelevo_task", __import__("pathlib").Path("/tmp"), "")
config = EvalConfig()
job = WorkerJob(task_source=source, device="cuda", dtype="float32", scratch="/tmp", time=True,
                timing=config.timing)
window = Window()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    baselines = warm_baselines(task, job, window)
assert "compile" in baselines.contestants, baselines.notes
assert (window.opened, window.closed) == (1, 1)
events = prof.events()
from torch.autograd import DeviceType
(mark,) = [e for e in events if e.name == "kernelevo_no_gpu_hold"
           and e.device_type == DeviceType.CPU]  # its GPU-side annotation is another event
start, end = mark.time_range.start, mark.time_range.end
gpu_calls = [e for e in events if any(word in e.name for word in
             ("LaunchKernel", "Memcpy", "Memset"))]
inside = [e.name for e in gpu_calls if start < e.time_range.start < end]
after = [e.name for e in gpu_calls if e.time_range.start >= end]
print("window", round((end - start) / 1e6, 2), "s; GPU calls inside", inside, "after", len(after))
assert not inside, inside
assert after, "no launch seen at all: the profiler saw nothing to compare with"
print("compiled without the GPU")
"""


def test_the_compile_baseline_compiles_without_a_gpu_hold_and_launches_nothing_meanwhile():
    """torch.compile's compile runs while the worker holds no share of the GPU's gate
    (a timing phase elsewhere on the GPU goes on): the profiler sees no kernel
    launch or copy in that stretch, and sees them after it."""
    done = subprocess.run([sys.executable, "-c", NO_KERNELS_WHILE_COMPILING],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0 and "compiled without the GPU" in done.stdout, (
        done.stdout[-2000:] + done.stderr[-3000:])


FORKSERVER_KEYS = """
import multiprocessing, sys
sys.path.insert(0, sys.argv[1])
import probe_keys
context = multiprocessing.get_context("forkserver")
context.set_forkserver_preload(["kernelevo.evaluate.child.preload"])
queue = context.Queue()
child = context.Process(target=probe_keys.report, args=(queue,))
child.start()
print("cached in the child:", queue.get(timeout=240))
child.join(60)
"""

PROBE_KEYS = """
def report(queue):
    from triton.runtime.cache import triton_key
    queue.put(triton_key.cache_info().currsize)
"""


def test_a_forkserver_child_finds_tritons_source_hash_computed(tmp_path):
    # Without it every worker's first Triton launch hashed libtriton.so again
    # (0.39 s of a re-check's 0.49 s first call on the H200).
    (tmp_path / "probe_keys.py").write_text(PROBE_KEYS)
    done = subprocess.run([sys.executable, "-c", FORKSERVER_KEYS, str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cached in the child: 1" in done.stdout, done.stdout + done.stderr[-2000:]


IN_PLACE = f"""
from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent import worker_state
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task

seen = []
original = worker_state.import_bundle

def import_bundle(description, device, source_gpu=None, copy=True):
    bundle = original(description, device, source_gpu, copy)
    seen.append((device, copy))
    return bundle

worker_state.import_bundle = import_bundle
task = load_task({str(SOFTMAX / "task.py")!r})
verdict = Judge(task, EvalConfig(time_candidates=False)).evaluate(
    load_candidate({str(SOFTMAX / "triton_candidate.py")!r}))
assert verdict.status == "ok", (verdict.reason, verdict.message)
assert seen and all(device.startswith("cuda") and not copy for device, copy in seen), seen
assert "decide" in verdict.phases_s and "decide_cpu" not in verdict.phases_s, verdict.phases_s
print("compared in place", verdict.phases_s["decide"])
"""


def test_a_candidates_outputs_are_compared_in_place_on_its_gpu():
    """The judge maps the worker's outputs and compares them there, copying none: a copy of
    every set's outputs beside full lanes ran out of memory and went to the CPU."""
    done = subprocess.run([sys.executable, "-c", IN_PLACE], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0 and "compared in place" in done.stdout, (
        done.stdout[-2000:] + done.stderr[-3000:])
