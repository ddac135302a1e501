"""Every fixture candidate gets the verdict its manifest entry expects.

Each fixture runs twice: with every check on (static and runtime, shape
variation included), and with the static checks off, so that the runtime side
of each check is shown to catch the trick on its own.
"""

import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.cuda.prebuild import prebuild_source
from kernelevo.evaluate.parent.judge import Judge, child_environment
from kernelevo.task import load_task
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
ENTRIES = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


def _params(needs_gpu: bool, key: str):
    marks = [pytest.mark.gpu] if needs_gpu else []
    return [pytest.param(entry, id=entry["file"].removesuffix(".py"), marks=marks)
            for entry in ENTRIES if entry["needs_gpu"] == needs_gpu and entry[key]]


def _judge(entry: dict, static_checks: bool):
    task = load_task(str(FIXTURES / "tasks" / entry["task"]))
    # Faults that hang name a short limit of their own; CUDA builds run ahead
    # of the worker under their own limit, so a cold cache costs no verdict.
    timeout_s = float(entry.get("timeout_s", 90.0 if entry["needs_gpu"] else 60.0))
    # The eager baseline suffices here; torch.compile would add seconds per test.
    config = EvalConfig(static_checks=static_checks, vary_shapes=True, timeout_s=timeout_s,
                        timing=TimingConfig(baselines=("eager",)))
    return Judge(task, config)


def _candidate(entry: dict) -> Candidate:
    source = (FIXTURES / "candidates" / entry["file"]).read_text()
    return Candidate(source=source, backend=entry["backend"], name=entry["file"])


def _check(entry: dict, static_checks: bool, reasons_key: str) -> None:
    verdict = _judge(entry, static_checks).evaluate(_candidate(entry))
    expected = entry[reasons_key]
    assert verdict.reason in expected, (
        f"{entry['file']} ({entry['trick']}): got {verdict.status}/{verdict.reason}: "
        f"{verdict.message[:500]}\nphases {verdict.phases_s}\n{verdict.logs[-1500:]}")
    if verdict.reason == "passed":
        assert verdict.errors is not None and verdict.errors.mismatch_fraction == 0.0


@pytest.mark.parametrize("entry", _params(False, "expect_reasons"))
def test_fixture_with_every_check(entry):
    _check(entry, True, "expect_reasons")


@pytest.mark.parametrize("entry", _params(False, "dynamic_reasons"))
def test_fixture_caught_at_runtime(entry):
    _check(entry, False, "dynamic_reasons")


@pytest.fixture(scope="module")
def cuda_built_ahead():
    """Every CUDA fixture built at once (nvcc takes 20-25 s each): a judge's own
    build ahead then finds it done. The verdicts are the same either way."""
    import torch

    if not torch.cuda.is_available():
        return
    sources = {(FIXTURES / "candidates" / entry["file"]).read_text()
               for entry in ENTRIES if entry["needs_gpu"] and entry["backend"] == "cuda"}
    environment = child_environment("cuda", None)
    with ThreadPoolExecutor(len(sources)) as pool:
        list(pool.map(lambda source: prebuild_source(source, EvalConfig(), environment), sources))


# With every check on, a GPU fixture the static checks do not see (its reasons are the
# runtime's; test_static.py shows on the CPU that they find nothing in it) is judged just
# as at runtime alone: only those the static checks catch are judged twice on the GPU.
@pytest.mark.parametrize("entry", [param for param in _params(True, "expect_reasons")
                                   if param.values[0]["expect_reasons"]
                                   != param.values[0]["dynamic_reasons"]])
def test_gpu_fixture_with_every_check(entry, cuda_built_ahead):
    _check(entry, True, "expect_reasons")


@pytest.mark.parametrize("entry", _params(True, "dynamic_reasons"))
def test_gpu_fixture_caught_at_runtime(entry, cuda_built_ahead):
    _check(entry, False, "dynamic_reasons")
