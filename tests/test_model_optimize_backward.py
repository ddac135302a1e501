"""`kernelevo model optimize --backward`: training tasks searched, the kernels' own backward put
back, and the patched model trained against the original.

The end-to-end test runs the real tuner and judge (Triton interpreter, no GPU) on a small net
whose LayerNorm has examples/layernorm_backward's forward and backward kernels as its seed.
"""

import copy
import json

import pytest
import torch
from typer.testing import CliRunner

import kernelevo.model.optimize as optimize_module
from kernelevo.cli.app import app
from kernelevo.errors import ConfigError
from kernelevo.model.apply import apply
from kernelevo.model.contract import build_model, model_file
from kernelevo.model.optimize import (OptimizeOptions, choose_spots, has_own_backward,
                                      load_state, optimize)
from kernelevo.model.profile import profile_model
from kernelevo.model.report import report_markdown
from kernelevo.model.swap import _SWAPS
from kernelevo.model.verify import check_training, verify
from tests.test_model_train import KERNEL, MODEL, STEPS, Launches, _train

LOSS_TOLERANCE = 1e-5
# A kernel for the net's norm without a backward of its own: PyTorch's autograd would
# differentiate it, which the judge of a training task refuses.
FORWARD_ONLY = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(32))
        self.bias = nn.Parameter(torch.zeros(32))

    def forward(self, x0):
        return F.layer_norm(x0, (32,), self.weight, self.bias)
