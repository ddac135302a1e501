"""Share of wall time the judges were busy in a stored run, counted from a chosen moment.

    python3 bench/busy_share.py RUN_DB [--from first-evaluation|first-llm]

`first-llm` starts the clock when the first LLM candidate was queued (what
"once candidates are queued" means for a run fed by an LLM); the run's own
progress line counts from its first evaluation, the seed's, which leaves the
wait for the first answer in. Busy time is the sum of the verdicts'
evaluation wall times, divided by the number of judges (--judges).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kernelevo.store.run_store import RunStore  # noqa: E402


def busy_share(store: RunStore, start: str = "first-llm", judges: int = 1) -> dict:
    stored = [c for c in store.candidates() if c.verdict is not None]
    spans = sorted((c.evaluated_at - c.verdict.phases_s.get("total", 0.0), c.evaluated_at)
                   for c in stored)
    if not spans:
        return {"share": None}
    if start == "first-llm":
        queued = [c.created_at for c in store.candidates() if c.candidate.origin == "llm"]
        if not queued:
            return {"share": None}
        clock = min(queued)
    else:
        clock = spans[0][0]
    end = max(finish for _, finish in spans)
    busy = sum(max(0.0, finish - max(begin, clock)) for begin, finish in spans)
    return {"share": busy / ((end - clock) * judges), "from_s": clock - spans[0][0],
            "window_s": end - clock, "evaluations": len(spans)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_db", type=Path)
    parser.add_argument("--from", dest="start", default="first-llm",
                        choices=["first-llm", "first-evaluation"])
    parser.add_argument("--judges", type=int, default=1)
    args = parser.parse_args()
    print(busy_share(RunStore.open(args.run_db), args.start, args.judges))


if __name__ == "__main__":
    main()
