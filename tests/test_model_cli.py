"""`kernelevo model profile|extract` on the command line: the clock named, JSON, bad input."""

import json

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