'''
WITH_BACKWARD = '''
import torch


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
'''


def _folder(tmp_path, seeds: dict[str, str]):
    (tmp_path / "net.py").write_text(MODEL)
    folder = tmp_path / "seeds"
    folder.mkdir()
    for name, text in seeds.items():
        (folder / f"{name}.py").write_text(text)
    return str(folder)


def _options(tmp_path, **changes) -> OptimizeOptions:
    base = dict(model_path=str(tmp_path / "net.py"), out_dir=str(tmp_path / "out"),
                paths=("norm",), seeds_dir=str(tmp_path / "seeds"), candidates=2, device="cpu",
                backward=True)
    return OptimizeOptions(**{**base, **changes})


def test_optimize_backward_puts_back_a_kernel_whose_own_backward_trains_the_model(
        tmp_path, monkeypatch):
    _folder(tmp_path, {"norm": KERNEL})
    data = optimize(_options(tmp_path), say=print)
    out = tmp_path / "out"
    state = json.loads((out / "state.json").read_text())
    assert state["backward"] is True and state["tasks"]["norm"]["status"] == "done"
    assert json.loads((out / "tasks/manifest.json").read_text())["tasks"][0]["backward"]
    assert [(s["path"], s["training"]) for s in data["applied"]["swapped"]] == [("norm", True)]
    verification = data["verification"]
    assert verification["correct"] and verification["mode"] == "training"
    assert verification["training"]["correct"] and verification["training"]["steps"] == 3
    assert set(verification["timings"]) == {"eager_original", "eager_patched",
                                            "compile_original", "compile_patched"}
    report = (out / "model_report.md").read_text()
    assert "- mode: training" in report and "3 SGD steps match" in report

    # The kernel the loop wrote, put back into a fresh model: its backward kernel trains it.
    original = build_model(model_file(tmp_path / "net.py")).module
    model = copy.deepcopy(original)
    applied = apply(model, out / "kernels", tasks=out / "tasks")
    assert [s.path for s in applied.swapped] == ["norm"] and applied.swapped[0].training
    kernel_globals = _SWAPS[applied.swapped[0].slot].kernel.forward.__globals__
    launches = Launches(kernel_globals["_layernorm_backward"])
    monkeypatch.setitem(kernel_globals, "_layernorm_backward", launches)
    expected, got = _train(original, compiled=False), _train(model, compiled=False)
    assert launches.count == STEPS
    torch.testing.assert_close(got, expected, atol=LOSS_TOLERANCE, rtol=LOSS_TOLERANCE)


def test_a_seed_without_a_backward_skips_its_training_task_and_says_why(tmp_path):
    _folder(tmp_path, {"norm": FORWARD_ONLY})
    said: list[str] = []

    def never(*args, **kwargs):
        raise AssertionError("a task without a usable seed is not searched")

    data = optimize(_options(tmp_path, timed=False), evolve=never, export=never,
                    say=said.append)
    reason = json.loads((tmp_path / "out/state.json").read_text())["tasks"]["norm"]["reason"]
    assert reason == (
        "seed kernel norm.py has no backward of its own (no torch.autograd.Function with a "
        "backward), which a training task (--backward) needs, and no --model: add "
        f"{tmp_path / 'seeds/norm.py'} (a forward and backward kernel: a torch.autograd."
        "Function, as in examples/layernorm_backward/) or pass --model/--base-url")
    assert f"norm: skipped ({reason})" in said
    assert data["applied"]["swapped"] == []
    assert data["verification"]["correct"] and data["verification"]["mode"] == "training"


def test_with_an_llm_a_forward_only_seed_is_left_out_of_the_search(tmp_path):
    _folder(tmp_path, {"norm": FORWARD_ONLY})
    calls: list[dict] = []

    def search(task, **kwargs):
        calls.append(kwargs)
        raise KeyboardInterrupt  # the call is what this test looks at

    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        optimize(_options(tmp_path, models=("some-model",)), evolve=search, export=None,
                 say=said.append)
    assert calls[0]["seeds"] is None
    assert "norm: seed kernel norm.py has no backward of its own: the LLM starts without it" \
        in said


def test_without_an_llm_only_seeds_with_a_backward_are_taken(tmp_path):
    seeds = _folder(tmp_path, {"norm": FORWARD_ONLY, "fc1": WITH_BACKWARD})
    assert has_own_backward(tmp_path / "seeds/fc1.py")
    assert not has_own_backward(tmp_path / "seeds/norm.py")
    profile = profile_model(str(tmp_path / "net.py"), device="cpu", repeats=1)
    options = _options(tmp_path, paths=(), top=3, leaves=True)
    state: dict = {}
    spots = choose_spots(profile, options, state, print)
    assert [spot.name for spot in spots] == ["fc1"]
    reasons = {record["name"]: record["reason"] for record in state["passed_over"]}
    assert set(reasons) == {"norm", "fc2"}
    assert reasons["norm"].startswith("seed kernel norm.py has no backward of its own")
    assert reasons["fc2"].startswith("no seed kernel in --seeds and no --model: add "
                                     f"{seeds}/fc2.py (a forward and backward kernel")
    with pytest.raises(ConfigError, match="no hot submodule has a seed kernel with its own "
                                          "backward and no --model"):
        choose_spots(profile, _options(tmp_path, paths=(), top=3, leaves=True,
                                       seeds_dir=None), {}, print)


def test_a_resume_with_the_other_backward_is_refused_once_tasks_are_extracted(tmp_path):
    (tmp_path / "net.py").write_text(MODEL)
    out = tmp_path / "out"
    out.mkdir()
    model = str((tmp_path / "net.py").resolve())
    state = {"model": model, "done": ["profile"], "tasks": {}}
    (out / "state.json").write_text(json.dumps(state))
    assert load_state(out, _options(tmp_path))["backward"] is True  # nothing extracted yet
    (out / "state.json").write_text(json.dumps({**state, "done": ["profile", "extract"]}))
    with pytest.raises(ConfigError) as caught:
        load_state(out, _options(tmp_path))
    assert str(caught.value) == (f"{out} holds forward-only tasks (extracted without "
                                 "--backward): run again without --backward to continue it, "
                                 "or give another -o folder")
    (out / "state.json").write_text(json.dumps({**state, "done": ["profile", "extract"],
                                                "backward": True}))
    with pytest.raises(ConfigError, match="holds training tasks"):
        load_state(out, _options(tmp_path, backward=False))


def test_the_cli_flag_reaches_the_loop(tmp_path, monkeypatch):
    seen: list[OptimizeOptions] = []

    def recording(options, **kwargs):
        seen.append(options)
        return {"verification": {"correct": True}}

    monkeypatch.setattr(optimize_module, "optimize", recording)
    done = CliRunner().invoke(app, ["model", "optimize", str(tmp_path / "net.py"), "-o",
                                    str(tmp_path / "out"), "--backward", "--device", "cpu",
                                    "--json"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    assert seen[0].backward is True
    assert "with a backward of their own" in done.output


class _DoubledGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class _WrongBackward(torch.nn.Module):
    """The original's forward, with every gradient through it doubled."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(_DoubledGrad.apply(x))


def test_the_training_check_names_the_gradient_that_differs_and_restores_the_weights():
    torch.manual_seed(0)
    original = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    patched = copy.deepcopy(original)
    patched[2] = _WrongBackward(patched[2])
    before = copy.deepcopy(patched.state_dict())
    check = check_training(original, patched, (torch.randn(4, 6),), "cpu")
    assert not check.correct
    assert check.message.startswith("the gradient of 0.weight at training step 1:")
    assert "max abs error" in check.message
    for name, value in patched.state_dict().items():
        assert torch.equal(value, before[name]), name
    same = check_training(original, copy.deepcopy(original), (torch.randn(4, 6),), "cpu")
    assert same.correct and same.losses_original == same.losses_patched


def test_a_patched_model_that_trains_differently_fails_verify_and_the_report_says_where():
    torch.manual_seed(0)
    original = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    patched = copy.deepcopy(original)
    patched[2] = _WrongBackward(patched[2])
    verification = verify(original, patched, (torch.randn(4, 6),), device="cpu", timed=False,
                          training=True)
    assert not verification.correct and verification.mode == "training"
    report = report_markdown({"verification": verification.to_dict()})
    assert "- outputs: match on 3 fresh input sets" in report
    assert "- training: DIFFERS over 3 SGD steps: the gradient of 0.weight at training step " \
        "1:" in report
