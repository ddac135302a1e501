"""The speed agreement's table: the judge's speedups against plain_timing.py's runs, scored.

bench/speed_agreement.py runs the suite and the plain processes; this module
sets each pair's judge figures (speedup, interval, milliseconds, host probe,
what ran while its calls were timed) beside plain's runs, scores them
(plain's median inside the interval, the interval no wider than plain's range
plus WIDTH_SLACK of its median, both contestants' milliseconds within
ABS_SLACK) and writes the Markdown table with its summary.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

# judge measure -> plain_timing.py's key for the same thing
MEASURES = {"call": "loop", "gpu": "do_bench"}
WIDTH_SLACK = 0.10  # the interval may be the plain range plus this fraction of its median
ABS_SLACK = 0.10  # milliseconds within 10 % of the plain process's, or inside its range
# plain's do_bench is device time only while the host keeps ahead of its queue: where it
# reads more than this many times the profiler's kernel time, the host's launches are in it
KERNEL_BOUND = 1.3


def compare(staged: list[dict], rows: list[dict], plain: dict[str, list[dict]]) -> list[dict]:
    """One entry per task and measure."""
    by_stem = {Path(row["task"]).stem if "/" in str(row["task"]) else row["task"]: row
               for row in rows}
    table = []
    for item in staged:
        row = next((r for key, r in by_stem.items() if key.endswith(item["stem"])), None)
        runs = plain[item["stem"]]
        for measure, theirs in MEASURES.items():
            entry = {"task": item["stem"], "kind": item["kind"], "measure": measure,
                     "verdict": row["reason"] if row else "missing"}
            mine = ((row or {}).get("measures") or {}).get(measure) or {}
            ups = [r[f"{theirs}_speedup"] for r in runs]
            if not mine.get("speedup", {}).get("eager") or not ups:
                table.append(entry)
                continue
            judged = mine["speedup"]["eager"]
            entry.update(
                judge=judged, interval=mine.get("range", {}).get("eager") or [judged, judged],
                plain_median=statistics.median(ups), plain_range=[min(ups), max(ups)],
                plain_runs=ups,
                eager_ms=mine["ms"]["eager"], candidate_ms=mine["ms"]["candidate"],
                plain_ref_ms=[r[f"{theirs}_ms_ref"] for r in runs],
                plain_cand_ms=[r[f"{theirs}_ms_cand"] for r in runs],
                host_spread=(row or {}).get("host_speed_spread") or "-",
                timing_core=(row or {}).get("timing_core") or "-",
                judge_host_us=_number((row or {}).get("host_probe_us")),
                plain_host_us=[r.get("host_probe_us") for r in runs],
                **quiet_cores((row or {}).get("phases_s") or {}))
            low, high = entry["interval"]
            entry["inside"] = low <= entry["plain_median"] <= high
            plain_width = entry["plain_range"][1] - entry["plain_range"][0]
            entry["width_ok"] = high - low <= plain_width + WIDTH_SLACK * entry["plain_median"]
            entry["ms_ok"] = (_ms_agrees(entry["eager_ms"], entry["plain_ref_ms"])
                              and _ms_agrees(entry["candidate_ms"], entry["plain_cand_ms"]))
            if measure == "gpu":
                entry["plain_kernel_bound"] = kernel_bound(runs)
            table.append(entry)
    return table


def quiet_cores(phases: dict) -> dict:
    """Busy cores off the timing cores, and the judge's own, while the row's calls were
    timed with the other jobs stood still (evaluate/sandbox/quiet_load.py); {} if unmeasured."""
    seconds = phases.get("quiet") or 0.0
    if seconds <= 0:
        return {}
    return {"quiet_busy_cores": (phases.get("quiet_busy_elsewhere") or 0.0) / seconds,
            "quiet_judge_cores": (phases.get("quiet_judge_cpu") or 0.0) / seconds,
            "quiet_steal_s": phases.get("quiet_steal") or 0.0}


def kernel_bound(runs: list[dict]) -> bool:
    """Whether every plain run's do_bench, of both contestants, read device time.

    `do_bench` queues a flush and a call per sample without waiting; when the
    host takes longer to launch them than the device to run them, the events
    hold the host's time, and the run reads between the kernels' time and the
    call loop's. The profiler's kernel time is the reference.
    """
    return all(run[f"do_bench_ms_{who}"] <= KERNEL_BOUND * run[f"kernel_ms_{who}"]
               for run in runs for who in ("ref", "cand")
               if run.get(f"kernel_ms_{who}"))


def _ms_agrees(mine: float, theirs: list[float]) -> bool:
    middle = statistics.median(theirs)
    return abs(mine - middle) <= ABS_SLACK * middle or min(theirs) <= mine <= max(theirs)


def host_follows(probed: list[dict]) -> tuple[float, float] | None:
    """How closely each contestant's call ms (judge / plain) follow the host probe's ratio.

    Pearson's correlation of the logarithms, over call rows with probes on
    both sides; None for fewer than three rows or no spread to correlate.
    """
    if len(probed) < 3:
        return None
    host = [math.log(e["judge_host_us"] / statistics.median(e["plain_host_us"])) for e in probed]
    found = []
    for mine, theirs in (("eager_ms", "plain_ref_ms"), ("candidate_ms", "plain_cand_ms")):
        ms = [math.log(e[mine] / statistics.median(e[theirs])) for e in probed]
        try:
            found.append(statistics.correlation(host, ms))
        except statistics.StatisticsError:  # one of them constant
            return None
    return found[0], found[1]


def markdown(table: list[dict], facts: dict) -> str:
    lines = [f"Speed agreement, {facts['date']}, {facts['gpu']}, torch {facts['torch']}, "
             f"triton {facts['triton']}; suite {facts['suite_s']:.0f} s, plain "
             f"{facts['plain_s']:.0f} s ({_runs_words(facts)} runs per pair)", "",
             "| task | kind | measure | judge | judge interval | plain median | plain range "
             "| inside | width ok | eager ms (judge / plain) | candidate ms (judge / plain) "
             "| host spread | host probe us (judge / plain) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in table:
        if "judge" not in e:
            lines.append(f"| {e['task']} | {e['kind']} | {e['measure']} | {e['verdict']} "
                         "| - | - | - | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {e['task']} | {e['kind']} | {e['measure']} | {e['judge']:.2f} | "
            f"{e['interval'][0]:.2f}-{e['interval'][1]:.2f} | {e['plain_median']:.2f} | "
            f"{e['plain_range'][0]:.2f}-{e['plain_range'][1]:.2f} | "
            f"{'yes' if e['inside'] else 'NO'} | {'yes' if e['width_ok'] else 'NO'} | "
            f"{e['eager_ms']:.4f} / {statistics.median(e['plain_ref_ms']):.4f} | "
            f"{e['candidate_ms']:.4f} / {statistics.median(e['plain_cand_ms']):.4f} | "
            f"{e.get('host_spread', '-')} | {_probes(e)} |")
    scored = [e for e in table if "judge" in e]
    conv = [e for e in scored if e["kind"] == "conv"]
    short = [e for e in scored if e["measure"] == "call" and e["candidate_ms"] < 0.05]
    lines += ["", f"- rows compared: {len(scored)} of {len(table)} "
              f"({len(short)} call rows under 50 us, {len(conv)} convolution rows)",
              f"- plain median inside the judge's interval: "
              f"{sum(e['inside'] for e in scored)}/{len(scored)}",
              f"- interval no wider than the plain range + 10 %: "
              f"{sum(e['width_ok'] for e in scored)}/{len(scored)}",
              f"- both contestants' ms within 10 % of plain (or inside its range): "
              f"{sum(e['ms_ok'] for e in scored)}/{len(scored)}",
              f"- convolution rows inside: {sum(e['inside'] for e in conv)}/{len(conv)}, "
              f"speedup within 10 % of plain: "
              f"{sum(abs(e['judge'] / e['plain_median'] - 1) <= 0.10 for e in conv)}/{len(conv)}"]
    calls = [(e, _percent(e.get("host_spread"))) for e in scored if e["measure"] == "call"]
    moving = [e for e, spread in calls if spread >= 5]
    steady = [e for e, spread in calls if 0 <= spread < 5]
    if moving or steady:
        lines.append(f"- call rows inside, host spread 5 % or more: "
                     f"{sum(e['inside'] for e in moving)}/{len(moving)}; under 5 %: "
                     f"{sum(e['inside'] for e in steady)}/{len(steady)}")
    cores_said = [str(e.get("timing_core", "-")) for e in scored if e["measure"] == "call"]
    if any(said != "-" for said in cores_said):
        lines.append(f"- pairs timed on a core kept free: "
                     f"{sum('kept free' in said for said in cores_said)}/{len(cores_said)} "
                     f"({cores_said[0]})")
    probed = [e for e in scored if e["measure"] == "call" and e.get("judge_host_us")
              and all(e.get("plain_host_us") or [None])]
    if probed:
        # the host's loop slower while the judge timed than while plain did, by row
        slower = [e for e in probed
                  if e["judge_host_us"] > 1.1 * statistics.median(e["plain_host_us"])]
        ratios = [e["judge_host_us"] / statistics.median(e["plain_host_us"]) for e in probed]
        lines.append(f"- call rows whose host probe read more than 10 % slower while the "
                     f"judge timed than before the plain runs: {len(slower)}/{len(probed)} "
                     f"(median ratio {statistics.median(ratios):.2f}); of those, both ms "
                     f"within 10 % of plain: {sum(e['ms_ok'] for e in slower)}/{len(slower)}; "
                     f"of the rest: {sum(e['ms_ok'] for e in probed if e not in slower)}/"
                     f"{len(probed) - len(slower)}")
        follows = host_follows(probed)
        if follows:
            lines.append(f"- host probe ratio (judge / plain) against each contestant's call ms "
                         f"ratio, in logarithms: correlation {follows[0]:.2f} for eager, "
                         f"{follows[1]:.2f} for the candidate, over {len(probed)} call rows")
    quieted = [e for e in scored if e["measure"] == "call" and "quiet_busy_cores" in e]
    if quieted:
        busy = [e for e in quieted if e["quiet_busy_cores"] >= 1.0]
        lines.append(
            f"- while the judge timed the calls, others stood still: busy cores off the timing "
            f"cores {statistics.median(e['quiet_busy_cores'] for e in quieted):.2f} (median; "
            f"the judge's own process "
            f"{statistics.median(e['quiet_judge_cores'] for e in quieted):.2f}), stolen from "
            f"the timing cores {sum(e['quiet_steal_s'] for e in quieted):.2f} s in all; both ms "
            f"within 10 % of plain where 1 core or more was busy: "
            f"{sum(e['ms_ok'] for e in busy)}/{len(busy)}, where less: "
            f"{sum(e['ms_ok'] for e in quieted if e not in busy)}/{len(quieted) - len(busy)}")
    gpu = [e for e in scored if "plain_kernel_bound" in e]
    if gpu:
        bound = [e for e in gpu if e["plain_kernel_bound"]]
        hosted = [e for e in gpu if not e["plain_kernel_bound"]]
        lines.append(f"- gpu rows inside, plain's do_bench within {KERNEL_BOUND}x of the "
                     f"profiler's kernel time in every run: {sum(e['inside'] for e in bound)}/"
                     f"{len(bound)}; above it (launches or a cold L2 in do_bench): "
                     f"{sum(e['inside'] for e in hosted)}/{len(hosted)}")
    return "\n".join(lines) + "\n"


def _runs_words(facts: dict) -> str:
    fewest, most = facts["runs"], facts.get("runs_most", facts["runs"])
    return str(fewest) if most == fewest else f"{fewest}-{most}"


def _probes(entry: dict) -> str:
    """The host probe's medians, the judge's and each plain run's, as a table cell."""
    mine, theirs = entry.get("judge_host_us"), [t for t in entry.get("plain_host_us") or [] if t]
    if not mine and not theirs:
        return "-"
    return (f"{mine:.0f}" if mine else "-") + " / " + (", ".join(f"{t:.0f}" for t in theirs)
                                                       or "-")


def _number(said: Any) -> float | None:
    try:
        return float(said)
    except (TypeError, ValueError):
        return None


def _percent(said: Any) -> float:
    """A verdict's `host_speed_spread` ("7.5%") as a number; -1 where none was given."""
    try:
        return float(str(said).rstrip("%"))
    except ValueError:
        return -1.0
