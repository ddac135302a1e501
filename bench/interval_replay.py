"""The judge's speedup interval replayed on recorded rounds, against plain_timing.py's runs.

    python3 bench/interval_replay.py NOISE_ROWS.jsonl AGREEMENT.json

NOISE_ROWS.jsonl: bench/host_noise.py's rows (15 interleaved rounds of eager
and candidate per process, free or pinned to one core); AGREEMENT.json:
bench/speed_agreement.py's output of the same device call (its plain runs).
For each recorded process it computes the interval as the judge does
(kernelevo.evaluate.child.timing.speedup_range over the paired rounds) and checks
the acceptance of bench/speed_agreement.py: the plain runs' median inside
it, and the interval no wider than their range plus 10 % of their median.
No GPU: it reads what a device call recorded.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kernelevo.evaluate.child.timing import speedup_range, summarize  # noqa: E402


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line]
    plain = json.loads(Path(sys.argv[2]).read_text())["plain"]
    print("| mode | task | judge | interval | plain median | plain range | inside | width ok |")
    print("|---|---|---|---|---|---|---|---|")
    tally: dict[str, list[int]] = {}
    for row in rows:
        if row["mode"] == "compile":
            continue
        stem = Path(row["task"]).stem
        runs = next((v for k, v in plain.items() if k.endswith(stem)), None)
        if not runs:
            continue
        eager, own = row["times"]["eager"], row["times"]["cand"]
        low, high = speedup_range(summarize(eager, "call_loop"), summarize(own, "call_loop"),
                                  dict(enumerate(eager)), dict(enumerate(own)))
        ups = [r["loop_speedup"] for r in runs]
        middle = statistics.median(ups)
        inside = low <= middle <= high
        width_ok = high - low <= max(ups) - min(ups) + 0.10 * middle
        counts = tally.setdefault(row["mode"], [0, 0, 0])
        counts[0] += 1
        counts[1] += inside
        counts[2] += width_ok
        print(f"| {row['mode']} | {stem[:36]} | "
              f"{statistics.median(eager) / statistics.median(own):.2f} | {low:.2f}-{high:.2f} | "
              f"{middle:.2f} | {min(ups):.2f}-{max(ups):.2f} | {'yes' if inside else 'NO'} | "
              f"{'yes' if width_ok else 'NO'} |")
    for mode, (total, inside, width_ok) in tally.items():
        print(f"- {mode}: plain median inside {inside}/{total}, width ok {width_ok}/{total}")


if __name__ == "__main__":
    main()
