"""Judging on a Dask cluster: jobs as data, spread over workers, nothing lost when one dies.

The process tests start a real scheduler and two workers on 127.0.0.1 and
judge on the CPU (Triton's interpreter); the rest fake the connection.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from kernelevo.candidate import Candidate
from kernelevo.cli.app import app
from kernelevo.config import EvalConfig
from kernelevo.errors import ConfigError, EnvironmentProblem, TaskError
from kernelevo.evaluate.remote import cluster
from kernelevo.evaluate.remote import job as remote
from kernelevo.evaluate.protocol import JudgeJob, JudgeLike
from kernelevo.evaluate.verdict import verdict_for
from kernelevo.store.run_store import RunStore
from kernelevo.task import load_task
from tests.conftest import ROOT
from tests.fakes.openai_server import FakeOpenAIServer
from tests.local_cluster import LocalDaskCluster

distributed = pytest.importorskip("distributed")

TASK_PATH = ROOT / "tests/fixtures/tasks/add.py"
GOOD = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
# Slow to start, so a worker can be killed while it judges this one.
SLOW = GOOD.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
    "        super().__init__()\n", "        super().__init__()\n        time.sleep(5)\n", 1)
NO_KERNEL = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    with LocalDaskCluster(tmp_path_factory.mktemp("cluster"), workers=2) as local:
        yield local


# -- jobs on a real cluster ----------------------------------------------------------

@pytest.mark.slow
def test_candidates_are_spread_over_both_workers(two_workers):
    connection = cluster.connect(two_workers.address, timeout_s=60)
    try:
        assert connection.device == "cpu" and connection.slots == 2
        judges = [cluster.ClusterJudge(connection, load_task(str(TASK_PATH)), EvalConfig())
                  for _ in range(connection.slots)]
        assert all(isinstance(judge, JudgeLike) for judge in judges)
        candidate = Candidate(source=GOOD, backend="triton")
        with ThreadPoolExecutor(2) as pool:
            verdicts = list(pool.map(lambda judge: judge.evaluate(candidate), judges))
    finally:
        connection.close()
    assert [v.reason for v in verdicts] == ["passed"] * 2
    assert {v.environment["judge_worker"] for v in verdicts} == {"w1", "w2"}
    assert all(v.environment["judge_host"] == socket.gethostname() for v in verdicts)


@pytest.mark.slow
def test_a_killed_workers_job_is_judged_again_on_the_other(tmp_path):
    with LocalDaskCluster(tmp_path / "cluster", workers=2) as local:
        connection = cluster.connect(local.address, timeout_s=60)
        try:
            judge = cluster.ClusterJudge(connection, load_task(str(TASK_PATH)), EvalConfig())
            verdicts = []
            slow = threading.Thread(target=lambda: verdicts.append(
                judge.evaluate(Candidate(source=SLOW, backend="triton"))))
            slow.start()
            first = _worker_running_a_job(connection, local)
            time.sleep(3)  # the slow candidate is being judged
            local.kill(first)
            slow.join(timeout=240)
        finally:
            connection.close()
    survivor = ({"w1", "w2"} - {first}).pop()
    assert verdicts[0].reason == "passed", verdicts[0].message
    assert verdicts[0].environment["judge_worker"] == survivor


def _worker_running_a_job(connection, local) -> str:
    """The name of the first worker seen processing a job."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        busy = [address for address, keys in connection.client.processing().items() if keys]
        if busy:
            return local.worker_names()[busy[0]]
        time.sleep(0.1)
    raise AssertionError("no worker took the job")


