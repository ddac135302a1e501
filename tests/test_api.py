"""The Python API: docs/api.md runs as written, from scripts without a __main__ guard."""

import asyncio
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

import kernelevo
from kernelevo import api
from kernelevo.candidate import Candidate
from kernelevo.errors import CandidateError, ConfigError, TaskError
from kernelevo.task import Task
from tests.conftest import ROOT, write

ADD_TASK = ROOT / "tests/fixtures/tasks/add.py"
HONEST = ROOT / "tests/fixtures/candidates/honest_add.py"


def python(args: list[str], cwd, timeout_s: float = 900) -> subprocess.CompletedProcess:
    """Run Python as a user would: no pytest, the package from src/, a private runs folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200",
           "KERNELEVO_RUNS_DIR": str(cwd / "runs")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout_s)


def doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs/api.md").read_text(), re.S)


@pytest.mark.slow
def test_docs_examples_run_as_one_script_without_a_main_guard(tmp_path):
    script = "\n".join(doc_blocks())
    assert "__main__" not in script and "kernelevo.evolve(" in script
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    write(tmp_path, "examples_from_docs.py", script)
    done = python(["examples_from_docs.py"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok passed" in done.stdout
    assert "passed pytorch_only" in done.stdout
    # Written beside the run, not into the folder the script ran in: a second run works too.
    assert not (tmp_path / "softmax_best.py").exists()
    assert len(list((tmp_path / "runs").glob("*/softmax_best.py"))) == 1
    assert "softmax_best.py ok" in done.stdout


def test_python_c_judges_without_a_guard(tmp_path):
    code = (f"import kernelevo; v = kernelevo.evaluate({str(ADD_TASK)!r}, {str(HONEST)!r}, "
            "input_sets=2); print(v.status, v.reason)")
    done = python(["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ok passed" in done.stdout


def test_a_task_imports_a_module_beside_it_from_a_module_run_with_dash_m(tmp_path):
    folder = tmp_path / "task_with_helper"
    folder.mkdir()
    write(folder, "scaling.py", "FACTOR = 3\n\n\ndef scaled(x):\n    return x * FACTOR\n")
    write(folder, "task.py", textwrap.dedent("""
        import torch
        import torch.nn as nn
        from scaling import scaled

        size = 64


        class Model(nn.Module):
            def forward(self, x):
                return scaled(x)


        def get_inputs():
            return [torch.randn(size, size)]


        def get_init_inputs():
            return []
    """))
    # Run with -m, whose children multiprocessing would otherwise import the module again.
    write(tmp_path, "judge_it.py", textwrap.dedent(f"""
        import kernelevo

        candidate = (
            "import torch.nn as nn\\n"
            "class ModelNew(nn.Module):\\n"
            "    def forward(self, x):\\n"
            "        return x * 3\\n"
        )
        verdict = kernelevo.evaluate({str(folder / "task.py")!r}, candidate, input_sets=2)
        print(verdict.status, verdict.reason, verdict.message)
    """))
    done = python(["-m", "judge_it"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ok pytorch_only" in done.stdout, done.stdout


def test_import_is_cheap_and_evaluate_is_both_function_and_package():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, kernelevo; print(sorted(m for m in sys.modules "
         "if m.split('.')[0] in ('torch', 'triton', 'rich', 'typer')))"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "torch" not in done.stdout and "typer" not in done.stdout, done.stdout
    from kernelevo.evaluate.verdict import Verdict  # the subpackage is still importable

    assert callable(kernelevo.evaluate) and kernelevo.evaluate.verdict.Verdict is Verdict
    assert "candidate" in str(__import__("inspect").signature(kernelevo.evaluate))
    assert kernelevo.compare is api.compare and kernelevo.export is api.export
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        kernelevo.nothing  # noqa: B018


def test_tasks_and_candidates_come_as_paths_text_or_objects(tmp_path):
    source = ADD_TASK.read_text()
    assert api.as_task(str(ADD_TASK)).name == "add" and api.as_task(ADD_TASK).source == source
    from_text = api.as_task(source)
    assert isinstance(from_text, Task) and from_text.constants["dim"] == 1000
    assert api.as_task(from_text) is from_text
    with pytest.raises(TaskError, match="missing.py does not exist"):
        api.as_task(str(tmp_path / "missing.py"))
    candidate = api.as_candidate(HONEST.read_text())
    assert candidate.backend == "triton" and api.as_candidate(candidate) is candidate
    assert api.as_candidate(HONEST).name == "honest_add"
    with pytest.raises(CandidateError, match="no ModelNew"):
        api.as_candidate("import torch\nx = 1\n")
    assert isinstance(api.as_candidate(HONEST, backend="pytorch"), Candidate)


def test_settings_are_named_as_in_the_config_file():
    config = api._eval_config(None, {"precision": "fp16", "timing": "call", "input_sets": 4,
                                     "baselines": ("eager",)})
    assert (config.precision, config.input_sets) == ("fp16", 4)
    assert config.timing.measure == "call" and config.timing.baselines == ("eager",)
    with pytest.raises(ConfigError, match="unknown settings \\['precison'\\].*precision"):
        api._eval_config(None, {"precison": "fp16"})
    with pytest.raises(ConfigError, match="fp32"):
        api._eval_config(None, {"precision": "fp8"})


def test_evolve_and_export_say_what_is_missing(tmp_path):
    with pytest.raises(ConfigError, match="give a task, or resume"):
        kernelevo.evolve()
    with pytest.raises(ConfigError, match=r"\[search\] backend.*one of triton, cuda"):
        kernelevo.evolve(ADD_TASK, backend="pytorch", runs_dir=tmp_path)
    with pytest.raises(ConfigError, match="not both"):
        kernelevo.export("any", tmp_path / "out.py", best=True, candidate="c1",
                         runs_dir=tmp_path)
    assert not (tmp_path / "out.py").exists()


def test_work_that_runs_its_own_event_loop_moves_to_a_thread_inside_a_running_one():
    here = threading.current_thread()
    assert api._outside_event_loop(threading.current_thread) is here

    async def in_a_notebook():
        return api._outside_event_loop(
            lambda: (threading.current_thread(), asyncio.run(asyncio.sleep(0, "ran"))))

    thread, ran = asyncio.run(in_a_notebook())
    assert thread is not here and ran == "ran"


def test_evolve_memory_false_turns_recall_and_recording_off(tmp_path, monkeypatch):
    import kernelevo.run.driver as driver

    given = []
    monkeypatch.setattr(driver, "run_evolve", lambda task, options, view: given.append(options))
    task = tmp_path / "task.py"
    task.write_text((ROOT / "tests/fixtures/tasks/add.py").read_text())
    api.evolve(str(task), runs_dir=tmp_path / "runs", memory=False, quiet=True)
    api.evolve(str(task), runs_dir=tmp_path / "runs", quiet=True)
    assert [options.memory.enabled for options in given] == [False, True]
