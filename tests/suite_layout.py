"""Fixture tasks and solutions laid out as a KernelBench checkout and its solutions folder."""

import shutil
from pathlib import Path

from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"


def lay_out(root: Path, level: list[tuple[int, str, list[str]]]) -> Path:
    """root/kb/KernelBench/level1/<problem>_<Task>.py and root/solutions/ in KernelBench's
    naming, from (problem, fixture task, fixture candidates); returns root."""
    tasks = root / "kb" / "KernelBench" / "level1"
    tasks.mkdir(parents=True)
    solutions = root / "solutions"
    solutions.mkdir()
    for problem, name, files in level:
        shutil.copy(FIXTURES / "tasks" / f"{name}.py", tasks / f"{problem}_{name.title()}.py")
        for sample, file in enumerate(files):
            shutil.copy(FIXTURES / "candidates" / file,
                        solutions / f"level_1_problem_{problem}_sample_{sample}_kernel.py")
    return root
