"""One best candidate, the same in `show`, `export --best`, the report, the UI and evolve.

Each run is written through the store API as a search would leave it: the
PyTorch reference seed (the baseline, never the best), Triton kernels with
and without timings, and failures. Every view must name the same candidate,
or say in its own words that no custom kernel has passed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.cli.app import app
from kernelevo.evaluate.verdict import TimingStats, Verdict, verdict_for
from kernelevo.report import write_report
from kernelevo.report.data import load_run
from kernelevo.report.server import route
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.store.run_store import RunStore

TASK = '''import torch
import torch.nn as nn

size = 64


class Model(nn.Module):
    def forward(self, x):
        return x + 1


def get_inputs():
    return [torch.randn(size)]


def get_init_inputs():
    return []
'''
REFERENCE = TASK.replace("class Model(", "class ModelNew(")
KERNEL = "import triton\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def timed(speedup: float) -> Verdict:
    own = TimingStats(1.0 / speedup, 0.01, 0.9 / speedup, 50)
    return verdict_for("passed", speedup_vs_eager=speedup, speedup_vs_compile=speedup / 2,
                       timings={"candidate": own, "eager": TimingStats(1.0, 0.01, 0.9, 50)})


UNTIMED = verdict_for("passed")  # judged without a GPU: correct, no timings
FAILED = verdict_for("compile_failed", "NameError: z is not defined")


def write_run(runs_dir: Path, run_id: str, seed_verdict: Verdict,
              verdicts: list[tuple[str, Verdict]], judge_order: list[int] | None = None) -> None:
    """The PyTorch seed, judged first, then Triton candidates judged in `judge_order`."""
    with RunStore.create(runs_dir, "add-one", TASK, {"search": {"backend": "triton"}},
                         run_id=run_id) as store:
        seed = store.add_candidate(Candidate(REFERENCE, "pytorch", "reference", "seed"))
        ids = [store.add_candidate(Candidate(f"{KERNEL}# {name}\n", "triton", name, "llm",
                                             parent_ids=(seed,)))
               for name, _ in verdicts]
        store.record_verdict(seed, seed_verdict)
        for index in judge_order or range(len(verdicts)):
            time.sleep(0.002)  # distinct judging times: "first judged" must be unambiguous
            store.record_verdict(ids[index], verdicts[index][1])
        store.set_status("finished")


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("best") / "runs"
    # (a) a GPU run: the seed at 1.0x, an untimed kernel, a timed one, a failure,
    # and a faster candidate the judge flagged as PyTorch only.
    write_run(root, "gpu-run", timed(1.0), [
        ("untimed", UNTIMED), ("fast", timed(2.0)), ("broken", FAILED),
        ("pytorch-only", verdict_for("passed", speedup_vs_eager=5.0,
                                     flags=("no_custom_kernel",)))])
    # (b) a CPU run: no timings anywhere; c0004 is judged before c0003.
    write_run(root, "cpu-run", UNTIMED, [("broken", FAILED), ("judged-second", UNTIMED),
                                         ("judged-first", UNTIMED)], judge_order=[0, 2, 1])
    # (c) only the seed passed.
    write_run(root, "seed-only", timed(1.0),
              [("broken", FAILED), ("wrong", verdict_for("output_mismatch"))])
    return root


def cli(runs_dir: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--runs-dir", str(runs_dir)],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})


def ui(runs_dir: Path, path: str) -> str:
    return route(runs_dir, path, {}).body.decode()


# -- every view names one best -------------------------------------------------


@pytest.mark.parametrize("run_id, best_id", [("gpu-run", "c0003"), ("cpu-run", "c0004")])
def test_every_view_names_the_same_best(runs_dir: Path, tmp_path: Path, run_id: str,
                                        best_id: str) -> None:
    shown = cli(runs_dir, "show", run_id)
    assert shown.exit_code == 0, shown.output
    assert f"best {best_id}: passed" in shown.output
    assert "baseline: c0001 (PyTorch seed): ok" in shown.output

    exported = tmp_path / "best.py"
    result = cli(runs_dir, "export", run_id, "--best", "-o", str(exported), "--no-recheck")
    assert result.exit_code == 0, result.output
    assert f"# candidate {best_id}: origin llm, backend triton" in exported.read_text()

    assert load_run(runs_dir / run_id).best.stored.id == best_id
    report = tmp_path / "report.html"
    assert cli(runs_dir, "report", run_id, "-o", str(report)).exit_code == 0
    assert f"Best kernel: {best_id} " in report.read_text()

    summary = json.loads(ui(runs_dir, f"/api/run/{run_id}/summary"))
    assert (summary["best_id"], summary["baseline_id"], summary["no_best"]) == \
        (best_id, "c0001", None)
    assert f'/run/{run_id}/candidate/{best_id}">{best_id}</a> <span class="muted">' in \
        ui(runs_dir, f"/run/{run_id}")

    with RunStore.open(runs_dir / run_id) as store:
        assert evolve_progress_best(store) == best_id


def evolve_progress_best(store: RunStore) -> str | None:
    """The best that evolve's live progress line would name for this store."""
    evolution = Evolution(store, [], SearchConfig(backend="triton"), Budget(), proposer=None)
    evolution._report()  # the step that fills Progress, as the loop runs it every 0.2 s
    return evolution.progress.best_id


