"""`kernelevo model` on the command line: the clock named, JSON, bad input, what to pass;
the end-to-end bench's refusal without a GPU."""

import json
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from kernelevo.cli.app import app
from tests.conftest import ROOT

BLOCK = str(ROOT / "examples/model_block/block.py")


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_profile_names_its_clock_and_prints_json():
    shown = cli("model", "profile", BLOCK, "--device", "cpu", "--repeats", "1")
    assert shown.exit_code == 0, shown.output
    assert "of CPU (no GPU) time" in shown.output and "attn.softmax" in shown.output
    data = json.loads(cli("model", "profile", BLOCK, "--device", "cpu", "--repeats", "1",
                          "--json").stdout)
    assert data["activity"] == "cpu"
    assert {m["path"] for m in data["modules"]} >= {"ln1", "mlp.gelu", "attn.softmax"}


def test_extract_writes_the_named_submodules_as_tasks(tmp_path):
    done = cli("model", "extract", BLOCK, "--paths", "mlp.gelu,attn.softmax", "-o",
               str(tmp_path), "--device", "cpu", "--json")
    assert done.exit_code == 0, done.output
    assert [t["name"] for t in json.loads(done.stdout)["tasks"]] == ["mlp_gelu", "attn_softmax"]
    assert (tmp_path / "mlp_gelu.py").is_file() and (tmp_path / "manifest.json").is_file()


def test_a_missing_model_file_exits_2_with_the_contract(tmp_path):
    done = cli("model", "profile", str(tmp_path / "nope.py"))
    assert done.exit_code == 2
    assert "model file" in done.output and "nope.py does not exist" in done.output
    assert "build() -> (model, inputs)" in done.output


def test_optimize_with_no_seed_for_any_hot_group_stops_with_what_to_pass(tmp_path):
    done = cli("model", "optimize", BLOCK, "--top", "2", "-o", str(tmp_path), "--device", "cpu")
    assert done.exit_code == 2, done.output
    assert "no hot submodule has a seed kernel and no --model is given" in done.output
    assert "pass --seeds DIR holding" in done.output and "--model/--base-url" in done.output
    assert (tmp_path / "profile.json").is_file()  # kept: a rerun with --seeds goes on from it


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the bench's answer without a GPU")
def test_the_end_to_end_bench_refuses_to_run_without_a_gpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(ROOT / "bench/model_e2e_accept.py"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 2
    assert "this bench times kernels on a GPU; no CUDA GPU" in done.stderr
    assert not (tmp_path / "out").exists()
