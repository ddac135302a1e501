"""CUDA IPC reference-count files: a child removes those its exports made before it exits.

On a GPU, every storage a child hands over (transfer._export_one) has its
reference count in a file in /dev/shm, and a child's `os._exit` skips
PyTorch's own removal: a suite left about 8 a verdict. These tests stand in
for the export by naming files as PyTorch does.
"""

import os
import uuid
from pathlib import Path

import pytest

from kernelevo.evaluate.sandbox.jobs import run_job
from kernelevo.evaluate.shared import transfer

SHM = Path("/dev/shm")


def _name() -> str:
    return f"/torch_{os.getpid()}_{uuid.uuid4().int % 10**9}_0"


def test_only_files_named_as_pytorch_names_them_are_removed(tmp_path, monkeypatch):
    ours, theirs = _name(), "/torch_1_2"  # a name not of PyTorch's form is never touched
    for name in (ours, theirs, "/other"):
        (tmp_path / name.lstrip("/")).write_text("")
    monkeypatch.setattr(transfer, "_count_files", {ours, theirs, "/../other", "/other"})
    assert transfer.remove_count_files(str(tmp_path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "torch_1_2"]
    assert transfer._count_files == set()
    assert transfer.remove_count_files(str(tmp_path)) == 0  # nothing left to remove


def export_like_a_gpu_child(payload, channel):
    """Makes a count file in /dev/shm as _export_one's storage share does, and records it."""
    from kernelevo.evaluate.shared import transfer as child_transfer

    name = payload["name"]
    Path("/dev/shm" + name).write_text("")
    child_transfer._count_files.add(name)
    channel.send("made", seen=os.path.exists("/dev/shm" + name))


def test_a_gpu_job_leaves_no_count_file_behind(tmp_path):
    if not SHM.is_dir():
        pytest.skip("no /dev/shm on this machine: nothing to leave behind")
    name = _name()
    try:
        # device "cuda": the child shares the machine's /dev/shm, as a GPU job does
        result = run_job(export_like_a_gpu_child, {"name": name, "device": "cuda"},
                         tmp_path / "job", timeout_s=60, output_limit_bytes=1 << 20)
        assert result.exit_code == 0, result.log_tail
        (made,) = [m for m in result.messages if m["kind"] == "made"]
        assert made["seen"]
        assert not (SHM / name.lstrip("/")).exists()
    finally:
        (SHM / name.lstrip("/")).unlink(missing_ok=True)
