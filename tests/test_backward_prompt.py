"""What the model is told when a run judges the backward, how a gradient's failure
comes back to it in a repair prompt, and how `evolve --backward` reaches the run."""

from __future__ import annotations

from kernelevo.config import EvalConfig
from kernelevo.evaluate.verdict import ErrorMetrics, verdict_for
from kernelevo.propose.prompt import Exemplar, PromptRequest, build_messages
from kernelevo.run.driver import _proposer
from kernelevo.search.config import SearchConfig
from kernelevo.task import task_from_source
from tests.conftest import ROOT

TASK = (ROOT / "examples" / "layernorm_backward" / "task.py").read_text()
PARENT = (ROOT / "tests" / "fixtures" / "candidates" / "backward_wrong_dx.py").read_text()
WRONG_DX = verdict_for(
    "gradient_mismatch", "gradient of input 0 (x) on input set 1: 98.13% of elements beyond "
    "tolerance (atol 0.0001, rtol 0.0001); max abs error 0.725 at index [4, 133] (got "
    "-1.2153, expected -0.490463); relative L2 error 0.0708",
    errors=ErrorMetrics(max_abs_error=0.725, max_rel_error=3.2, mismatch_fraction=0.9813,
                        rel_l2_error=0.0708, worst_index=(4, 133), worst_value=-1.2153,
                        worst_expected=-0.490463, atol=1e-4, rtol=1e-4))


def _messages(backward: bool, mode: str = "rewrite", verdict=None) -> list[dict[str, str]]:
    return build_messages(PromptRequest(task_source=TASK, backend="triton", precision="fp32",
                                        mode=mode, parent=Exemplar("p-1", PARENT, verdict),
                                        backward=backward))


def test_the_contract_asks_for_an_own_autograd_function_only_when_the_backward_is_judged():
    judged = _messages(True)[0]["content"]
    assert "## The backward" in judged and "torch.autograd.Function" in judged
    assert "loss = sum(out * proj)" in judged and "switches your kernels off" in judged
    assert "## The backward" not in _messages(False)[0]["content"]


def test_a_repair_prompt_carries_the_gradient_that_failed_and_its_error():
    user = _messages(True, "repair", WRONG_DX)[1]["content"]
    assert "status: incorrect (gradient_mismatch" in user
    assert "gradient of input 0 (x) on input set 1" in user
    assert "max abs error 0.725" in user
    assert "Fix the failure shown above" in user


def test_a_run_tells_its_proposer_whether_the_backward_is_judged():
    plain = task_from_source(TASK.replace("backward = True", ""))
    asking = task_from_source(TASK)
    search = SearchConfig()
    proposer = _proposer(object(), None, plain, search, EvalConfig())
    assert proposer.backward is False
    assert _proposer(object(), None, plain, search, EvalConfig(backward=True)).backward
    assert _proposer(object(), None, asking, search, EvalConfig()).backward


def test_evolve_backward_reaches_the_runs_judges_and_a_resume_may_not_change_it():
    from kernelevo.cli.options import FLAGS, eval_overrides
    from kernelevo.config_file import resolve
    from kernelevo.run import setup
    from kernelevo.run.resume import split_given

    effective = resolve(None, {**eval_overrides(backward=True), **setup.evolve_overrides()},
                        FLAGS)
    assert setup.evolve_options(effective).eval.backward is True
    applied, fixed = split_given(effective)
    assert "eval" not in applied
    assert [(g.table, g.key, g.source) for g in fixed] == [("eval", "backward", "--backward")]
    unset = resolve(None, {**eval_overrides(), **setup.evolve_overrides()}, FLAGS)
    assert setup.evolve_options(unset).eval.backward is False


def test_the_prompt_states_the_tolerance_the_judge_holds_outputs_to():
    """The run's --atol/--rtol, else the task's output_atol/output_rtol, else the
    dtype's: the rule the judge uses (config.tolerances), not the dtype's alone."""
    loose = TASK + "\noutput_atol = 0.003\noutput_rtol = 0.002\n"
    search = SearchConfig()

    def stated(task_source: str, config: EvalConfig) -> str:
        proposer = _proposer(object(), None, task_from_source(task_source), search, config)
        request = PromptRequest(task_source=task_source, backend="triton", precision="fp32",
                                mode="rewrite", parent=Exemplar("p-1", PARENT, None),
                                tolerance=proposer.tolerance)
        return build_messages(request)[0]["content"]

    assert "atol = 0.0001" in stated(TASK, EvalConfig())
    assert "atol = 0.003" in stated(loose, EvalConfig())
    assert "rtol = 0.002" in stated(loose, EvalConfig())
    overridden = stated(loose, EvalConfig(atol=5e-5))
    assert "atol = 5e-05" in overridden and "rtol = 0.002" in overridden
