"""The memory store, signatures, recall and the `kernelevo memory` commands, without runs."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kernelevo.cli.app import app
from kernelevo.config_file import memory_config, resolve
from kernelevo.errors import ConfigError, MemoryStoreError
from kernelevo.memory.recall import recall
from kernelevo.memory.settings import MemoryConfig, store_path
from kernelevo.memory.signature import signature_of, similarity, task_key
from kernelevo.memory.store import SCHEMA_VERSION, FixMemory, KernelMemory, MemoryStore
from kernelevo.memory.transfer import export_memory, import_memory
from kernelevo.propose.prompt import Exemplar, PromptRequest, Remembered, build_messages
from tests.conftest import ROOT

SOFTMAX = (ROOT / "examples/softmax/task.py").read_text()
ADD = (ROOT / "tests/fixtures/tasks/add.py").read_text()
GOOD = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()


def resized(source: str, old: str, new: str) -> str:
    assert old in source
    return source.replace(old, new)


def remember(memory: MemoryStore, source: str, name: str, kernel: str = GOOD,
             backend: str = "triton") -> str:
    key = task_key(source)
    memory.note_task(key, name, signature_of(source, "fp32", backend), runs_added=1)
    memory.add_kernel(KernelMemory(key, kernel, backend, None, "", "", "run-1", "c1"))
    memory.add_fix(FixMemory(key, "runtime_error (kernel_failed): no attribute 'lod'", 2,
                             "--- parent\n+++ child\n-    x = tl.lod(p)\n+    x = tl.load(p)",
                             "run-1"))
    return key


def test_same_operators_at_other_sizes_are_alike_and_other_families_are_not():
    add = signature_of(ADD, "fp32", "triton")
    smaller = signature_of(resized(ADD, "dim = 1000", "dim = 100"), "fp32", "triton")
    softmax = signature_of(SOFTMAX, "fp32", "triton")
    assert add.ops == ("add",) and add.family == "elementwise" and add.ranks == (2, 2)
    assert softmax.family == "reduction" and "softmax" in softmax.ops
    assert similarity(add, smaller) >= 0.9
    assert similarity(add, softmax) < MemoryConfig().min_similarity
    assert similarity(add, signature_of(ADD, "fp32", "cuda")) == 0.0


def test_recall_brings_the_alike_tasks_kernels_and_lessons_within_the_token_bound(tmp_path):
    with MemoryStore(tmp_path / "m.db") as memory:
        remember(memory, ADD, "add")
        remember(memory, SOFTMAX, "softmax", kernel=GOOD.replace("1024", "256"))
        for index in range(40):  # many fixes: the lessons must stay within the bound
            memory.add_fix(FixMemory(task_key(ADD), f"incorrect (mismatch {index})", 1,
                                     "-a = 1\n+a = 2", f"run-{index}"))
        config = MemoryConfig(lessons_tokens=300)
        got = recall(memory, signature_of(resized(ADD, "dim = 1000", "dim = 77"), "fp32",
                                          "triton"), config)
    assert [task.name for task in got.tasks] == ["add"]
    assert [kernel.source for kernel in got.kernels] == [GOOD]
    assert "tl.lod(p) / + x = tl.load(p)" in got.lessons
    assert 0 < len(got.lessons.encode()) <= 300


def test_the_prompt_shows_remembered_kernels_in_rewrites_and_lessons_always():
    def user_prompt(mode: str) -> str:
        request = PromptRequest(ADD, "triton", "fp32", mode, Exemplar("c1", GOOD, None),
                                remembered=(Remembered("memory kernel 7 from add", "KERNEL_X"),),
                                lessons="- on add, LESSON_Y")
        return build_messages(request)[1]["content"]

    rewrite, diff = user_prompt("rewrite"), user_prompt("diff")
    assert "KERNEL_X" in rewrite and "memory kernel 7 from add" in rewrite
    assert "LESSON_Y" in rewrite and "LESSON_Y" in diff and "KERNEL_X" not in diff
    plain = build_messages(PromptRequest(ADD, "triton", "fp32", "rewrite",
                                         Exemplar("c1", GOOD, None)))[1]["content"]
    assert "Learned on similar tasks" not in plain


def test_a_newer_schema_is_refused_and_an_export_round_trips(tmp_path):
    with MemoryStore(tmp_path / "m.db") as memory:
        key = remember(memory, ADD, "add")
        exported = export_memory(memory)
    with MemoryStore(tmp_path / "other.db") as other:
        assert import_memory(other, exported)["kernels"] == 1
        assert import_memory(other, exported)["kernels"] == 0  # nothing twice
        assert [k.source for k in other.kernels(key)] == [GOOD]
        assert other.fixes(key)[0].occurrences == 2
        assert other.tasks()[0].runs == exported["tasks"][0]["runs"] == 1
        with pytest.raises(MemoryStoreError, match="not a KernelEvo memory export"):
            import_memory(other, {"tasks": []})
    connection = sqlite3.connect(tmp_path / "m.db")
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(MemoryStoreError, match="upgrade KernelEvo"):
        MemoryStore(tmp_path / "m.db")


def test_the_memory_table_sets_the_store_path_and_refuses_unknown_keys(tmp_path):
    config_file = tmp_path / "k.toml"
    config_file.write_text(f"[memory]\npath = '{tmp_path / 'here.db'}'\nkernels = 1\n")
    config = memory_config(resolve(config_file))
    assert store_path(config) == tmp_path / "here.db" and config.kernels == 1
    assert memory_config(resolve(None, {"memory": {"enabled": False}})).enabled is False
    config_file.write_text("[memory]\nkernel = 1\n")
    with pytest.raises(ConfigError, match="kernels"):
        resolve(config_file)


def test_forget_removes_a_tasks_memories_and_keeps_the_others(tmp_path):
    path = tmp_path / "m.db"
    with MemoryStore(path) as memory:
        add_key = remember(memory, ADD, "add")
        softmax_key = remember(memory, SOFTMAX, "softmax")
    runner = CliRunner()
    done = runner.invoke(app, ["memory", "forget", add_key[:8], "--store", str(path)])
    assert done.exit_code == 0, done.output
    assert "forgot add" in done.output and "1 kernel(s)" in done.output
    with MemoryStore(path) as memory:
        assert [task.key for task in memory.tasks()] == [softmax_key]
        assert memory.counts(add_key) == {"kernels": 0, "edits": 0, "fixes": 0}
        assert memory.counts(softmax_key)["kernels"] == 1
    missing = runner.invoke(app, ["memory", "forget", "nothing-like-it", "--store", str(path)])
    assert missing.exit_code == 2


def test_export_then_import_through_the_commands(tmp_path):
    with MemoryStore(tmp_path / "m.db") as memory:
        remember(memory, ADD, "add")
    runner = CliRunner()
    exported = tmp_path / "memory.json"
    assert runner.invoke(app, ["memory", "export", "-o", str(exported), "--store",
                               str(tmp_path / "m.db")]).exit_code == 0
    assert json.loads(exported.read_text())["tasks"][0]["name"] == "add"
    done = runner.invoke(app, ["memory", "import", str(exported), "--store",
                               str(tmp_path / "new.db")])
    assert done.exit_code == 0 and "1 new kernel(s)" in done.output
    listed = runner.invoke(app, ["memory", "list", "--json", "--store", str(tmp_path / "new.db")])
    assert json.loads(listed.output)[0]["kernels"] == 1


WRITER = """
import sys
from kernelevo.memory.store import KernelMemory, MemoryStore
from kernelevo.memory.signature import signature_of
memory = MemoryStore(sys.argv[1])
memory.note_task("k", "add", signature_of(open(sys.argv[2]).read(), "fp32", "triton"))
index = 0
while True:
    memory.add_kernel(KernelMemory("k", "kernel %d " % index + "x" * 20000, "triton", None,
                                   "", "", "run", "c%d" % index))
    print(index, flush=True)
    index += 1
