"""`kernelevo model optimize`: the loop's state, its budget shares, skips and resumption.

The search itself is kernelevo.evolve (tested on its own); here a scripted stand-in at
that seam returns the seed kernel as the best, so the loop around it runs for real:
profile, extract, apply and verify on the example block.
"""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelevo.model.optimize import OptimizeOptions, optimize
from kernelevo.search.outcome import Progress
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples/model_block"


@dataclass
class _Result:
    run_dir: Path
    progress: Progress

    @property
    def best_id(self):
        return self.progress.best_id


class ScriptedSearch:
    """Stands in for kernelevo.evolve/export: records calls, stops once when told to."""

    def __init__(self, stop_at: str | None = None):
        self.calls: list[dict] = []
        self.stop_at = stop_at

    def evolve(self, task, **kwargs):
        self.calls.append({"task": task, **kwargs})
        name = Path(task).stem if task else Path(kwargs["resume"]).parent.name
        if name == self.stop_at:
            self.stop_at = None
            run = Path(kwargs["runs_dir"]) / "run-1"
            run.mkdir(parents=True)
            raise KeyboardInterrupt
        seed = (kwargs.get("seeds") or [str(EXAMPLE / "kernels" / f"{name}.py")])[0]
        return _Result(Path(seed), Progress(best_vs_eager=1.5, best_id="c1"))

    def export(self, result, path, **kwargs):
        shutil.copyfile(result.run_dir, path)


def _options(out: Path, **changes) -> OptimizeOptions:
    base = dict(model_path=str(EXAMPLE / "block.py"), out_dir=str(out),
                paths=("ln1", "mlp.gelu", "attn.qkv"), seeds_dir=str(EXAMPLE / "kernels"),
                tokens="300k", candidates=7, device="cpu", timed=False)
    return OptimizeOptions(**{**base, **changes})


def test_the_loop_resumes_after_a_stop_and_shares_the_budget(tmp_path):
    search = ScriptedSearch(stop_at="mlp_gelu")
    with pytest.raises(KeyboardInterrupt):
        optimize(_options(tmp_path), evolve=search.evolve, export=search.export, say=print)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["done"] == ["profile", "extract"]
    assert state["tasks"]["ln1"]["status"] == "done"
    assert state["tasks"]["mlp_gelu"]["status"] == "pending"
    assert [c["tokens"] for c in search.calls] == [100_000, 100_000]
    assert [c["candidates"] for c in search.calls] == [2, 2]

    data = optimize(_options(tmp_path), evolve=search.evolve, export=search.export, say=print)
    resumed = search.calls[2]
    assert resumed["task"] is None and resumed["resume"].endswith("runs/mlp_gelu/run-1")
    assert len(search.calls) == 3  # ln1 was not searched again; attn_qkv has no seed
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["tasks"]["attn_qkv"]["status"] == "skipped"
    assert "no LLM configured and no seed kernel" in state["tasks"]["attn_qkv"]["reason"]
    swapped = {s["path"] for s in data["applied"]["swapped"]}
    assert swapped == {"ln1", "mlp.gelu"}  # --paths takes exactly the named submodules
    assert data["verification"]["correct"] and data["verification"]["graph_breaks"] == 0
    assert "End to end (CPU times" in (tmp_path / "model_report.md").read_text()


def test_a_folder_of_another_model_is_refused(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"model": "/elsewhere/m.py", "done": [],
                                                     "tasks": {}}))
    from kernelevo.errors import ConfigError

    with pytest.raises(ConfigError, match="holds the loop of /elsewhere/m.py"):
        optimize(_options(tmp_path), evolve=None, export=None, say=print)


def test_a_search_that_ranks_no_best_keeps_the_seed_kernel_which_apply_checks(tmp_path):
    def unranked(task, **kwargs):
        return _Result(Path(kwargs["runs_dir"]), Progress(best_id=None))

    def never(*args, **kwargs):
        raise AssertionError("nothing to export without a best")

    data = optimize(_options(tmp_path, paths=("mlp.gelu",)), evolve=unranked, export=never,
                    say=print)
    record = json.loads((tmp_path / "state.json").read_text())["tasks"]["mlp_gelu"]
    assert "the seed kernel is used" in record["reason"]
    assert (tmp_path / "kernels/mlp_gelu.py").read_text() == \
        (EXAMPLE / "kernels/mlp_gelu.py").read_text()
    assert [s["path"] for s in data["applied"]["swapped"]] == ["mlp.gelu"]
