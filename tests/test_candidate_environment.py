"""A candidate starts with an allow-list of the judge's environment: no user's secret reaches it.

A user's DATABASE_URL or GITHUB_PAT in the judge's environment must not
reach a candidate (which would raise with it, into the verdict and the next
prompt), judged here or by `kernelevo serve`, with or without the static
checks.
"""

from __future__ import annotations

import json
from multiprocessing import forkserver

import pytest

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import child_environment
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.sandbox import redact
from kernelevo.evaluate.sandbox.environment import (ALLOWED_NAMES, ALLOWED_PREFIXES,
                                                    candidate_environment, is_allowed)
from kernelevo.evaluate.sandbox.environment import cache_environment
from kernelevo.task import load_task
from tests.conftest import ROOT
from tests.test_service_hardening import Service, _job, _judge

TASK = ROOT / "tests/fixtures/tasks/add.py"
LEAK = ROOT / "tests/fixtures/candidates/environment_leak.py"
DATABASE_URL = "postgres://admin:hunter2-database@db.internal/production"
GITHUB_PAT = "ghp_" + "Zq7" * 12
CANARY = "allowed-and-seen"  # a variable the candidate may see, proving it read the environment
PLANTED = {"DATABASE_URL": DATABASE_URL, "GITHUB_PAT": GITHUB_PAT,
           "KERNELEVO_TEST_CANARY": CANARY}


def test_only_the_listed_names_and_prefixes_pass():
    judge = {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C",
             "CUDA_VISIBLE_DEVICES": "0", "TRITON_CACHE_DIR": "/c/triton",
             "TORCH_CUDA_ARCH_LIST": "9.0", "PYTORCH_ALLOC_CONF": "expandable_segments:True",
             "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "MAX_JOBS": "8", "CXX": "g++",
             "PYTHONPATH": "src", "KERNELEVO_CACHE_DIR": "/c",
             "DATABASE_URL": DATABASE_URL, "GITHUB_PAT": GITHUB_PAT, "AWS_REGION": "eu-west-1",
             "SSH_AUTH_SOCK": "/tmp/agent", "PGPASSFILE": "/root/.pgpass", "EDITOR": "vim"}
    kept = candidate_environment(judge)
    assert set(kept) == {"PATH", "HOME", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES",
                         "TRITON_CACHE_DIR", "TORCH_CUDA_ARCH_LIST", "PYTORCH_ALLOC_CONF",
                         "LD_LIBRARY_PATH", "MAX_JOBS", "CXX", "PYTHONPATH",
                         "KERNELEVO_CACHE_DIR"}
    assert all(kept[name] == judge[name] for name in kept)


def test_secret_names_and_url_passwords_are_dropped_even_when_listed():
    judge = {"TORCH_HUB_TOKEN": "t" * 20, "TRITON_API_KEY": "k" * 20,
             "KERNELEVO_SERVICE_TOKEN": "s" * 20, "CUDA_PASSWORD": "p",
             "TRITON_REMOTE_CACHE_URL": "redis://cache:secret-word@cache.internal:6379",
             "TRITON_CACHE_URL_PLAIN": "http://cache.internal:8080/path@v1",
             "MY_LLM": "m", "TORCH_LLM": "x"}
    redact.hide_variable("TORCH_LLM")
    assert candidate_environment(judge) == {
        "TRITON_CACHE_URL_PLAIN": "http://cache.internal:8080/path@v1"}
    assert not is_allowed("TORCH_LLM") and not is_allowed("MY_LLM")


def test_what_the_judge_itself_hands_its_children_is_all_allowed(tmp_path):
    handed = {**cache_environment(tmp_path), **child_environment("cpu", 0),
              "TRITON_INTERPRET": "1", "PYTHONPYCACHEPREFIX": str(tmp_path),
              "KERNELEVO_PYCACHE": str(tmp_path), "KERNELEVO_PCH_BACKGROUND": "1"}
    assert candidate_environment(handed) == handed


def test_the_documentation_lists_every_name_and_prefix_passed_on():
    text = " ".join((ROOT / "docs/evaluation.md").read_text().split())
    missing = [name for name in sorted(ALLOWED_NAMES) + list(ALLOWED_PREFIXES)
               if f"`{name}`" not in text]
    assert not missing, f"docs/evaluation.md does not list {missing}"


@pytest.fixture(scope="module")
def planted():
    """The user's secrets in the judge's environment; the forkserver starts again with them."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in PLANTED.items():
            patch.setenv(name, value)
        forkserver._forkserver._stop()
        yield
    forkserver._forkserver._stop()


def _assert_nothing_leaked(text: str) -> None:
    assert f"KERNELEVO_TEST_CANARY={CANARY}" in text  # the candidate ran and read its environment
    assert "DATABASE_URL=None" in text and "GITHUB_PAT=None" in text
    for secret in (DATABASE_URL, GITHUB_PAT, "hunter2-database", "ghp_"):
        assert secret not in text


@pytest.mark.parametrize("static", [False, True])
def test_a_candidate_judged_here_sees_no_secret_of_the_user(planted, static):
    judge = Judge(load_task(str(TASK)), EvalConfig(static_checks=static, vary_shapes=False,
                                                   timeout_s=120))
    verdict = judge.evaluate(load_candidate(str(LEAK)))
    assert verdict.status == "runtime_error", (verdict.reason, verdict.message)
    assert "torch.os:" in verdict.message
    _assert_nothing_leaked(json.dumps(verdict.to_dict()))


def test_a_candidate_judged_by_serve_sees_no_secret_of_the_user(tmp_path):
    service = Service(tmp_path, extra_environment=PLANTED)
    try:
        answers = [_judge(service, _job(LEAK, static_checks=static, vary_shapes=False))
                   for static in (False, True)]
    finally:
        service.stop()
    for status, body, _ in answers:
        assert status == 200, body
        verdict = json.loads(body)["verdicts"][0]
        assert verdict["status"] == "runtime_error" and "torch.os:" in verdict["message"], body
        _assert_nothing_leaked(body)