"""


def test_a_store_killed_mid_write_keeps_every_committed_write(tmp_path):
    path = tmp_path / "m.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(ROOT / "tests/fixtures/tasks/add.py")],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    committed = -1
    assert writer.stdout is not None
    while committed < 60:
        committed = int(writer.stdout.readline())
    os.kill(writer.pid, signal.SIGKILL)  # mid-way through the next writes
    writer.wait()
    with MemoryStore(path) as memory:
        sources = {kernel.source.split(" x")[0] for kernel in memory.kernels("k", limit=10**6)}
        assert {f"kernel {i}" for i in range(committed + 1)} <= sources
    check = sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0]
    assert check == "ok"


def test_a_resumed_run_reads_its_memory_back_from_its_event_instead_of_recalling(tmp_path):
    from kernelevo.memory.recall import Recall, RecalledKernel
    from kernelevo.memory.run_memory import RECALL_EVENT
    from kernelevo.run.setup import open_memory
    from kernelevo.store.run_store import RunStore
    from kernelevo.task import task_from_source

    task = task_from_source(ADD, name="add")
    config = MemoryConfig(path=str(tmp_path / "m.db"))
    with MemoryStore(tmp_path / "m.db") as memory:
        remember(memory, resized(ADD, "dim = 1000", "dim = 10"), "add_tiny")
    memory_now, fresh = open_memory(config, task, "fp32", "triton", None)
    assert memory_now is not None and [t.name for t in fresh.tasks] == ["add_tiny"]
    memory_now.close()
    given = Recall(kernels=(RecalledKernel(9, "k", "then", 0.9, "passed", "SOURCE"),),
                   lessons="- THEN")
    with RunStore.create(tmp_path / "runs", "add", ADD, {}) as run:
        run.log_event(RECALL_EVENT, given.payload())
        memory_then, recalled = open_memory(config, task, "fp32", "triton", run)
    memory_then.close()
    assert recalled == given
    assert open_memory(MemoryConfig(enabled=False), task, "fp32", "triton", None) == (None, None)


def test_a_failure_is_named_by_its_exception_line_not_the_traceback_header():
    from kernelevo.memory.harvest import telling_line

    traceback = ("Traceback (most recent call last):\n  File \"c.py\", line 9, in forward\n"
                 "AttributeError: module 'triton.language' has no attribute 'lod'\n")
    assert telling_line(traceback) == ("AttributeError: module 'triton.language' has no "
                                       "attribute 'lod'")
    assert telling_line("output 0 has shape (65,)\nmore") == "output 0 has shape (65,)"
    assert telling_line("") == ""


def test_the_end_of_a_long_run_reads_its_fastest_and_latest_candidates_not_all(tmp_path,
                                                                             monkeypatch):
    from kernelevo.candidate import Candidate
    from kernelevo.evaluate.verdict import TimingStats, verdict_for
    from kernelevo.memory import harvest
    from kernelevo.store.run_store import RunStore

    monkeypatch.setattr(harvest, "RECENT_CANDIDATES", 2)
    monkeypatch.setattr(harvest, "FASTEST_KERNELS", 1)

    def timed(speedup):
        stats = TimingStats(1.0 / speedup, 0.0, 1.0 / speedup, 20)
        return verdict_for("passed", timings={"candidate": stats}, speedup_vs_eager=speedup)

    with RunStore.create(tmp_path / "runs", "add", ADD, {}) as run:
        fastest = run.add_candidate(Candidate(GOOD + "# fastest\n", "triton", "k0", "llm"))
        run.record_verdict(fastest, timed(3.0))
        ids = [run.add_candidate(Candidate(GOOD + f"# {n}\n", "triton", f"k{n}", "llm"))
               for n in range(1, 5)]
        for n, candidate_id in enumerate(ids):
            run.record_verdict(candidate_id, timed(1.0 + n / 10))
        # A failure before the latest two: not read either.
        broken = run.add_candidate(Candidate("x = (", "triton", "broken", "llm"))
        run.record_verdict(broken, verdict_for("compile_failed", "SyntaxError"))
        for n in (5, 6):
            run.record_verdict(run.add_candidate(Candidate(GOOD + f"# {n}\n", "triton",
                                                           f"k{n}", "llm")), timed(1.1))
        monkeypatch.setattr(run, "candidates", lambda *a: pytest.fail("read every candidate"))
        with MemoryStore(tmp_path / "m.db") as memory:
            recorded = harvest.record_run(memory, run, task_key(ADD), "add",
                                          signature_of(ADD, "fp32", "triton"), kernels_kept=3)
            kept = sorted(k.source.splitlines()[-1] for k in memory.kernels(task_key(ADD)))
    # The fastest of all, and the latest two (k5, k6); k1-k4 were never read.
    assert kept == ["# 5", "# 6", "# fastest"] and recorded.kernels == 3
