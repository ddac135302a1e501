"""This project's verdicts and timings next to KernelBench's harness and outside timers.

    python3 bench/kernelbench_l1.py --kb .kb [--manifest bench/kernelbench/manifest.toml]
        [--only FILE|STEM|level1/N|GLOB,...] [--shard 1/3] [--budget-s 420] [--timeout 240]
        [--out bench/results/kernelbench_l1] [--steps ours,ours_kb,timers,kb] [--resume]
    python3 bench/kernelbench_l1.py --summarize --out FOLDER   # tables from results*.jsonl

For each [[candidate]] of the manifest (problem = "level1/19", file in
candidates/ beside it, kind = "honest" | "bad", expect_reasons = [...]), one
after another, each step a fresh subprocess with a timeout:
  ours     `python -m kernelevo.cli.app eval kernelbench:PROBLEM FILE --json`
  ours_kb  the same with --timing kernelbench (recorded as unsupported if the
           CLI rejects the flag)
  timers   bench/reference_timers.py: do_bench, back-to-back loop, profiler
           (honest entries only)
  kb       bench/kb_harness.py: KernelBench's eval_kernel_against_ref (honest
           entries only; bad ones too with --kb-on-bad)
A failed, timed-out or skipped step is recorded, never fatal. Each finished
entry is appended to results.jsonl at once (a killed run keeps what
finished); at the end summary.json and table.md are written and the table
printed. With --shard i/n the files are named results-shardIofN.jsonl etc.;
--summarize rebuilds summary.json and table.md from every results*.jsonl in
--out (copy the shards' files into one folder first).
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import hashlib
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("ours", "ours_kb", "timers", "kb")
TAIL = 3000  # characters of a step's output kept in the record


# ---------------------------------------------------------------- arguments

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kb", default=os.environ.get("KERNELBENCH_DIR"),
                   help="KernelBench checkout root: src/ and KernelBench/levelN/ "
                   "(default $KERNELBENCH_DIR)")
    p.add_argument("--manifest", default=str(REPO / "bench/kernelbench/manifest.toml"))
    p.add_argument("--candidates", default=None,
                   help="folder of the candidate files (default: candidates/ beside the manifest)")
    p.add_argument("--only", action="append", default=[],
                   help="file, stem, problem (level1/19) or glob; comma-separated, repeatable")
    p.add_argument("--shard", default=None, help="i/n: every n-th entry from the i-th (1-based)")
    p.add_argument("--out", default=str(REPO / "bench/results/kernelbench_l1"))
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per step")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no entry after this many seconds; no step runs past it "
                   "by more than --grace-s")
    p.add_argument("--grace-s", type=float, default=120.0)
    p.add_argument("--steps", default=",".join(STEPS), help="subset of " + ",".join(STEPS))
    p.add_argument("--our-kb-args", default="--timing kernelbench",
                   help="CLI arguments of the ours_kb step")
    p.add_argument("--kb-on-bad", action="store_true",
                   help="run KernelBench's harness on bad entries too (does it accept them?)")
    p.add_argument("--src", default=str(REPO / "src"),
                   help="this project's src folder to run the CLI from (PYTHONPATH)")
    p.add_argument("--kb-deps", default=str(REPO / ".kbdeps"),
                   help="wheels installed by setup_device.sh, for kb_harness only")
    p.add_argument("--resume", action="store_true",
                   help="skip entries already complete in this run's results file")
    p.add_argument("--summarize", action="store_true",
                   help="only rebuild summary.json and table.md from --out/results*.jsonl")
    args = p.parse_args(argv)
    args.steps = [s for s in args.steps.split(",") if s]
    unknown = set(args.steps) - set(STEPS)
    if unknown:
        p.error(f"unknown steps {sorted(unknown)}")
    if not args.summarize and not args.kb:
        p.error("--kb (or KERNELBENCH_DIR) is needed")
    # Steps run from the repository root: paths given relative to here must still hold.
    for name in ("kb", "src", "kb_deps"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    return args


# ---------------------------------------------------------------- manifest

@dataclass
class Entry:
    file: str
    problem: str
    kind: str
    expect_reasons: list[str] = field(default_factory=list)
    backend: str | None = None
    eval_args: list[str] = field(default_factory=list)  # flags the verdict needs (--backward)


def load_manifest(path: str) -> list[Entry]:
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    entries = []
    for table in data.get("candidate", []):
        entries.append(Entry(file=table["file"], problem=str(table["problem"]),
                             kind=str(table.get("kind", "?")),
                             expect_reasons=list(table.get("expect_reasons", [])),
                             backend=table.get("backend"),
                             eval_args=list(table.get("eval_args", []))))
    return entries


def matches(entry: Entry, pattern: str) -> bool:
    names = (entry.file, Path(entry.file).stem, entry.problem, f"kernelbench:{entry.problem}")
    return any(pattern == name or fnmatch.fnmatch(name, pattern) for name in names)


def select(entries: list[Entry], only: list[str], shard: str | None) -> list[Entry]:
    patterns = [p.strip() for chunk in only for p in chunk.split(",") if p.strip()]
    if patterns:
        entries = [e for e in entries if any(matches(e, p) for p in patterns)]
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        entries = entries[index - 1::count]
    return entries


def resolve_problem(kb: str, problem: str) -> Path | None:
    """KernelBench/levelN/M_*.py, found as kernelevo.task.resolve_kernelbench finds it."""
    match = re.match(r"^(?:kernelbench:)?level(\d+)/(\d+)$", problem, re.IGNORECASE)
    if not match:
        return None
    level, number = match.groups()
    for folder in (Path(kb) / "KernelBench" / f"level{level}", Path(kb) / f"level{level}"):
        hits = sorted(folder.glob(f"{int(number)}_*.py")) if folder.is_dir() else []
        if hits:
            return hits[0]
    return None


def guess_backend(entry: Entry, source: str) -> str:
    if entry.backend:
        return entry.backend
    return "cuda" if ("load_inline" in source or "cpp_extension" in source) else "triton"


# ---------------------------------------------------------------- subprocesses

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def parse_json_output(text: str) -> dict | None:
    """The JSON object a step printed: the whole stdout (the CLI's indented
    verdict) or else its last line that parses (our scripts' one line)."""
    text = _ANSI.sub("", text or "").strip()
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else None
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
                if isinstance(value, dict):
                    return value
            except ValueError:
                continue
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            value = json.loads(text[start:end + 1])
            return value if isinstance(value, dict) else None
        except ValueError:
            return None
    return None


def run_step(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run one step in its own process group; on timeout the whole group is killed
    (a judge's workers included), and stragglers of a finished step likewise."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        stdout, stderr = proc.communicate()
    _kill_group(proc.pid)
    result = {"cmd": shlex.join(cmd), "rc": proc.returncode, "timed_out": timed_out,
              "wall_s": round(time.perf_counter() - started, 3), "json": parse_json_output(stdout),
              "stderr_tail": stderr[-TAIL:]}
    if result["json"] is None:  # what it printed instead is the clue
        result["stdout_tail"] = stdout[-TAIL:]
    return result


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def child_env(extra_pythonpath: str | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", NO_COLOR="1")
    if extra_pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (extra_pythonpath, os.environ.get("PYTHONPATH")) if p)
    return env


# ---------------------------------------------------------------- the project's verdict

def parse_verdict(data: dict | None) -> dict | None:
    """The parts of a verdict compared here, read defensively: `measures` is
    {measure: {contestant: stats}}; a verdict without it has only `timings`,
    which are then taken as its timing_measure's (gpu if unnamed)."""
    if not isinstance(data, dict) or "status" not in data:
        return None

    def stats(block) -> dict:
        keys = ("median_ms", "mean_ms", "iqr_ms", "min_ms", "samples", "method")
        return {who: {k: s.get(k) for k in keys} for who, s in (block or {}).items()
                if isinstance(s, dict)}

    measures = {m: stats(b) for m, b in (data.get("measures") or {}).items()
                if isinstance(b, dict)}
    timings = stats(data.get("timings"))
    measure = data.get("timing_measure") or ("gpu" if timings else "")
    if timings:
        measures.setdefault(measure, timings)
    return {"status": data.get("status"), "reason": data.get("reason"),
            "message": str(data.get("message", ""))[:400], "flags": list(data.get("flags") or []),
            "timing_measure": measure, "speedup_vs_eager": data.get("speedup_vs_eager"),
            "speedup_vs_compile": data.get("speedup_vs_compile"), "measures": measures,
            "notes": [str(n)[:200] for n in (data.get("notes") or [])][:8],
            "phases_s": data.get("phases_s") or {}}


def our_eval(entry: Entry, candidate: Path, args: argparse.Namespace, timeout: float,
             extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "kernelevo.cli.app", "eval", f"kernelbench:{entry.problem}",
           str(candidate), "--json", "--kernelbench-dir", args.kb, *entry.eval_args, *extra]
    step = run_step(cmd, child_env(args.src), timeout)
    raw = step.pop("json")
    step["verdict"] = parse_verdict(raw)
    if raw:  # the whole verdict stays for later questions; its logs only in part
        step["raw"] = {**raw, "logs": str(raw.get("logs", ""))[-TAIL:]}
    if step["verdict"] is None and step["rc"] == 2 and "No such option" in step["stderr_tail"]:
        step["unsupported"] = f"the CLI rejects {' '.join(extra)}"
    return step


# ---------------------------------------------------------------- one entry

def evaluate_entry(entry: Entry, args: argparse.Namespace, deadline: float | None) -> dict:
    folder = Path(args.candidates or Path(args.manifest).parent / "candidates")
    candidate = (folder / entry.file).resolve()
    task = resolve_problem(args.kb, entry.problem)
    record = {"file": entry.file, "problem": entry.problem, "kind": entry.kind,
              "expect_reasons": entry.expect_reasons, "candidate": str(candidate),
              "task": str(task) if task else None,
              "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    missing = ("no candidate file" if not candidate.is_file()
               else f"no task {entry.problem} under {args.kb}" if task is None else None)
    if missing:
        record.update(error=missing, complete=True)
        return record
    source = candidate.read_text()
    record["sha256"] = hashlib.sha256(source.encode()).hexdigest()[:12]
    record["backend"] = guess_backend(entry, source)
    started = time.perf_counter()
    for step in args.steps:
        if step in ("timers", "kb") and entry.kind != "honest" and \
                not (step == "kb" and args.kb_on_bad):
            continue
        timeout = step_timeout(args.timeout, deadline)
        if timeout is None:
            record[step] = {"skipped": "budget"}
            continue
        record[step] = run_named_step(step, entry, candidate, task, record["backend"], args,
                                      timeout)
    record["wall_s"] = round(time.perf_counter() - started, 3)
    record["complete"] = not any(isinstance(record.get(s), dict) and
                                 record[s].get("skipped") == "budget" for s in STEPS)
    return record


def step_timeout(timeout: float, deadline: float | None) -> float | None:
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    return min(timeout, left) if left >= 15 else None


def run_named_step(step: str, entry: Entry, candidate: Path, task: Path, backend: str,
                   args: argparse.Namespace, timeout: float) -> dict:
    if step == "ours":
        return our_eval(entry, candidate, args, timeout, [])
    if step == "ours_kb":
        return our_eval(entry, candidate, args, timeout, shlex.split(args.our_kb_args))
    if step == "timers":
        cmd = [sys.executable, str(REPO / "bench/reference_timers.py"), str(task), str(candidate)]
        return run_step(cmd, child_env(), timeout)
    cmd = [sys.executable, str(REPO / "bench/kb_harness.py"), str(task), str(candidate),
           "--kb-src", str(Path(args.kb) / "src"), "--deps", args.kb_deps, "--backend", backend]
    return run_step(cmd, child_env(args.kb_deps if os.path.isdir(args.kb_deps) else None),
                    timeout)


# ---------------------------------------------------------------- rows

def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 \
        and b > 0 else None


def pct(ours, theirs):
    r = ratio(ours, theirs)
    return (r - 1.0) * 100.0 if r is not None else None


def accepted(verdict: dict) -> bool:
    """A pass that counts as a kernel: ok, and not a PyTorch-only baseline."""
    return verdict.get("status") == "ok" and verdict.get("reason") != "pytorch_only" \
        and "no_custom_kernel" not in verdict.get("flags", [])


def outcome(kind: str, expect: list[str], verdict: dict | None) -> str:
    if not verdict:
        return "ERROR"
    if verdict.get("status") == "skipped":
        return "SKIP"
    if kind == "honest":
        return "OK" if accepted(verdict) else "WRONG"
    if kind == "bad":
        if accepted(verdict):
            return "WRONG"
        return "OK" if not expect or verdict.get("reason") in expect else "OK*"
    return "?"


def stat(verdict: dict | None, measure: str, who: str, key: str = "median_ms"):
    return (((verdict or {}).get("measures") or {}).get(measure) or {}).get(who, {}).get(key)


def verdict_of(record: dict, step: str) -> dict | None:
    return (record.get(step) or {}).get("verdict")


def row_for(record: dict) -> dict:
    """One table row: verdicts, speedups by every timer, and the agreement pairs (%)."""
    default, kbmode = verdict_of(record, "ours"), verdict_of(record, "ours_kb")
    verdict = default or kbmode
    timed = default if stat(default, "gpu", "candidate") else kbmode
    timers = (record.get("timers") or {}).get("json") or {}
    kb = (record.get("kb") or {}).get("json") or {}
    kind, expect = record.get("kind"), record.get("expect_reasons") or []
    row = {"file": record["file"], "problem": record["problem"], "kind": kind,
           "expected": "pass" if kind == "honest" else "reject" + (
               f": {', '.join(expect)}" if expect else ""),
           "reason": (verdict or {}).get("reason") or _failure(record),
           "outcome": outcome(kind, expect, verdict),
           "modes_agree": (default or {}).get("reason") == (kbmode or {}).get("reason")
           if default and kbmode else None,
           "kb_correct": kb.get("correctness"),
           "kb_static_ok": (kb.get("static_check") or {}).get("ok"),
           "timers_match": (timers.get("check") or {}).get("match")}
    cand, ref = timers.get("candidate") or {}, timers.get("reference") or {}
    row.update({
        "ours_gpu_x": ratio(stat(timed, "gpu", "eager"), stat(timed, "gpu", "candidate")),
        "ours_call_x": ratio(stat(timed, "call", "eager"), stat(timed, "call", "candidate")),
        "do_bench_x": ratio(ref.get("do_bench_ms"), cand.get("do_bench_ms")),
        "loop_x": ratio(ref.get("loop_ms"), cand.get("loop_ms")),
        "profiler_x": ratio(ref.get("profiler_ms"), cand.get("profiler_ms")),
        "ours_kb_x": ratio(stat(kbmode, "kernelbench", "eager", "mean_ms"),
                           stat(kbmode, "kernelbench", "candidate", "mean_ms")),
        "kb_x": ratio(kb.get("ref_runtime"), kb.get("runtime")),
    })
    row.update(agreement(timed, kbmode, cand, ref, kb))
    row["candidate_ms"] = {  # the times behind the ratios, for a reader of the JSON
        "ours_gpu": stat(timed, "gpu", "candidate"), "ours_call": stat(timed, "call", "candidate"),
        "ours_kb_mean": stat(kbmode, "kernelbench", "candidate", "mean_ms"),
        "do_bench": cand.get("do_bench_ms"), "loop": cand.get("loop_ms"),
        "profiler": cand.get("profiler_ms"), "kb_mean": kb.get("runtime")}
    row["step_problems"] = step_problems(record)
    return row


def step_problems(record: dict) -> list[str]:
    """Steps that gave nothing to compare, each with a short why."""
    problems = []
    for step in STEPS:
        result = record.get(step)
        why = _why_empty(step, result) if isinstance(result, dict) else None
        if why:
            problems.append(f"{step}: {why}")
    return problems


def _why_empty(step: str, result: dict) -> str | None:
    data = result.get("json") or {}
    if result.get("skipped"):
        return result["skipped"]
    if result.get("unsupported"):
        return "unsupported"
    if result.get("timed_out"):
        return "timeout"
    if step.startswith("ours"):
        return None if result.get("verdict") else "no verdict"
    if not data:
        return f"rc={result.get('rc')}, no JSON"
    if data.get("skipped"):
        return data["skipped"]
    return "error" if data.get("error") else None


def _failure(record: dict) -> str:
    for step in ("ours", "ours_kb"):
        result = record.get(step) or {}
        if result.get("unsupported"):
            continue
        if result.get("timed_out"):
            return f"{step}: timeout"
        if "rc" in result:
            lines = [l.strip() for l in result.get("stderr_tail", "").splitlines() if l.strip()]
            last = f": {lines[-1][:120]}" if lines else ""
            return f"{step}: rc={result['rc']}, no verdict{last}"
    return record.get("error") or "-"


def agreement(timed, kbmode, cand: dict, ref: dict, kb: dict) -> dict:
    """Ours minus theirs, in % of theirs, for the candidate and the eager reference."""
    return {
        "gpu_vs_do_bench": pct(stat(timed, "gpu", "candidate"), cand.get("do_bench_ms")),
        "call_vs_loop": pct(stat(timed, "call", "candidate"), cand.get("loop_ms")),
        "kbmode_vs_kb": pct(stat(kbmode, "kernelbench", "candidate", "mean_ms"), kb.get("runtime")),
        "gpu_vs_do_bench_eager": pct(stat(timed, "gpu", "eager"), ref.get("do_bench_ms")),
        "call_vs_loop_eager": pct(stat(timed, "call", "eager"), ref.get("loop_ms")),
        "kbmode_vs_kb_eager": pct(stat(kbmode, "kernelbench", "eager", "mean_ms"),
                                  kb.get("ref_runtime")),
    }


PAIRS = ("gpu_vs_do_bench", "call_vs_loop", "kbmode_vs_kb", "gpu_vs_do_bench_eager",
         "call_vs_loop_eager", "kbmode_vs_kb_eager")
SPEEDUP_PAIRS = (("ours_gpu_x", "do_bench_x"), ("ours_call_x", "loop_x"), ("ours_kb_x", "kb_x"))


def summarize(rows: list[dict]) -> dict:
    honest = [r for r in rows if r["kind"] == "honest"]
    bad = [r for r in rows if r["kind"] == "bad"]
    summary = {
        "entries": len(rows), "honest": len(honest), "bad": len(bad),
        "honest_rejected": [r["file"] for r in honest if r["outcome"] == "WRONG"],
        "bad_accepted": [r["file"] for r in bad if r["outcome"] == "WRONG"],
        "bad_rejected_other_reason": [r["file"] for r in bad if r["outcome"] == "OK*"],
        "errors": [r["file"] for r in rows if r["outcome"] in ("ERROR", "SKIP", "?")],
        "modes_disagree": [r["file"] for r in rows if r["modes_agree"] is False],
        "step_problems": dict(collections.Counter(p for r in rows for p in r["step_problems"])),
        "kb_incorrect_honest": [r["file"] for r in honest if r["kb_correct"] is False],
        "timers_mismatch": [r["file"] for r in rows if r["timers_match"] is False],
        "kb_accepted_bad": [r["file"] for r in bad if r["kb_correct"] is True],
        "disagreement_pct": {pair: spread([(r["file"], r[pair]) for r in rows])
                             for pair in PAIRS},
        "speedup_disagreement_pct": {
            f"{a}_vs_{b}": spread([(r["file"], pct(r[a], r[b])) for r in rows])
            for a, b in SPEEDUP_PAIRS},
    }
    return summary


def spread(values: list[tuple[str, float | None]]) -> dict:
    """n, median of |%|, signed median, and the largest |%| with its file."""
    known = [(name, v) for name, v in values if v is not None]
    if not known:
        return {"n": 0}
    worst = max(known, key=lambda item: abs(item[1]))
    return {"n": len(known), "median_abs": statistics.median(abs(v) for _, v in known),
            "median": statistics.median(v for _, v in known), "max_abs": abs(worst[1]),
            "max_signed": worst[1], "max_file": worst[0]}


# ---------------------------------------------------------------- writing

def fx(value) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) else "-"


def fp(value) -> str:
    return f"{value:+.1f}%" if isinstance(value, (int, float)) else "-"


COLUMNS = (("candidate", lambda r: r["file"]), ("problem", lambda r: r["problem"]),
           ("expected", lambda r: r["expected"]), ("our verdict", lambda r: r["reason"]),
           ("", lambda r: r["outcome"]),
           ("ours gpu", lambda r: fx(r["ours_gpu_x"])),
           ("ours call", lambda r: fx(r["ours_call_x"])),
           ("do_bench", lambda r: fx(r["do_bench_x"])), ("loop", lambda r: fx(r["loop_x"])),
           ("profiler", lambda r: fx(r["profiler_x"])),
           ("ours kb-mode", lambda r: fx(r["ours_kb_x"])), ("KB harness", lambda r: fx(r["kb_x"])),
           ("gpu vs do_bench", lambda r: fp(r["gpu_vs_do_bench"])),
           ("call vs loop", lambda r: fp(r["call_vs_loop"])),
           ("kb-mode vs KB", lambda r: fp(r["kbmode_vs_kb"])))


def markdown_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(cell(r)).replace("|", "\\|") for _, cell in COLUMNS) + " |"
              for r in rows]
    return "\n".join(lines)


