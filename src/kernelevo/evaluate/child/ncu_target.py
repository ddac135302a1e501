"""The process ncu watches: a passing candidate run on its task's inputs a few times.

python -m kernelevo.evaluate.child.ncu_target TASK_FILE CANDIDATE_FILE PRECISION
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from kernelevo.config import PRECISIONS
from kernelevo.evaluate.shared import inputs as task_inputs

CALLS = 2


def main(argv: list[str]) -> int:
    task_path, candidate_path, precision = argv
    dtype = getattr(torch, PRECISIONS[precision])
    with tempfile.TemporaryDirectory(prefix="kernelevo-ncu-target-") as folder:
        task = task_inputs.import_source(Path(task_path).read_text(), "ncu_task",
                                         Path(folder), str(Path(task_path).resolve().parent))
        module = task_inputs.import_source(Path(candidate_path).read_text(), "ncu_candidate",
                                           Path(folder), str(Path(task_path).resolve().parent))
        model = task_inputs.build_model(module.ModelNew, list(task.get_init_inputs()), "cuda",
                                        dtype)
        values = task_inputs.make_inputs(task, 0, "cuda", dtype)
        with torch.no_grad():
            for _ in range(CALLS):
                model(*values)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
