"""The command line: exit codes, JSON verdicts, readable output, clear errors."""

import json
import os
import subprocess
import sys

from tests.conftest import ROOT, write

ADD_TASK = ROOT / "tests/fixtures/tasks/add.py"
HONEST = ROOT / "tests/fixtures/candidates/honest_add.py"
WRONG = ROOT / "tests/fixtures/candidates/off_by_one_mask.py"


def kernelevo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kernelevo.cli.app", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_eval_json_of_an_honest_candidate():
    done = kernelevo("eval", str(ADD_TASK), str(HONEST), "--json")
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["status"] == "ok" and verdict["reason"] == "passed"
    assert verdict["errors"]["mismatch_fraction"] == 0.0
    assert any("timings unavailable" in note for note in verdict["notes"])
    assert verdict["speedup_vs_eager"] is None  # never a number without a GPU


def test_eval_of_a_wrong_candidate_exits_1_and_says_where():
    done = kernelevo("eval", str(ADD_TASK), str(WRONG))
    assert done.returncode == 1
    assert "INCORRECT" in done.stdout and "output_mismatch" in done.stdout
    assert "index" in done.stdout and "expected" in done.stdout


def test_bad_inputs_exit_2_with_the_fix(tmp_path):
    done = kernelevo("eval", str(tmp_path / "missing.py"), str(HONEST))
    assert done.returncode == 2 and "missing.py does not exist" in done.stderr
    done = kernelevo("eval", str(ADD_TASK), str(write(tmp_path, "c.py", "x = 1\n")))
    assert done.returncode == 2 and "defines no ModelNew" in done.stderr
    done = kernelevo("eval", str(ADD_TASK), str(HONEST), "--precision", "fp8")
    assert done.returncode == 2 and "fp32" in done.stderr


def test_compare_two_candidates_without_gpu():
    other = ROOT / "tests/fixtures/candidates/honest_add.py"
    done = kernelevo("compare", str(ADD_TASK), str(HONEST), str(other), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["a"]["status"] == "ok" and result["b"]["status"] == "ok"
    assert result["faster"] is None  # no timings on the CPU, so no winner is claimed


def test_evolve_without_llm_or_kernel_seed_says_what_to_do(tmp_path):
    done = kernelevo("evolve", str(ADD_TASK), "--runs-dir", str(tmp_path))
    assert done.returncode == 2
    assert "--seed" in done.stderr and "--model" in done.stderr


def test_compare_decides_only_above_noise():
    from kernelevo.evaluate.parent.compare import _decide
    from kernelevo.evaluate.verdict import TimingStats, verdict_for

    def timed(median_ms, iqr_ms):
        stats = TimingStats(median_ms, iqr_ms, median_ms * 0.9, 100)
        return verdict_for("passed", timings={"candidate": stats}, speedup_vs_eager=1.0)

    clear = _decide(timed(1.0, 0.01), timed(1.5, 0.01))
    assert clear.faster == "a" and abs(clear.ratio - 1.5) < 1e-9 and clear.significant
    noisy = _decide(timed(1.0, 0.2), timed(1.05, 0.2))
    assert noisy.faster == "a" and not noisy.significant


def test_export_over_an_existing_file_exits_2_and_names_it(tmp_path):
    from kernelevo.candidate import Candidate
    from kernelevo.store.run_store import RunStore

    with RunStore.create(tmp_path / "runs", "add", ADD_TASK.read_text(), {}, run_id="r") as store:
        store.add_candidate(Candidate(HONEST.read_text(), "triton", origin="seed"))
    taken = write(tmp_path, "taken.py", "keep me")
    done = kernelevo("export", "r", "--candidate", "c0001", "-o", str(taken), "--no-recheck",
                     "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 2 and f"{taken} exists" in done.stderr
    assert "--force" in done.stderr and taken.read_text() == "keep me"
    done = kernelevo("export", "r", "--candidate", "c0001", "-o", str(taken), "--no-recheck",
                     "--force", "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    assert "ModelNew" in taken.read_text()


def test_eval_starts_the_forkserver_before_the_command_imports_torch():
    """Its imports (torch, dynamo, inductor: seconds) then run beside the command's own."""
    probe = (
        "import sys\n"
        "from multiprocessing import forkserver\n"
        "import kernelevo.cli.app as cli\n"
        "assert 'torch' not in sys.modules, 'the command line imports torch at its start'\n"
        "assert cli._service_or_forkserver(True, None) is None\n"
        "assert forkserver._forkserver._forkserver_pid is not None\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
