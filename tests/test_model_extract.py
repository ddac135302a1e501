"""`kernelevo model profile` and `extract`: ranked submodules, tasks that run and judge alone."""

import json
import textwrap

import pytest
import torch

from kernelevo.errors import TaskError
from kernelevo.model.contract import build_model, model_file
from kernelevo.model.extract import extract, load_task_module, read_manifest, select_hot
from kernelevo.model.profile import ModelProfile, profile_model
from kernelevo.suite.tasks import expand_specs
from kernelevo.task import load_task
from tests.conftest import ROOT

BLOCK = ROOT / "examples/model_block/block.py"


@pytest.fixture(scope="module")
def block_profile():
    return profile_model(str(BLOCK), device="cpu", repeats=1)


def test_profile_ranks_submodules_by_cpu_time_with_their_inputs(block_profile):
    profile = block_profile
    assert profile.activity == "cpu" and profile.total_ms > 0
    times = [s.time_ms for s in profile.modules]
    assert times == sorted(times, reverse=True)
    by_path = {s.path: s for s in profile.modules}
    assert set(by_path) == {"ln1", "attn", "attn.qkv", "attn.softmax", "attn.proj", "ln2",
                            "mlp", "mlp.fc1", "mlp.gelu", "mlp.fc2"}
    softmax = by_path["attn.softmax"]
    assert [s.shape for s in softmax.inputs] == [(2, 2, 16, 16)]
    assert softmax.inputs[0].dtype == "float32" and softmax.calls_per_forward == 1
    assert by_path["attn"].time_ms >= softmax.time_ms  # inclusive of its children
    assert 0 < softmax.share < 1
    assert ModelProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile


def test_hot_spots_group_alike_submodules_and_never_nest(block_profile):
    spots = select_hot(block_profile, 3)
    paths = [p for spot in spots for p in spot.paths]
    assert len(spots) == 3
    for a in paths:
        assert not any(b.startswith(a + ".") for b in paths)
    leaves = select_hot(block_profile, 10, leaves=True)
    grouped = {spot.name: spot.paths for spot in leaves}
    assert grouped["ln1"] == ("ln1", "ln2")
    assert "attn" not in grouped and "mlp" not in grouped and len(leaves) == 7
    with pytest.raises(TaskError, match="no submodule 'attn.nothing'"):
        select_hot(block_profile, 1, paths=["attn.nothing"])


def test_extracted_tasks_rebuild_the_profiled_submodule_and_load_as_tasks(block_profile,
                                                                            tmp_path):
    spots = select_hot(block_profile, 10, paths=["ln2", "mlp.fc1"])
    extract(block_profile, spots, tmp_path)
    manifest = read_manifest(tmp_path)
    assert [t["paths"] for t in manifest["tasks"]] == [["ln2"], ["mlp.fc1"]]
    original = build_model(model_file(BLOCK)).module
    task = load_task_module(tmp_path, "mlp_fc1")
    reference = task.Model()
    assert torch.equal(reference.inner.weight, original.mlp.fc1.weight)
    inputs = task.get_inputs()
    assert [tuple(x.shape) for x in inputs] == [(2, 16, 64)]
    assert torch.equal(reference(*inputs), original.mlp.fc1(*inputs))
    # The weights' width is a literal; the sequence length a constant the judge may vary.
    loaded = load_task(str(tmp_path / "mlp_fc1.py"))
    assert loaded.constants == {"size0": 2, "size1": 16}
    listed = expand_specs([str(tmp_path)])
    assert sorted(t.key for t in listed) == ["ln2", "mlp_fc1"]


def test_a_kernelbench_model_file_profiles_and_extracts(tmp_path):
    path = tmp_path / "kb_model.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(width, width), nn.ReLU())

            def forward(self, x):
                return self.body(x)

        def get_inputs():
            return [torch.randn(8, 32)]

        def get_init_inputs():
            return [32]
    """))
    profile = profile_model(str(path), device="cpu", repeats=1)
    assert {s.path for s in profile.modules} == {"body", "body.0", "body.1"}
    extract(profile, select_hot(profile, 1, paths=["body.0"]), tmp_path / "tasks")
    task = load_task_module(tmp_path / "tasks", "body_0")
    torch.manual_seed(42)
    original = __import__("torch").nn.Linear(32, 32)  # what Model(32) draws first under 42
    assert torch.equal(task.Model().inner.weight, original.weight)


def test_a_model_whose_weights_ignore_the_seed_is_refused(tmp_path):
    path = tmp_path / "unseeded.py"
    path.write_text(textwrap.dedent("""
        import time
        import torch
        import torch.nn as nn

        def build():
            layer = nn.Linear(16, 16)
            noise = torch.Generator().manual_seed(time.perf_counter_ns())
            with torch.no_grad():
                layer.weight.copy_(torch.randn(16, 16, generator=noise))
            return nn.Sequential(layer), [torch.randn(2, 16)]
    """))
    profile = profile_model(str(path), device="cpu", repeats=1)
    with pytest.raises(TaskError, match="gave other weights"):
        extract(profile, select_hot(profile, 1, paths=["0"]), tmp_path / "tasks")


def test_a_file_without_build_or_model_is_refused_with_the_contract(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    with pytest.raises(TaskError, match=r"build\(\) -> \(nn.Module, inputs\)"):
        profile_model(str(path), device="cpu")
