"""`runs`, `show` and `export` over real run databases; export re-judges on the CPU."""

from __future__ import annotations

import ast
import runpy
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from rich.console import Console

from kernelevo.run import view as runs_view
from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.errors import ConfigError, KernelEvoError, StoreError
from kernelevo.evaluate.verdict import TimingStats, Verdict, verdict_for
from kernelevo.run.view import (
    eval_config_from_run,
    export_candidate,
    list_runs_table,
    show_run,
    task_support_source,
)
from kernelevo.store.run_store import RunStore

# A tiny task: its sizes, a float used by get_init_inputs, a helper used by
# get_inputs, and an import (math) that only the reference Model needs.
TASK = '''"""y = x * scale."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

batch_size = 16
dim = 32
scale = 2.0


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale * math.cos(0.0)


def _shape():
    return (batch_size, dim)


def get_inputs():
    return [torch.randn(*_shape())]


def get_init_inputs():
    return [scale]
'''

MODEL_NEW = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()

    def forward(self, x):
        return x * 2
'''
BROKEN = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
RUN_CONFIG = {
    "eval": asdict(EvalConfig(device="cpu", policy="permissive", input_sets=2,
                              timing=TimingConfig(baselines=("eager",)))),
    "search": {"backend": "pytorch", "islands": 2},
    "llm": {"model": "tiny-model", "api_key": "sk-do-not-print"},
    "budget": {"tokens": 1_000_000, "usd": None},
}


def ok_verdict(eager: float, compile_: float, runtime_ms: float) -> Verdict:
    timing = TimingStats(median_ms=runtime_ms, iqr_ms=0.001, min_ms=runtime_ms, samples=50)
    return verdict_for("passed", speedup_vs_eager=eager, speedup_vs_compile=compile_,
                       timings={"candidate": timing, "eager": TimingStats(0.5, 0.01, 0.49, 50)})


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """run-a: the passing baseline, a passing kernel, a broken and an unevaluated one;
    run-b: one failure."""
    root = tmp_path / "runs"
    with RunStore.create(root, "scale", TASK, RUN_CONFIG, run_id="run-a") as store:
        seed = store.add_candidate(Candidate(MODEL_NEW + "\n# seed\n", "pytorch", origin="seed"))
        # Recorded as a Triton kernel; only a re-check (by id, below) would see it is not.
        fast = store.add_candidate(Candidate(MODEL_NEW, "triton", origin="llm",
                                             parent_ids=(seed,)))
        broken = store.add_candidate(Candidate(BROKEN, "triton", origin="llm",
                                               parent_ids=(fast,)))
        store.add_candidate(Candidate(MODEL_NEW + "\n# queued\n", "triton", origin="tuner"))
        store.record_verdict(seed, ok_verdict(1.5, 0.75, 0.333))
        store.record_verdict(fast, ok_verdict(2.5, 1.25, 0.2))
        store.record_verdict(broken, verdict_for("compile_failed", "expected an indented block"))
        for tokens_in, tokens_out, cost in ((1000, 200, 0.0123), (3000, 500, 0.0456)):
            call = store.start_llm_call("tiny-model", [{"role": "user", "content": "go"}])
            store.finish_llm_call(call, "reply", tokens_in, tokens_out, cost, 1.0)
        store.fail_llm_call(store.start_llm_call("tiny-model", []), "HTTP 500")
        store.set_status("finished")
    with RunStore.create(root, "other", TASK, {}, run_id="run-b") as store:
        failed = store.add_candidate(Candidate(BROKEN, "triton", origin="llm"))
        store.record_verdict(failed, verdict_for("compile_failed"))
    return root


def printed(function, *args, **options) -> tuple[object, str]:
    console = Console(record=True, width=200)
    result = function(console, *args, **options)
    return result, console.export_text()


# -- eval config -----------------------------------------------------------------


def test_eval_config_round_trips_and_tolerates_missing_and_unknown_keys() -> None:
    assert eval_config_from_run(RUN_CONFIG) == EvalConfig(
        device="cpu", policy="permissive", input_sets=2, timing=TimingConfig(baselines=("eager",)))
    assert eval_config_from_run({}) == EvalConfig()
    partial = {"eval": {"precision": "bf16", "from_the_future": 1,
                        "timing": {"baselines": ["eager", "compile"], "unknown": 2}}}
    config = eval_config_from_run(partial)
    assert config.precision == "bf16" and config.timing.baselines == ("eager", "compile")
    with pytest.raises(ConfigError, match="precision"):
        eval_config_from_run({"eval": {"precision": "fp8"}})


# -- runs ------------------------------------------------------------------------


def test_runs_table_lists_every_run_with_its_numbers(runs_dir: Path) -> None:
    count, text = printed(list_runs_table, runs_dir, plain=False)
    assert count == 2
    run_a = next(line for line in text.splitlines() if "run-a" in line)
    for expected in ("scale", "finished", "3/4", "2.50x", "1.25x", "4,700", "$0.0579"):
        assert expected in run_a, (expected, run_a)
    run_b = next(line for line in text.splitlines() if "run-b" in line)
    cells = [cell.strip() for cell in run_b.split("│")[1:-1]]
    assert cells[1:3] == ["other", "running"] and cells[4:] == ["1/1", "-", "-", "0", "$0.0000"]


def test_runs_table_without_runs_says_how_to_start(tmp_path: Path) -> None:
    count, text = printed(list_runs_table, tmp_path / "nothing-here")
    assert count == 0 and "no runs in" in text and "kernelevo evolve" in text


def test_runs_table_marks_an_unreadable_run(runs_dir: Path) -> None:
    (runs_dir / "run-c").mkdir()
    (runs_dir / "run-c" / "run.db").write_bytes(b"not a database at all" * 100)
    count, text = printed(list_runs_table, runs_dir)
    assert count == 3
    assert "unreadable" in next(line for line in text.splitlines() if "run-c" in line)


# -- show ------------------------------------------------------------------------


def test_show_prints_summary_spend_ranking_and_best_verdict(runs_dir: Path) -> None:
    _, text = printed(show_run, runs_dir, "run-a")
    for expected in ("run run-a", "task scale", "status finished", "device cpu", "permissive",
                     "islands 2", "tiny-model", "tokens 1000000", "4,000 in", "700 out", "$0.0579",
                     "LLM calls 3", "compile_error 1", "ok 2", "unevaluated 1",
                     "baseline: c0001 (PyTorch seed): ok, 1.50x vs eager; the PyTorch reference",
                     "top 1 of 1 passing custom kernels", "OK  best c0002: passed", "0.2000 ms"):
        assert expected in text, expected
    assert "sk-do-not-print" not in text
    rows = [line for line in text.splitlines() if line.lstrip("│ ").startswith("c000")]
    assert [row.split()[1] for row in rows] == ["c0002"]  # the baseline is not ranked
    assert "llm" in rows[0] and "c0001" in rows[0].split("c0002", 1)[1]  # origin and parent


def test_show_opens_a_run_by_path_or_by_part_of_its_id(runs_dir: Path) -> None:
    elsewhere = runs_dir.parent / "elsewhere"
    for where, run in ((elsewhere, str(runs_dir / "run-a")),
                       (elsewhere, str(runs_dir / "run-a" / "run.db")), (runs_dir, "n-a")):
        _, text = printed(show_run, where, run)
        assert "run run-a" in text, run


def test_show_without_passing_candidates_says_so(runs_dir: Path) -> None:
    _, text = printed(show_run, runs_dir, "run-b")
    assert "no passing custom kernel yet: 1 of 1 judged candidates failed" in text
    assert "baseline: none" in text and "compile_error 1" in text


def test_unknown_run_lists_the_run_ids(runs_dir: Path) -> None:
    with pytest.raises(StoreError, match="no run 'nope'") as caught:
        printed(show_run, runs_dir, "nope")
    assert isinstance(caught.value, KernelEvoError)
    assert "run-a" in str(caught.value) and "run-b" in str(caught.value)
    with pytest.raises(StoreError, match="several runs"):
        printed(show_run, runs_dir, "run-")
    with pytest.raises(StoreError, match="holds no runs"):
        printed(show_run, runs_dir / "empty", "run-a")


# -- export ----------------------------------------------------------------------


def exported_names(text: str) -> set[str]:
    tree = ast.parse(text)
    return {getattr(node, "name", None) or target.id for node in tree.body
            for target in (getattr(node, "targets", None) or [node])
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.Assign))}


def test_task_support_takes_sizes_inputs_and_what_they_use_only() -> None:
    support = task_support_source(TASK)
    ast.parse(support)
    assert "class Model" not in support and "import math" not in support
    assert "__future__" not in support and "y = x * scale" not in support
    for needed in ("import torch\n", "batch_size = 16", "dim = 32", "scale = 2.0",
                   "def _shape", "def get_inputs", "def get_init_inputs"):
        assert needed in support, needed


def test_export_best_without_recheck_writes_a_standalone_file(runs_dir: Path,
                                                              tmp_path: Path) -> None:
    output = tmp_path / "out" / "best.py"
    path, verdict = export_candidate(runs_dir, "run-a", output, None, best=True, recheck=False)
    assert (path, verdict) == (output, None)
    text = output.read_text()
    names = exported_names(text)
    assert {"ModelNew", "get_inputs", "get_init_inputs", "batch_size", "dim"} <= names
    assert "Model" not in names
    header = text.split("import torch", 1)[0]
    for expected in ("run-a", "c0002", "origin llm", "parents c0001", "ok (passed)",
                     "2.50x vs eager", "1.25x vs torch.compile"):
        assert expected in header, expected
    namespace = runpy.run_path(str(output))
    model = namespace["ModelNew"](*namespace["get_init_inputs"]())
    (x,) = namespace["get_inputs"]()
    assert x.shape == (16, 32) and torch.equal(model(x), x * 2)
    assert [p.name for p in output.parent.iterdir()] == ["best.py"]  # no temporary left


def test_export_with_recheck_judges_the_candidate_again(runs_dir: Path, tmp_path: Path) -> None:
    phases: list[str] = []
    output = tmp_path / "checked.py"
    _, verdict = export_candidate(runs_dir, "run-a", output, "c0001", best=False,
                                  progress=phases.append)
    assert verdict is not None and verdict.ok, (verdict.reason, verdict.message, verdict.logs)
    assert phases and "class ModelNew" in output.read_text()


def test_export_of_a_failed_candidate_needs_its_id(runs_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no passing custom kernel"):
        export_candidate(runs_dir, "run-b", tmp_path / "x.py", None, best=True, recheck=False)
    assert not (tmp_path / "x.py").exists()
    export_candidate(runs_dir, "run-b", tmp_path / "x.py", "c0001", best=False, recheck=False)
    assert "compile_error (compile_failed)" in (tmp_path / "x.py").read_text()


def test_export_refuses_unclear_requests(runs_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "x.py"
    with pytest.raises(ConfigError, match="--best, or --candidate"):
        export_candidate(runs_dir, "run-a", output, None, best=False, recheck=False)
    with pytest.raises(ConfigError, match="not both"):
        export_candidate(runs_dir, "run-a", output, "c0001", best=True, recheck=False)
    with pytest.raises(StoreError, match="no candidate 'c0999'"):
        export_candidate(runs_dir, "run-a", output, "c0999", best=False, recheck=False)
    with pytest.raises(ConfigError, match="is a folder"):
        export_candidate(runs_dir, "run-a", tmp_path, "c0001", best=False, recheck=False)
    assert not output.exists()


def test_export_overwrites_whole_or_not_at_all(runs_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "best.py"
    output.write_text("old")
    export_candidate(runs_dir, "run-a", output, None, best=True, recheck=False, force=True)
    first = output.read_text()
    assert "ModelNew" in first

    def refuse(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(runs_view.os, "replace", refuse)
    with pytest.raises(ConfigError, match="disk full"):
        export_candidate(runs_dir, "run-a", output, "c0001", best=False, recheck=False,
                         force=True)
    assert output.read_text() == first
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_export_refuses_to_overwrite_without_force(runs_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "mine.py"
    output.write_text("my own work")
    phases: list[str] = []
    with pytest.raises(ConfigError, match=f"{output} exists: pass --force"):
        export_candidate(runs_dir, "run-a", output, None, best=True, progress=phases.append)
    assert output.read_text() == "my own work" and phases == []  # refused before judging
    export_candidate(runs_dir, "run-a", output, None, best=True, recheck=False, force=True)
    assert "ModelNew" in output.read_text()


def test_export_keeps_a_file_that_appears_while_it_writes(runs_dir: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "late.py"

    def source_while_another_writes(*args: object) -> str:
        output.write_text("written meanwhile")
        return "export"

    monkeypatch.setattr(runs_view, "standalone_source", source_while_another_writes)
    with pytest.raises(ConfigError, match="exists: pass --force"):
        export_candidate(runs_dir, "run-a", output, None, best=True, recheck=False)
    assert output.read_text() == "written meanwhile"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.py", "runs"]  # no temporary