def summary_lines(summary: dict) -> list[str]:
    s = summary
    lines = [f"honest rejected {len(s['honest_rejected'])}/{s['honest']}"
             f"{_names(s['honest_rejected'])}; bad accepted {len(s['bad_accepted'])}/{s['bad']}"
             f"{_names(s['bad_accepted'])}; bad rejected for another reason "
             f"{len(s['bad_rejected_other_reason'])}; errors or skipped {len(s['errors'])}"
             f"{_names(s['errors'])}"]
    if s["kb_incorrect_honest"] or s["kb_accepted_bad"]:
        lines.append(f"KernelBench's harness: honest called incorrect "
                     f"{len(s['kb_incorrect_honest'])}{_names(s['kb_incorrect_honest'])}; "
                     f"bad called correct {len(s['kb_accepted_bad'])}"
                     f"{_names(s['kb_accepted_bad'])}")
    if s["timers_mismatch"]:
        lines.append(f"reference_timers' loose check failed: {', '.join(s['timers_mismatch'])}")
    if s["modes_disagree"]:
        lines.append("default and kernelbench-mode verdicts differ: "
                     + ", ".join(s["modes_disagree"]))
    if s["step_problems"]:
        lines.append("steps without a result: " + ", ".join(
            f"{why} x{count}" for why, count in sorted(s["step_problems"].items())))
    for group in ("disagreement_pct", "speedup_disagreement_pct"):
        parts = [f"{pair} n={d['n']} median {d['median_abs']:.2f}% max {d['max_signed']:+.2f}% "
                 f"({d['max_file']})" for pair, d in s[group].items() if d.get("n")]
        if parts:
            lines.append(("time" if group == "disagreement_pct" else "speedup")
                         + " disagreement (ours vs theirs, |%|): " + "; ".join(parts))
    return lines


