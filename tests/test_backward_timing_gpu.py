"""Train and backward measures through the real judge on a GPU (run with -m gpu)."""

import pytest

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu

EXAMPLE = ROOT / "examples" / "layernorm_backward"


def test_the_layernorm_example_gets_train_and_backward_measures_beside_both_baselines():
    judge = Judge(load_task(str(EXAMPLE / "task.py")), EvalConfig(vary_shapes=False))
    verdict = judge.evaluate(load_candidate(EXAMPLE / "triton_candidate.py"))
    assert verdict.reason == "passed", f"{verdict.message}\n{verdict.logs[-2000:]}"
    for workload in ("train", "backward"):
        for measure in ("gpu", "call"):
            stats = verdict.measures[f"{workload}_{measure}"]
            assert set(stats) == {"candidate", "eager", "compile"}, (workload, measure)
            assert set(verdict.speedup_ranges[f"{workload}_{measure}"]) == {"eager", "compile"}
    for name in ("candidate", "eager", "compile"):
        # the backward alone is part of a training step, never all of it
        assert (verdict.measures["backward_gpu"][name].median_ms
                < verdict.measures["train_gpu"][name].median_ms), name
    assert verdict.speedup_in(verdict.train_measure, "eager") is not None
    assert any(note.startswith("backward alone timed as") for note in verdict.notes)
    print({m: {n: round(s.median_ms, 4) for n, s in by.items()}
           for m, by in verdict.measures.items()})
    print([n for n in verdict.notes if "backward" in n or "train" in n])
