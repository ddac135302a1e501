"""Several candidates judged in one worker (compare, evaluate_many): each answers for itself."""

from kernelevo.candidate import Candidate, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

TASK = ROOT / "tests/fixtures/tasks/add.py"
HONEST = ROOT / "tests/fixtures/candidates/honest_add.py"


def _lingering() -> Candidate:
    """honest_add, but constructing it starts a thread that outlives every call."""
    source = HONEST.read_text().replace(
        "        super().__init__()\n",
        "        super().__init__()\n        import threading, time\n"
        "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n", 1)
    return Candidate(source=source, backend="triton", name="lingering")


def test_a_candidate_is_not_charged_with_another_ones_thread():
    judge = Judge(load_task(str(TASK)), EvalConfig(static_checks=False))
    lingering, honest = judge.evaluate_many([_lingering(), load_candidate(HONEST)], timed=False)
    assert lingering.reason == "background_thread", lingering.message
    assert honest.reason == "passed", honest.message


def test_an_honest_candidate_judged_after_another_keeps_its_verdict():
    """Its knockout ran before any candidate computed that input set here (no stale answer)."""
    judge = Judge(load_task(str(TASK)), EvalConfig())
    for _ in range(3):
        first, second = judge.evaluate_many([load_candidate(HONEST), load_candidate(HONEST)],
                                            timed=False)
        assert first.reason == second.reason == "passed", (first.message, second.message)


def test_a_candidate_is_not_charged_with_another_ones_patch_of_the_harness():
    """The second candidate patches torch.allclose while it loads; only it is rejected."""
    patching = HONEST.read_text().replace(
        "import torch\n", "import torch\ntorch.allclose = lambda *a, **k: True\n", 1)
    judge = Judge(load_task(str(TASK)), EvalConfig(static_checks=False))
    honest, patcher = judge.evaluate_many(
        [load_candidate(HONEST), Candidate(source=patching, backend="triton", name="patcher")],
        timed=False)
    assert patcher.reason == "harness_tampered", patcher.message
    assert honest.reason == "passed", honest.message