def _names(files: list[str]) -> str:
    return f" ({', '.join(files)})" if files else ""


def write_summary(out: Path, suffix: str, records: list[dict], env: dict,
                  command: str, not_run: list[str]) -> str:
    rows = [row_for(r) for r in records]
    summary = summarize(rows)
    summary["not_run"] = not_run
    payload = {"environment": env, "command": command, "summary": summary, "rows": rows}
    (out / f"summary{suffix}.json").write_text(json.dumps(payload, indent=1) + "\n")
    head = ["# KernelBench level 1: this project vs KernelBench's harness and outside timers",
            "", f"Date {env.get('date', '?')}; GPU {env.get('gpu', '?')}; driver "
            f"{env.get('driver', '?')}; Python {env.get('python', '?')}; torch "
            f"{env.get('torch', '?')}; triton {env.get('triton', '?')}.", "",
            f"    {command}", "",
            "Speedups are over the eager reference (x); the last three columns are ours "
            "minus theirs in % of theirs, for the candidate's time.", ""]
    tail = [""] + [f"- {line}" for line in summary_lines(summary)]
    if not_run:
        tail.append(f"- not run (budget): {', '.join(not_run)}")
    text = "\n".join(head) + markdown_table(rows) + "\n" + "\n".join(tail) + "\n"
    (out / f"table{suffix}.md").write_text(text)
    return text


