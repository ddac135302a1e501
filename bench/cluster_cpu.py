"""Acceptance of `evolve --cluster` on one CPU machine: two workers, one killed mid-job.

    PYTHONPATH=src:. python bench/cluster_cpu.py [--candidates 10] [--json OUT]

Starts a Dask scheduler and two workers (w1, w2; one thread each, no nanny)
on 127.0.0.1, and a fake OpenAI-compatible server whose every third answer
is a kernel that sleeps 5 s at start, so jobs last long enough to be cut.
`kernelevo evolve --cluster` then searches tests/fixtures/tasks/add.py. Once
w1 has judged 3 candidates and has held its next job for 2 s, w1 is killed
(SIGKILL, as a lost host); the run
goes on with w2. From the run's store it reports the verdicts per worker, the
jobs w1 held when it died and where they were judged again, and losses:
candidates with no verdict, or a crashed one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from kernelevo.store.run_store import RunStore  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.local_cluster import LocalDaskCluster  # noqa: E402

TASK = ROOT / "tests/fixtures/tasks/add.py"
GOOD = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
SLOW = GOOD.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
    "        super().__init__()\n", "        super().__init__()\n        time.sleep(5)\n", 1)
HELD_S = 2.0  # how long w1 holds a job before it is killed
JUDGED_FIRST = 3  # verdicts w1 gives before that


def answers() -> object:
    """Every third answer the slow kernel, the others honest kernels of varied block sizes."""
    count = iter(range(1 << 30))
    blocks = (1024, 512, 256, 128)

    def answer(request: dict) -> str:
        n = next(count)
        source = SLOW if n % 3 == 1 else GOOD.replace("1024", str(blocks[n % len(blocks)]))
        return f"A faster kernel:\n\n```python\n{source}\n```\n"

    return answer


def judged_by(runs: Path, worker: str) -> int:
    """Verdicts the run has stored so far from `worker`."""
    found = list(runs.glob("*/run.db"))
    if not found:
        return 0
    with RunStore.open(found[0]) as store:
        return sum(1 for c in store.candidates() if c.verdict is not None
                   and c.verdict.environment.get("judge_worker") == worker)


def kill_w1_mid_job(cluster: LocalDaskCluster, run: subprocess.Popen, runs: Path) -> dict:
    """SIGKILL w1 once it has judged JUDGED_FIRST and held a job HELD_S; what it held, when."""
    from distributed import Client

    started = time.monotonic()
    with Client(cluster.address, timeout=30, set_as_default=False) as client:
        names = {name: address for address, name in cluster.worker_names().items()}
        held, since, judged = (), 0.0, 0
        while run.poll() is None:
            keys = tuple(client.processing(workers=[names["w1"]]).get(names["w1"], ()))
            if keys != held:
                judged = judged_by(runs, "w1")
            if (keys and keys == held and judged >= JUDGED_FIRST
                    and time.monotonic() - since >= HELD_S):
                cluster.kill("w1")
                return {"killed": "w1", "judged_before": judged, "held_jobs": list(keys),
                        "at_s": round(time.monotonic() - started, 1)}
            if keys != held:
                held, since = keys, time.monotonic()
            time.sleep(0.1)
    return {"killed": None, "held_jobs": [], "at_s": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kernelevo-cluster-bench-"))
    started = time.monotonic()
    with LocalDaskCluster(folder / "cluster", workers=2) as cluster, \
            FakeOpenAIServer([], default=answers()) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
        env.pop("OPENAI_API_KEY", None)
        command = [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(TASK), "--model",
                   "fake", "--base-url", server.base_url, "--runs-dir", str(folder / "runs"),
                   "--cluster", cluster.address, "--candidates", str(args.candidates),
                   "--llm-in-flight", "2"]
        with open(folder / "evolve.log", "wb") as log:
            run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
            kill = kill_w1_mid_job(cluster, run, folder / "runs")
            exit_code = run.wait(timeout=1800)
    summary = summarize(folder, kill, exit_code, time.monotonic() - started)
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


def summarize(folder: Path, kill: dict, exit_code: int, wall_s: float) -> dict:
    store = RunStore.open(next((folder / "runs").glob("*/run.db")))
    candidates = store.candidates()
    verdicts = [c.verdict for c in candidates if c.verdict is not None]
    by_job = {c.verdict.environment.get("cluster_job"): c for c in candidates if c.verdict}
    rerun = {key: {"candidate": by_job[key].id, "slow": "time.sleep(5)" in
                   by_job[key].candidate.source,
                   "judged_on": by_job[key].verdict.environment.get("judge_worker"),
                   "reason": by_job[key].verdict.reason} if key in by_job else None
             for key in kill["held_jobs"]}
    lost = [c.id for c in candidates if c.verdict is None or c.verdict.status == "crashed"]
    return {
        "date": datetime.date.today().isoformat(), "exit_code": exit_code,
        "wall_s": round(wall_s, 1), "cluster_in_run_config":
            store.run_info().config["search"]["cluster"],
        "candidates": len(candidates), "verdicts": len(verdicts),
        "verdicts_by_reason": dict(Counter(v.reason for v in verdicts)),
        "verdicts_by_worker": dict(Counter(v.environment.get("judge_worker", "")
                                           for v in verdicts)),
        "kill": kill, "held_jobs_judged_again_on": rerun,
        "lost": lost, "log": str(folder),
    }


if __name__ == "__main__":
    main()