def test_a_timed_kernel_beats_the_baseline_and_untimed_or_flagged_ones(runs_dir: Path) -> None:
    data = load_run(runs_dir / "gpu-run")
    assert data.best.timed and data.best_speedup("speedup_vs_eager") == 2.0
    assert data.best_speedup("speedup_vs_compile") == 1.0  # the best's own, not another's
    assert data.baseline.id == "c0001"
    # Best-so-far lines hold kernels only: the seed's 1.0x is no point of them.
    assert [step.candidate_id for step in data.improvements_of("speedup_vs_eager")] == ["c0003"]


def test_without_timings_the_first_judged_kernel_is_best(runs_dir: Path) -> None:
    data = load_run(runs_dir / "cpu-run")
    assert not data.best.timed
    shown = cli(runs_dir, "show", "cpu-run").output
    assert "the best is the first one judged" in shown
    page = ui(runs_dir, "/run/cpu-run")
    assert "elite, is the first correct kernel judged" in page  # quotes are escaped in HTML


# -- no passing custom kernel --------------------------------------------------


def test_when_only_the_seed_passed_there_is_no_best(runs_dir: Path, tmp_path: Path) -> None:
    shown = cli(runs_dir, "show", "seed-only")
    assert shown.exit_code == 0
    assert "no passing custom kernel yet: 2 of 2 judged candidates failed" in shown.output
    assert "baseline: c0001 (PyTorch seed): ok, 1.00x vs eager" in shown.output
    assert "best c0001" not in shown.output

    exported = tmp_path / "best.py"
    result = cli(runs_dir, "export", "seed-only", "--best", "-o", str(exported), "--no-recheck")
    assert result.exit_code != 0 and not exported.exists()
    message = " ".join(result.output.split())
    assert "no passing custom kernel yet: 2 of 2 judged candidates failed" in message
    assert "the baseline c0001 (PyTorch seed)" in message and "--candidate c0001" in message

    data = load_run(runs_dir / "seed-only")
    assert data.best is None and data.baseline.id == "c0001" and data.improvements == ()
    report = write_report(runs_dir / "seed-only", tmp_path / "report.html").read_text()
    assert "no passing custom kernel yet: 2 of 2 judged candidates failed" in report
    assert "baseline c0001 (PyTorch seed): ok, 1.00x vs eager; the PyTorch reference, never " \
        "the best" in report

    summary = json.loads(ui(runs_dir, "/api/run/seed-only/summary"))
    assert summary["best_id"] is None and summary["baseline_id"] == "c0001"
    assert summary["no_best"].startswith("no passing custom kernel yet")
    assert "no passing custom kernel yet" in ui(runs_dir, "/run/seed-only")
    with RunStore.open(runs_dir / "seed-only") as store:
        assert store.best() is None and evolve_progress_best(store) is None
