"""Which tasks a suite holds and which solution files belong to each.

Tasks are named as on the command line: `kernelbench:level1` (every problem
of a level), `kernelbench:level1/1-100` or `kernelbench:level1/3,5,7-9`
(problems of a level), a folder (its .py task files) or one task file.
Solutions are laid out as KernelBench writes them,
`level_L_problem_P_sample_S_kernel.py`, or, for tasks that are files of
their own, `<task stem>.py` and `<task stem>__<anything>.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelevo.errors import TaskError
from kernelevo.paths import check_folder, file_problem
from kernelevo.task import Task, load_task, resolve_kernelbench

_LEVEL = re.compile(r"^kernelbench:level(\d+)(?:/([\d,\-\s]+))?$", re.IGNORECASE)
_KB_SOLUTION = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_PROBLEM_FILE = re.compile(r"^(\d+)_.+\.py$")
MAX_RANGE = 1000  # problems in one range; KernelBench's levels hold 100 or fewer


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite: `key` names it in results ("level1/19" or a file stem)."""

    key: str
    path: Path
    level: int | None = None
    problem: int | None = None

    def load(self) -> Task:
        return load_task(str(self.path))


@dataclass(frozen=True)
class Solution:
    """A candidate file for a task; `sample` orders several of one task."""

    path: Path
    sample: int


def expand_specs(specs: list[str], kernelbench_dir: str | None = None) -> list[SuiteTask]:
    """Every task the specs name, in order, each once."""
    tasks: dict[str, SuiteTask] = {}
    for spec in specs:
        for task in _expand(spec.strip(), kernelbench_dir):
            tasks.setdefault(task.key, task)
    if not tasks:
        raise TaskError(f"the suite {' '.join(specs)!r} holds no task")
    return list(tasks.values())


def _expand(spec: str, kernelbench_dir: str | None) -> list[SuiteTask]:
    match = _LEVEL.match(spec)
    if match:
        level = int(match.group(1))
        folder = _level_folder(level, kernelbench_dir, spec)
        available = _numbered_files(folder)
        wanted = parse_ranges(match.group(2), spec) if match.group(2) else sorted(available)
        missing = [n for n in wanted if n not in available]
        if missing:
            raise TaskError(f"{spec}: no problem {', '.join(map(str, missing[:10]))} in {folder}")
        return [SuiteTask(f"level{level}/{n}", available[n], level, n) for n in wanted]
    if spec.lower().startswith("kernelbench:"):
        raise TaskError(f"bad suite spec {spec!r}: write kernelbench:level1, "
                        "kernelbench:level1/1-100 or kernelbench:level1/3,5,7-9")
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        if not files:
            raise TaskError(f"{path}: no .py task files in this folder")
        return [_file_task(p) for p in files]
    problem = file_problem(path)
    if problem is None:
        return [_file_task(path)]
    raise TaskError(f"task {spec} {problem}: give a task file, a folder of them, or "
                    "kernelbench:level1/1-10")


def _file_task(path: Path) -> SuiteTask:
    numbered = _PROBLEM_FILE.match(path.name)
    return SuiteTask(path.stem, path, None, int(numbered.group(1)) if numbered else None)


def _level_folder(level: int, kernelbench_dir: str | None, spec: str) -> Path:
    # resolve_kernelbench finds problem 1's file; its folder is the level's.
    try:
        return resolve_kernelbench(f"kernelbench:level{level}/1", kernelbench_dir).parent
    except TaskError as exc:
        raise TaskError(f"{spec}: {exc}") from None


def _numbered_files(folder: Path) -> dict[int, Path]:
    files: dict[int, Path] = {}
    for path in sorted(folder.glob("*.py")):
        match = _PROBLEM_FILE.match(path.name)
        if match:
            files.setdefault(int(match.group(1)), path)
    return files


def parse_ranges(text: str, spec: str = "") -> list[int]:
    """`1-5,9` -> [1, 2, 3, 4, 5, 9]; order kept, each number once."""
    numbers: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        bounds = part.split("-")
        try:
            if len(bounds) == 1:
                values = [int(bounds[0])]
            elif len(bounds) == 2:
                low, high = int(bounds[0]), int(bounds[1])
                if low > high:
                    raise ValueError
                _check_span(part, spec or text, high - low + 1)
                values = list(range(low, high + 1))
            else:
                raise ValueError
        except ValueError:
            raise TaskError(f"bad problem range {part!r} in {spec or text!r}: write 1-100 "
                            "or 3,5,7-9") from None
        numbers.extend(v for v in values if v not in numbers)
    return numbers


def _check_span(part: str, spec: str, count: int) -> None:
    # A level holds at most a few hundred problems; a typo must not build a list of billions.
    if count > MAX_RANGE:
        raise TaskError(f"problem range {part!r} in {spec!r} spans {count:,} problems, more "
                        f"than any KernelBench level holds (at most {MAX_RANGE:,} here): write "
                        "e.g. 1-100")


def find_solutions(folder: Path, tasks: list[SuiteTask]) -> dict[str, list[Solution]]:
    """The solution files of each task (by key), samples in order; tasks without any are absent."""
    check_folder(folder, "--solutions", "give the folder that holds the candidate files",
                 TaskError)
    by_problem: dict[tuple[int, int], list[Solution]] = {}
    files = sorted(folder.glob("*.py"))
    for path in files:
        match = _KB_SOLUTION.match(path.name)
        if match:
            level, problem, sample = map(int, match.groups())
            by_problem.setdefault((level, problem), []).append(Solution(path, sample))
    found: dict[str, list[Solution]] = {}
    for task in tasks:
        if task.level is not None and task.problem is not None:
            hits = by_problem.get((task.level, task.problem), [])
        else:
            named = [p for p in files if p.stem == task.key or p.stem.startswith(task.key + "__")]
            hits = [Solution(p, i) for i, p in enumerate(named)]
        if hits:
            found[task.key] = sorted(hits, key=lambda s: s.sample)
    return found