@pytest.mark.slow
def test_evolve_on_the_cluster_records_who_judged_each_candidate(two_workers, tmp_path):
    fenced = f"A faster kernel:\n\n```python\n{GOOD}\n```\n"
    config = tmp_path / "kernelevo.toml"
    config.write_text("[llm]\nbackoff_base_s = 0.01\nmax_attempts = 2\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    runs = tmp_path / "runs"
    with FakeOpenAIServer([], default=lambda request: fenced) as server:
        done = subprocess.run(
            [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(TASK_PATH), "--model", "fake",
             "--base-url", server.base_url, "--runs-dir", str(runs), "--config", str(config),
             "--cluster", two_workers.address, "--candidates", "3", "--llm-in-flight", "2"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"on the cluster at {two_workers.address}" in " ".join(done.stderr.split())
    store = RunStore.open(next(runs.glob("*/run.db")))
    candidates = store.candidates()
    assert len(candidates) >= 2 and all(c.verdict is not None for c in candidates)
    assert all(c.verdict.environment["judge_worker"] in ("w1", "w2") for c in candidates)
    assert store.run_info().config["search"]["cluster"] == two_workers.address
    shown = CliRunner().invoke(app, ["show", store.run_id, "--runs-dir", str(runs)])
    assert "judged by cluster worker w" in shown.output


@pytest.mark.slow
def test_a_worker_without_kernelevo_is_refused_naming_it(tmp_path):
    shadow = tmp_path / "shadow" / "kernelevo"  # a package of that name, without the judge
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    with LocalDaskCluster(tmp_path / "cluster", workers=1,
                          environment={"PYTHONPATH": str(shadow.parent)}) as local:
        with pytest.raises(ConfigError, match="cannot run KernelEvo's judge.*install kernelevo"):
            cluster.connect(local.address, timeout_s=30)


# -- what the judge does with each answer (a fake connection) -------------------------

class FakeFuture:
    key = "kernelevo-judge-0"

    def __init__(self, outcome):
        self.outcome, self.cancelled = outcome, False

    def result(self, timeout=None):
        outcome = self.outcome.pop(0) if isinstance(self.outcome, list) else self.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def cancel(self):
        self.cancelled = True


class FakeConnection:
    address, device, use_gpu_resource, slots = "tcp://10.0.0.1:8786", "cpu", False, 1

    def __init__(self, outcome):
        self.outcome, self.jobs = outcome, []

    def submit(self, job, retries):
        self.jobs.append(json.loads(json.dumps(job.to_dict())))  # plain JSON data, nothing else
        return FakeFuture(self.outcome(job) if callable(self.outcome) else self.outcome)

    def workers_for_jobs(self):
        return self.workers

    workers = 1


def fake_judge(outcome):
    task = load_task(str(TASK_PATH))
    return cluster.ClusterJudge(FakeConnection(outcome), task, EvalConfig(device="cpu"))


def test_the_job_is_data_and_the_answer_names_the_worker():
    def answer(job):
        verdicts = [verdict_for("passed").to_dict() for _ in job.candidates]
        return {"verdicts": verdicts, "host": "gpu-host-7", "pid": 1, "worker": "gpu3"}

    judge = fake_judge(answer)
    verdicts = judge.evaluate_many([Candidate(source=GOOD, backend="triton")] * 2)
    assert [v.environment["judge_worker"] for v in verdicts] == ["gpu3", "gpu3"]
    assert verdicts[0].environment["judge_host"] == "gpu-host-7"
    assert verdicts[0].environment["cluster_job"] == "kernelevo-judge-0"
    job = JudgeJob.from_dict(judge.connection.jobs[0])
    assert job.candidates == ((GOOD, "triton"), (GOOD, "triton"))
    assert job.config() == EvalConfig(device="cpu")
    assert judge.prebuild(Candidate(source="", backend="cuda")) is None


def test_workers_dying_past_the_allowed_failures_give_a_crashed_verdict():
    killed = distributed.KilledWorker("kernelevo-judge-1", SimpleNamespace(
        address="tcp://10.0.0.9:4000"), 3)
    verdicts = fake_judge(killed).evaluate_many([Candidate(source=GOOD, backend="triton")] * 2)
    assert [(v.status, v.reason) for v in verdicts] == [("crashed", "exited_early")] * 2
    assert "allowed-failures" in verdicts[0].message
    assert "tcp://10.0.0.9:4000" in verdicts[0].message
    dropped = fake_judge(CancelledError("scheduler-connection-lost")).evaluate(
        Candidate(source=GOOD, backend="triton"))
    assert dropped.reason == "exited_early" and "dropped the job" in dropped.message


def test_a_job_that_no_worker_can_take_waits_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr(cluster, "WORKER_CHECK_S", 0.0)
    answer = {"verdicts": [verdict_for("passed").to_dict()], "host": "h", "worker": "gpu0"}
    judge = fake_judge([TimeoutError(), TimeoutError(), answer])
    judge.connection.workers = 0
    with caplog.at_level("WARNING", logger="kernelevo"):
        verdict = judge.evaluate(Candidate(source=GOOD, backend="triton"))
    assert verdict.environment["judge_worker"] == "gpu0"
    warnings = [r.getMessage() for r in caplog.records if "the job waits" in r.getMessage()]
    assert len(warnings) == 1 and "dask worker tcp://10.0.0.1:8786" in warnings[0]


def test_a_task_error_on_the_worker_is_raised_here_by_name():
    answer = {"error": {"kind": "TaskError", "message": "the reference oracle failed"},
              "host": "gpu-host-7", "pid": 1, "worker": "gpu3"}
    with pytest.raises(TaskError, match="oracle failed .judged on gpu-host-7"):
        fake_judge(answer).evaluate(Candidate(source=GOOD, backend="triton"))


def test_a_stopping_run_cancels_its_cluster_job():
    from kernelevo.evaluate.sandbox import jobs as sandbox

    judge = fake_judge(TimeoutError())
    sandbox.stop_all_jobs()
    try:
        with pytest.raises(sandbox.JobsStopped):
            judge.evaluate(Candidate(source=GOOD, backend="triton"))
    finally:
        sandbox.allow_jobs()


# -- the worker's side, called in this process ----------------------------------------

def test_the_worker_function_judges_a_job_and_answers_errors_as_data():
    job = JudgeJob.of(load_task(str(TASK_PATH)), [Candidate(source=NO_KERNEL, backend="triton")],
                      EvalConfig(device="cpu"))
    answer = cluster.judge_on_worker(job.to_dict())
    assert answer["worker"] == "" and answer["host"] == socket.gethostname()
    assert answer["verdicts"][0]["status"] == "rejected"  # the static check, nothing run
    wrong = remote.judge_job({**job.to_dict(), "version": 99})
    assert wrong["error"]["kind"] == "ConfigError" and "client and server differ" in (
        wrong["error"]["message"])
    assert isinstance(remote.error_from_answer(wrong), ConfigError)


# -- connecting, and the command line ---------------------------------------------------

def test_an_unreachable_scheduler_is_a_config_error_naming_it():
    address = f"tcp://127.0.0.1:{closed_port()}"
    with pytest.raises(ConfigError, match=f"cannot reach the Dask scheduler at {address}"):
        cluster.connect(address, timeout_s=1)


@pytest.mark.slow
def test_a_scheduler_without_workers_is_a_config_error_saying_how_to_start_one(tmp_path):
    with LocalDaskCluster(tmp_path / "cluster", workers=0) as local:
        with pytest.raises(ConfigError, match="no worker joined .* --resources GPU=1"):
            cluster.connect(local.address, timeout_s=1)


def test_without_distributed_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(EnvironmentProblem, match=r"pip install 'kernelevo\[cluster\]'"):
        cluster.connect("tcp://127.0.0.1:1")


def evolve_invoke(tmp_path, *flags):
    config = tmp_path / "k.toml"
    config.write_text("[search]\ncluster_timeout_s = 1\n")
    seed = ROOT / "tests/fixtures/candidates/honest_add.py"
    return CliRunner().invoke(app, ["evolve", str(TASK_PATH), "--seed", str(seed), "--config",
                                    str(config), "--runs-dir", str(tmp_path / "runs"), *flags])


def test_evolve_with_an_unreachable_cluster_exits_2_with_the_address(tmp_path):
    address = f"tcp://127.0.0.1:{closed_port()}"
    done = evolve_invoke(tmp_path, "--cluster", address)
    assert done.exit_code == 2, done.output
    assert address in done.output and "dask scheduler" in done.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_cluster_is_a_search_setting_of_the_file_and_of_a_resume(tmp_path):
    from kernelevo import config_file
    from kernelevo.run.resume import split_given

    path = tmp_path / "k.toml"
    path.write_text('[search]\ncluster = "tcp://10.0.0.1:8786"\ncluster_slots = 4\n')
    search = config_file.search_config(config_file.resolve(path))
    assert (search.cluster, search.cluster_slots) == ("tcp://10.0.0.1:8786", 4)
    path.write_text("[search]\ncluster_slots = -1\n")
    with pytest.raises(ConfigError, match="cluster_slots: expected a whole number >= 0"):
        config_file.resolve(path)
    path.write_text('[search]\ncluster = "tcp://h:1"\n')
    overrides, fixed = split_given(config_file.resolve(path))
    assert overrides == {"search": {"cluster": "tcp://h:1"}} and not fixed


def test_cluster_and_gpus_together_exit_2(tmp_path):
    done = evolve_invoke(tmp_path, "--cluster", "tcp://127.0.0.1:1", "--gpus", "0")
    assert done.exit_code == 2 and "leave out --gpus" in done.output
