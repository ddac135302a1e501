"""Nsight Compute's raw CSV, its permission error and its absence."""

from __future__ import annotations

import os
import tempfile

from kernelevo.evaluate.parent import ncu

# The shape `ncu --csv --page raw` prints: names, units, then one row per launch.
SAMPLE = "\n".join([
    '==PROF== Connected to process 4242 (/usr/bin/python3.11)',
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","dram__throughput.avg.pct_of_peak_sustained_elapsed",'
    '"sm__throughput.avg.pct_of_peak_sustained_elapsed",'
    '"sm__warps_active.avg.pct_of_peak_sustained_active","launch__registers_per_thread",'
    '"launch__shared_mem_per_block_static","launch__shared_mem_per_block_dynamic",'
    '"gpu__time_duration.sum",'
    '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio"',
    '"","","","","","","","","","","","%","%","%","register/thread","byte","byte/block","nsecond",'
    '"inst","inst","inst","inst"',
    '"0","4242","python3.11","127.0.0.1","softmax_kernel","1","7","(256, 1, 1)","(4096, 1, 1)",'
    '"0","9.0","87.31","21.50","78.02","32","0","1,024","280,512","12.5","0.3","1.9","0.8"',
    '"1","4242","python3.11","127.0.0.1","copy_kernel","1","7","(128, 1, 1)","(64, 1, 1)",'
    '"0","9.0","40.00","5.00","n/a","16","0","0","3,100","2.0","0.1","0.2","0.1"',
    '==PROF== Disconnected from process 4242',
])


def test_raw_csv_gives_the_fixed_metrics_and_top_stalls_per_kernel():
    first, second = ncu.parse_raw_csv(SAMPLE)
    assert first.name == "softmax_kernel"
    assert first.metrics == {"dram_throughput_pct": 87.31, "sm_throughput_pct": 21.5,
                             "achieved_occupancy_pct": 78.02, "registers_per_thread": 32.0,
                             "shared_static_bytes": 0.0, "shared_dynamic_bytes": 1024.0,
                             "duration_ns": 280512.0}
    assert first.stalls == (("long_scoreboard", 12.5), ("wait", 1.9), ("not_selected", 0.8))
    assert "achieved_occupancy_pct" not in second.metrics  # n/a stays out


def test_permission_error_is_named_with_its_fix():
    text = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
            "GPU Performance Counters on the target device 0.")
    assert ncu.parse_raw_csv(text) == []
    assert "not permitted (ERR_NVGPUCTRPERM)" in ncu.problem_in(text)
    assert ncu.problem_in("==PROF== all fine") == ""


def test_absent_ncu_is_reported_without_running_anything(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    run = ncu.measure(["k"], "task.py", "candidate.py", "fp32")
    assert run.kernels == () and "ncu is not on PATH" in run.problem


def test_command_filters_the_named_kernels_and_asks_for_every_metric(tmp_path):
    line = ncu.command("ncu", ["softmax_kernel", "a.b"], ["python", "x.py"], tmp_path / "l.csv")
    assert line[line.index("--kernel-name") + 1] == r"regex:softmax_kernel|a\.b"
    assert line[line.index("--launch-count") + 1] == "2"
    metrics = line[line.index("--metrics") + 1].split(",")
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in metrics
    assert len(metrics) == len(ncu.METRICS) + len(ncu.STALL_REASONS)
    assert line[-2:] == ["python", "x.py"]


def test_the_profiled_process_gets_no_secrets_and_a_folder_of_its_own(tmp_path, monkeypatch):
    """ncu starts the candidate outside the sandbox: at least no key reaches it."""
    seen = tmp_path / "seen.txt"
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\n{{ pwd; env; }} > {seen}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-candidates")
    run = ncu.measure(["k"], "task.py", "candidate.py", "fp32", ncu=str(fake))
    text = seen.read_text()
    assert "sk-not-for-candidates" not in text and "OPENAI_API_KEY" not in text
    assert text.splitlines()[0].startswith(tempfile.gettempdir())  # not the user's folder
    assert run.kernels == () and "measured no kernel" in run.problem


def test_the_profiled_process_finds_kernelevo_from_its_own_folder(tmp_path, monkeypatch):
    """ncu starts the target in a temporary folder: a relative PYTHONPATH must not strand it."""
    import os
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    environment = ncu.target_environment({**os.environ, "PYTHONPATH": "src"})
    assert all(os.path.isabs(path) for path in environment["PYTHONPATH"].split(os.pathsep))
    elsewhere = tempfile.mkdtemp(prefix="kernelevo-ncu-test-")
    # -S: no site-packages, so only PYTHONPATH can find the package (not an installed copy)
    done = subprocess.run([sys.executable, "-S", "-c", "import kernelevo.version"],
                          cwd=elsewhere, env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_failed_program_under_ncu_is_named_with_its_own_error():
    text = "\n".join([
        "==PROF== Connected to process 11",
        "Traceback (most recent call last):",
        "ModuleNotFoundError: No module named 'kernelevo'",
        "==ERROR== The application returned an error code (1).",
    ])
    problem = ncu.problem_in(text)
    assert problem.startswith("Nsight Compute failed: ==ERROR== The application returned")
    assert "No module named 'kernelevo'" in problem


def test_the_profiled_process_gets_the_users_files_from_any_folder(tmp_path, monkeypatch):
    """Relative task and candidate paths reach ncu's target as absolute ones that exist."""
    work = tmp_path / "work"
    (work / "examples").mkdir(parents=True)
    (work / "examples" / "task.py").write_text("# task\n")
    (work / "examples" / "candidate.py").write_text("# candidate\n")
    seen = tmp_path / "argv.txt"
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > {seen}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.chdir(work)
    ncu.measure(["k"], "examples/task.py", "./examples/candidate.py", "fp32")
    argv = seen.read_text().splitlines()
    task, candidate, precision = argv[-3:]
    assert precision == "fp32"
    assert task == str(work / "examples" / "task.py") and os.path.isfile(task)
    assert candidate == str(work / "examples" / "candidate.py") and os.path.isfile(candidate)
