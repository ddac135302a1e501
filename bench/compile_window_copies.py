"""Which GPU calls torch.compile's compile makes in the baselines' warm-up (GPU machine).

The worker gives up its share of the GPU's gate while torch.compile compiles
(worker_timing.warm_baselines), on the ground that the compile runs no
kernels. This profiles that stretch of a softmax task's warm-up and prints
every kernel launch, copy or memset inside it, grouped by the CPU ops around
it and the Python frames that called it, so the ground can be checked.

    python bench/compile_window_copies.py [task.py]   # prints one JSON object
"""

import json
import sys
from collections import Counter
from pathlib import Path

from torch.autograd import DeviceType
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from kernelevo.config import EvalConfig
from kernelevo.evaluate.child.worker_timing import warm_baselines
from kernelevo.evaluate.shared import inputs
from kernelevo.evaluate.shared.messages import WorkerJob

MARK = "kernelevo_no_gpu_hold"
GPU_CALLS = ("LaunchKernel", "Memcpy", "Memset")


class Window:
    """The stretch without a GPU hold, marked for the profiler."""

    def __init__(self) -> None:
        self.mark = None

    def cpu_only(self) -> None:
        self.mark = record_function(MARK)
        self.mark.__enter__()

    def kernels(self) -> None:
        if self.mark is not None:
            self.mark.__exit__(None, None, None)
            self.mark = None


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "examples/softmax/task.py")
    source = path.read_text()
    task = inputs.import_source(source, "kernelevo_task", Path("/tmp"), "")
    config = EvalConfig()
    job = WorkerJob(task_source=source, device="cuda", dtype="float32", scratch="/tmp",
                    time=True, timing=config.timing)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 with_stack=True) as prof:
        warm_baselines(task, job, Window())
    events = prof.events()
    (mark,) = [e for e in events if e.name == MARK and e.device_type == DeviceType.CPU]
    start, end = mark.time_range.start, mark.time_range.end
    cpu = [e for e in events if e.device_type == DeviceType.CPU and e.name != MARK]
    inside = [e for e in cpu if any(w in e.name for w in GPU_CALLS)
              and start < e.time_range.start < end]
    around: Counter = Counter()
    frames: Counter = Counter()
    for call in inside:
        ops = [e for e in cpu if e is not call and e.thread == call.thread
               and e.time_range.start <= call.time_range.start
               and e.time_range.end >= call.time_range.end and e.name.startswith("aten::")]
        ops.sort(key=lambda e: e.time_range.start)
        around[" > ".join(e.name for e in ops[-3:]) + f" > {call.name}"] += 1
        stack = next((e.stack for e in reversed(ops) if e.stack), call.stack or [])
        frames[" | ".join(stack[:6])] += 1
    print(json.dumps({
        "window_s": round((end - start) / 1e6, 3),
        "gpu_calls_inside": len(inside),
        "by_ops": around.most_common(10),
        "by_frames": frames.most_common(5),
    }, indent=1))


if __name__ == "__main__":
    main()
