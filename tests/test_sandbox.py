"""The sandbox's children: what they start with, and how they end when killed."""

import sys
import tempfile
import time

import torch

from kernelevo.evaluate.sandbox import run_job


def report_start(payload, channel):
    channel.send("start", preloaded=sorted(m for m in ("torch._dynamo", "torch._inductor.compile_fx")
                                           if m in sys.modules),
                 tempdir=tempfile.gettempdir(), taken=payload["taken"])


def sleep_forever(payload, channel):
    channel.send("sleeping")
    while True:
        time.sleep(1)


def test_children_start_with_imports_done_and_their_own_temporary_folder(tmp_path):
    # The judge's process asks for the temporary folder first, as imports do.
    taken = tempfile.gettempdir()
    result = run_job(report_start, {"taken": taken}, tmp_path / "job", timeout_s=60,
                    output_limit_bytes=1 << 20)
    (message,) = [m for m in result.messages if m["kind"] == "start"]
    # Inductor only where torch is built for CUDA: only GPU timing compiles.
    gpu_build = torch.version.cuda is not None
    assert message["preloaded"] == ["torch._dynamo"] + ["torch._inductor.compile_fx"] * gpu_build
    assert message["tempdir"].startswith(str(tmp_path / "job" / "work"))
    assert result.exit_code == 0 and not result.timed_out


def test_a_child_past_its_limit_is_killed_and_gone_before_the_job_returns(tmp_path):
    started = time.monotonic()
    result = run_job(sleep_forever, {}, tmp_path / "job", timeout_s=2,
                    output_limit_bytes=1 << 20)
    assert result.timed_out and result.signal_name == "SIGKILL"
    assert [m["kind"] for m in result.messages] == ["isolation", "sleeping"]
    assert 0.0 <= result.exit_wait_s < 5.0
    assert time.monotonic() - started < 15.0