def key(item) -> str:
    """An entry's identity: the same file may be judged against several problems."""
    if isinstance(item, Entry):
        return f"{item.problem}:{item.file}"
    return f"{item['problem']}:{item['file']}"


def read_records(paths: list[Path]) -> list[dict]:
    """Records by entry, the last complete one winning (shards, resumed runs)."""
    by_key: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                if record.get("complete") or key(record) not in by_key:
                    by_key[key(record)] = record
    return list(by_key.values())


# ---------------------------------------------------------------- environment

PROBE = """
import json, platform, torch
info = {"python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.cuda.is_available()}
try:
    import triton; info["triton"] = triton.__version__
except Exception as exc:
    info["triton"] = f"absent ({type(exc).__name__})"
if info["cuda"]:
    info["gpu"] = torch.cuda.get_device_name(0)
print(json.dumps(info))
"""


def probe_env() -> dict:
    """Versions and the GPU, from a child process (this one never touches CUDA)."""
    step = run_step([sys.executable, "-c", PROBE], child_env(), 120)
    env = step["json"] or {"probe_error": step["stderr_tail"][-500:]}
    env.setdefault("gpu", "none")
    env["date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    try:
        env["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        env["driver"] = "none"
    return env


# ---------------------------------------------------------------- main

def run(args: argparse.Namespace, out: Path, suffix: str) -> tuple[list[dict], list[str]]:
    results = out / f"results{suffix}.jsonl"
    entries = select(load_manifest(args.manifest), args.only, args.shard)
    done = {key(r) for r in read_records([results]) if r.get("complete")} \
        if args.resume and results.exists() else set()
    started = time.monotonic()
    deadline = started + args.budget_s + args.grace_s if args.budget_s else None
    not_run = []
    for number, entry in enumerate(entries, 1):
        if key(entry) in done:
            continue
        if args.budget_s and time.monotonic() - started > args.budget_s:
            not_run.append(key(entry))
            continue
        record = evaluate_entry(entry, args, deadline)
        with results.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        row = row_for(record)
        print(f"[{number}/{len(entries)}] {entry.file}: {row['reason']} {row['outcome']}; "
              f"gpu {fx(row['ours_gpu_x'])} do_bench {fx(row['do_bench_x'])} "
              f"kb {fx(row['kb_x'])}; {record.get('wall_s', 0):.1f} s", file=sys.stderr, flush=True)
    return read_records([results]) if results.exists() else [], not_run


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    given = sys.argv[1:] if argv is None else argv
    command = "python3 bench/kernelbench_l1.py " + shlex.join(given)
    if args.summarize:
        # The environment and commands of the runs that wrote the results.
        files = sorted(out.glob("summary-*.json")) or sorted(out.glob("summary.json"))
        runs = [json.loads(p.read_text()) for p in files]
        env = runs[0].get("environment", {}) if runs else {}
        commands = "\n    ".join(run.get("command", "?") for run in runs) or command
        print(write_summary(out, "", read_records(sorted(out.glob("results*.jsonl"))), env,
                            commands, []))
        return
    suffix = "-shard{}of{}".format(*args.shard.split("/")) if args.shard else ""
    env = probe_env()
    print(f"environment: {json.dumps(env)}", file=sys.stderr, flush=True)
    records, not_run = run(args, out, suffix)
    print(write_summary(out, suffix, records, env, command, not_run))


if __name__ == "__main__":
    main()
