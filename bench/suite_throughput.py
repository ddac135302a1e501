"""`kernelevo suite` against KernelBench's harness on one GPU, same corpus, same call.

    KERNELEVO_CACHE_DIR=/tmp/ke-suite PYTHONPATH=src python3 bench/suite_throughput.py \\
        --kb .kb --out DIR [--phases suite again kb builds] [--kb-budget-s 200] [--only ...]
        [--one-per-task]

Corpus: every entry of bench/kernelbench/manifest.toml (Triton and CUDA, honest
and bad, KernelBench levels 1 and 2), each problem shrunk as
bench/kernelbench_batch.py does. Phases:
  suite   one `kernelevo suite DIR/tasks --solutions DIR/solutions` process,
          its caches empty at the start (CUDA builds cold); wall time, rows,
          and each verdict against the manifest's expected reasons, and
          how busy the CPUs and the GPU were meanwhile (bench/machine_load.py)
  again   the same suite once more with the first one's cache folder (the
          same set judged a second time on this machine); needs `suite` first
  suite-rest, again-rest
          the rows a phase cut at its limit left, judged by `kernelevo suite
          --resume` in the same folders (a later call on the same machine:
          a whole pass that does not fit one device call); the pass's rate
          is then all its rows over both calls' seconds
  kb      KernelBench's harness, one fresh process per candidate
          (bench/kb_harness.py), over the corpus in a shuffled order (fixed
          seed) until --kb-budget-s is spent; candidates per hour from that
  builds  a small CUDA extension built cold through the judge's prebuild and
          through plain load_inline; a broken source through both
Writes DIR/suite_throughput.json and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from kernelbench_batch import CANDIDATES, load_entries, prepare  # noqa: E402
from machine_load import MachineLoad, load_line  # noqa: E402
from kernelevo.suite.time_spent import time_lines  # noqa: E402

STOP_GRACE_S = 20  # for a suite stopped at its limit to write its summary, then killed


def layout(entries: list[dict], problems: dict, out: Path) -> tuple[Path, Path]:
    """The suite's inputs: one task file per problem, solutions named <task>__<file>."""
    tasks, solutions = out / "tasks", out / "solutions"
    for folder in (tasks, solutions):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for problem, info in problems.items():
        shutil.copy(info["path"], tasks / f"{_stem(problem)}.py")
    for entry in entries:
        shutil.copy(CANDIDATES / entry["file"],
                    solutions / f"{_stem(entry['problem'])}__{entry['file']}")
    return tasks, solutions


def _stem(problem: str) -> str:
    return problem.replace("/", "_")


def expected_reasons(entry: dict, shrunk: bool) -> list[str]:
    """The verdicts that count as right; a problem shrunk for the batch may add some
    (a kernel that hard-codes the task's sizes is wrong at the shrunk sizes already)."""
    return entry["expect_reasons"] + (entry.get("shrunk_expect_reasons", []) if shrunk else [])


# A pass whose first rows all differ from the corpus's verdicts is broken (a judge
# that fails every candidate on this machine): it is stopped, not run to its limit.
EARLY_ROWS = 6


def _verdict(row: dict, expected: dict, problems: dict | None) -> dict | None:
    """A row against the corpus: its file, kind, reason and whether that is right."""
    file = (row.get("file") or "").split("__", 1)[-1] if row.get("file") else None
    entry = expected.get(file or "")
    if entry is None:
        return None
    shrunk = bool((problems or {}).get(entry["problem"], {}).get("changes"))
    return {"file": file, "kind": entry["kind"], "backend": _backend(entry),
            "reason": row["reason"], "right": row["reason"] in expected_reasons(entry, shrunk)}


def _read_rows(results: Path) -> list[dict]:
    return [json.loads(line) for line in results.read_text().splitlines()
            if line.strip()] if results.exists() else []


def suite_phase(entries: list[dict], tasks: Path, solutions: Path, out: Path,
                timeout_s: float, extra: list[str] = (), problems: dict | None = None,
                cache: str | None = None, name: str = "suite", resume: bool = False) -> dict:
    """One `kernelevo suite` process; cut at `timeout_s`, the rows it wrote still count.

    `cache`: the cache folder to judge with (None: a new, empty one, as on a
    machine where KernelEvo never ran). The first row's time is the seconds
    from starting the command to its first line in results.jsonl. `resume`:
    the rows `name` left are judged in its folder (`--resume`); `judged_now`
    and `per_hour` then count this call's rows only."""
    result_dir = out / name
    results = result_dir / "results.jsonl"
    before = _rows(results) if resume else 0
    if not resume:
        shutil.rmtree(result_dir, ignore_errors=True)
    cache = cache or tempfile.mkdtemp(prefix="ke-suite-cache-")
    env = {**os.environ, "KERNELEVO_CACHE_DIR": cache}
    first_row_s = None
    started = time.perf_counter()
    log_name = f"{name}_rest_log.txt" if resume else f"{name}_log.txt"
    with (out / log_name).open("w") as log, MachineLoad() as load:
        process = subprocess.Popen([sys.executable, "-m", "kernelevo.cli.app", "suite", str(tasks),
                                    "--solutions", str(solutions), "--out", str(result_dir), *extra,
                                    *(["--resume"] if resume else [])],
                                   env=env, text=True, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        expected = {entry["file"]: entry for entry in entries}
        broken = None
        while process.poll() is None and time.perf_counter() - started < timeout_s:
            count = _rows(results)
            if first_row_s is None and count > before:
                first_row_s = time.perf_counter() - started
            if broken is None and count - before >= EARLY_ROWS:
                first = [v for row in _read_rows(results)[before:before + EARLY_ROWS]
                         if (v := _verdict(row, expected, problems))]
                broken = bool(first) and not any(v["right"] for v in first)
                if broken:
                    break
            time.sleep(0.1)
        stopped_at = None
        if process.poll() is None:
            stopped_at = time.perf_counter() - started  # the rate counts up to here
            # Stopped as a user would: the suite writes suite.json (its time account
            # included) from the rows judged so far; killed if it does not end.
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        rc = process.wait()
    wall = stopped_at or time.perf_counter() - started
    rows = _read_rows(results)
    verdicts = []
    for row in rows:
        verdict = _verdict(row, expected, problems)
        if verdict is None:
            continue
        verdicts.append({**verdict,
                         "wall_s": row.get("wall_s"), "speedup": row.get("speedup"),
                         "flags": row.get("flags"), "message": (row.get("message") or "")[:200],
                         # where the first rows' seconds went (issue 38's first row)
                         **({"phases_s": row.get("phases_s"), "lane": row.get("lane"),
                             "build_wait_s": row.get("build_wait_s")}
                            if len(verdicts) < 6 else {})})
    summary = result_dir / "suite.json"
    spent = json.loads(summary.read_text()).get("time_spent") if summary.is_file() else None
    now = len(rows) - before
    return {"rc": rc, "wall_s": round(wall, 1), "judged": len(verdicts), "judged_now": now,
            "stopped_early": (f"its first {EARLY_ROWS} rows all differ from the corpus's "
                              "verdicts: stopped, not run to its limit") if broken else None,
            "cache": cache, "time_spent": spent, "load": load.summary(),
            "load_samples": load.samples,
            "first_row_s": None if first_row_s is None else round(first_row_s, 1),
            "per_hour": round(3600 * now / wall) if now > 0 else None,
            "wrong": [v for v in verdicts if not v["right"]], "verdicts": verdicts}


def _rows(results: Path) -> int:
    """Rows in a suite's results.jsonl so far (0 where there is none)."""
    if not results.is_file():
        return 0
    return sum(1 for line in results.read_text().splitlines() if line.strip())


def _backend(entry: dict) -> str:
    return entry.get("backend", "triton")


def one_per_task(entries: list[dict]) -> list[dict]:
    """A published set: one honest solution per task, its CUDA one where it has one.

    The manifest lists a task's Triton solution first; taking the first would
    leave every CUDA solution out (the corpus's 17 are all on tasks that have
    a Triton one too), and a published set has both.
    """
    chosen: dict[str, dict] = {}
    for entry in entries:
        if entry["kind"] != "honest":
            continue
        held = chosen.get(entry["problem"])
        if held is None or (_backend(entry) == "cuda" and _backend(held) != "cuda"):
            chosen[entry["problem"]] = entry
    return list(chosen.values())


def stratified(entries: list[dict], seed: int = 7) -> list[dict]:
    """The corpus shuffled within each backend, then dealt so that every prefix holds
    Triton and CUDA candidates in the corpus's own proportion (a budget that ends
    early still samples both)."""
    rng = random.Random(seed)
    groups = {backend: [e for e in entries if _backend(e) == backend]
              for backend in sorted({_backend(e) for e in entries})}
    for group in groups.values():
        rng.shuffle(group)
    order, taken = [], {backend: 0 for backend in groups}
    for _ in range(len(entries)):
        # the backend furthest behind its share of the candidates dealt so far
        backend = min((b for b in groups if taken[b] < len(groups[b])),
                      key=lambda b: (taken[b] + 1) / len(groups[b]))
        order.append(groups[backend][taken[backend]])
        taken[backend] += 1
    return order


def kb_phase(entries: list[dict], problems: dict, kb: Path, out: Path, budget_s: float,
             stratify: bool = False, progress: Path | None = None) -> dict:
    """KernelBench's harness, a fresh process per candidate, until the budget is spent.

    Besides its rate on what it judged, the rate it would have on the corpus's
    own mix: each backend's mean time, weighted by the corpus's counts (only
    when the sample holds both backends).
    """
    order = stratified(entries) if stratify else list(entries)
    if not stratify:
        random.Random(7).shuffle(order)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": tempfile.mkdtemp(prefix="kb-ext-")}
    walls, rows, started = [], [], time.perf_counter()
    for entry in order:
        if time.perf_counter() - started > budget_s:
            break
        begun = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, str(ROOT / "bench" / "kb_harness.py"), "--kb-src",
                 str(kb / "src"), "--deps", ".kbdeps", "--backend", _backend(entry),
                 problems[entry["problem"]]["path"], str(CANDIDATES / entry["file"])],
                capture_output=True, text=True, timeout=300, env=env)
            last, rc = (done.stdout.strip().splitlines() or ["{}"])[-1], done.returncode
        except subprocess.TimeoutExpired:
            last, rc = "timeout", -9
        wall = time.perf_counter() - begun
        walls.append(wall)
        rows.append({"file": entry["file"], "backend": _backend(entry), "kind": entry["kind"],
                     "wall_s": round(wall, 2), "rc": rc, "result": last[:300]})
        print(f"kb {entry['file']:60} rc={rc} {wall:6.1f}s", flush=True)
        if progress is not None:  # a call cut short keeps the rows so far
            progress.write_text(json.dumps(_kb_summary(entries, rows, walls, started, stratify),
                                           indent=1))
    return _kb_summary(entries, rows, walls, started, stratify)


def _kb_summary(entries: list[dict], rows: list[dict], walls: list[float], started: float,
                stratify: bool) -> dict:
    total = time.perf_counter() - started
    means = {b: sum(r["wall_s"] for r in rows if r["backend"] == b)
             / max(1, sum(r["backend"] == b for r in rows)) for b in ("triton", "cuda")}
    counts = {b: sum(_backend(e) == b for e in entries) for b in ("triton", "cuda")}
    both = all(any(r["backend"] == b for r in rows) for b in counts if counts[b])
    mix_s = sum(counts[b] * means[b] for b in counts)
    return {"candidates": len(walls), "wall_s": round(total, 1),
            "per_hour": round(3600 * len(walls) / total) if walls else None,
            "per_hour_corpus_mix": round(3600 * len(entries) / mix_s) if both and mix_s else None,
            "mean_s": {b: round(m, 2) for b, m in means.items()},
            "cuda": sum(r["backend"] == "cuda" for r in rows), "stratified": stratify,
            "rows": rows}


SMALL_EXTENSION = r'''
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
__global__ void add_one(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
torch::Tensor add_one_launch(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    add_one<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_source = "torch::Tensor add_one_launch(torch::Tensor x);"
module = load_inline(name="NAME", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["add_one_launch"], verbose=False)
'''


def builds_phase(labels: tuple[str, ...] = ("ok", "other", "broken"),
                 out: Path | None = None) -> dict:
    """Cold builds of one small extension: the judge's prebuild against plain load_inline.

    ok: caches empty; other: another extension into ok's cache (its host file's
    precompiled header warm: a machine that has built one before; no plain
    load_inline for it, which has no such header); broken: a source nvcc
    refuses, caches empty. `again`: the same prebuild once more in a process
    that forgot it built it (the build cache on disk answers).
    """
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.cuda.prebuild import forget_prebuilt, prebuild_source
    from kernelevo.evaluate.parent.judge import child_environment
    from kernelevo.evaluate.sandbox.jobs import start_forkserver

    # The judge's warm process (torch, inductor and Triton imported once) starts
    # with the judge, as in a suite or a service: not a build's cost. Timed apart.
    started = time.perf_counter()
    start_forkserver(False)
    prebuild_source("warm = True\n", EvalConfig(), child_environment("cuda", None))  # no build
    forget_prebuilt()
    results: dict = {"forkserver_start_s": round(time.perf_counter() - started, 2)}
    sources = {"ok": SMALL_EXTENSION, "other": SMALL_EXTENSION.replace("1.0f", "2.0f"),
               "broken": SMALL_EXTENSION.replace("x[i] + 1.0f", "x[i] + missing")}
    times = (out or Path(tempfile.mkdtemp())) / "build_times.jsonl"
    caches: dict = {}
    tag = str(int(time.time()))
    for label in labels:
        source = sources[label].replace("NAME", f"bench_{label}_{tag}")
        entry = {}
        if label != "other":
            with tempfile.TemporaryDirectory() as folder:
                env = {**os.environ, "TORCH_EXTENSIONS_DIR": folder, "MAX_JOBS": "8"}
                script = Path(folder) / "plain.py"
                script.write_text(source)
                started = time.perf_counter()
                plain = subprocess.run([sys.executable, str(script)], env=env,
                                       capture_output=True, text=True)
                entry.update(plain_load_inline_s=round(time.perf_counter() - started, 2),
                             plain_rc=plain.returncode)
        if label == "other" and "ok" in caches:
            # ok's build answered before its precompiled header was done (the
            # prebuild's job finishes it after): "other" is a build on a machine
            # that has built one before, so it starts once that header is in.
            started = time.perf_counter()
            store = Path(caches["ok"]) / "torch_extensions" / "kernelevo-tools" / "pch"
            while (not list(store.glob("host-*/torch/extension.h.gch"))
                   and time.perf_counter() - started < 120):
                time.sleep(0.2)
            entry["header_ready_after_s"] = round(time.perf_counter() - started, 2)
            time.sleep(0.5)  # its builder's step line follows the header
            after = Path(caches["ok"]) / "torch_extensions" / "kernelevo-build-times.jsonl"
            if after.is_file():
                results["ok"]["steps_after_answer"] = [
                    json.loads(line) for line in after.read_text().splitlines() if line.strip()]
                after.unlink()
        cache = caches.get("ok") if label == "other" else None
        cache = cache or tempfile.mkdtemp(prefix="ke-build-")
        caches[label] = cache
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(cache) / "torch_extensions")
        # The compiler stand-ins write their steps' times where the confined
        # build may write (its build cache); copied out after the build.
        inside = Path(cache) / "torch_extensions" / "kernelevo-build-times.jsonl"
        inside.parent.mkdir(parents=True, exist_ok=True)
        os.environ["KERNELEVO_BUILD_TIMES"] = str(inside)
        started = time.perf_counter()
        build_s = prebuild_source(source, EvalConfig(), child_environment("cuda", None))
        entry.update(prebuild_s=round(time.perf_counter() - started, 2),
                     prebuild_build_s=round(build_s, 2))
        steps = inside.read_text().splitlines() if inside.is_file() else []
        entry["steps"] = [json.loads(line) for line in steps if line.strip()]
        with times.open("a") as handle:
            handle.write(json.dumps({"label": label, "steps": entry["steps"]}) + "\n")
        inside.unlink(missing_ok=True)
        forget_prebuilt()
        started = time.perf_counter()
        prebuild_source(source, EvalConfig(), child_environment("cuda", None))
        entry["prebuild_again_s"] = round(time.perf_counter() - started, 2)
        results[label] = entry
        print(f"build {label}: {entry}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phases", nargs="*", default=["builds", "suite", "kb"])
    parser.add_argument("--kb-budget-s", type=float, default=200.0)
    parser.add_argument("--kb-stratified", action="store_true",
                        help="deal the harness's candidates so every prefix holds Triton and "
                        "CUDA in the corpus's proportion")
    parser.add_argument("--suite-timeout-s", type=float, default=1800.0)
    parser.add_argument("--suite-args", default="", help="more arguments for `kernelevo suite`, "
                        "e.g. '--no-compile' (time eager only, as KernelBench's harness does)")
    parser.add_argument("--max-elements", type=int, default=1 << 24)
    parser.add_argument("--one-per-task", action="store_true",
                        help="one honest solution per task (a published set's shape)")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--cache", type=Path,
                        help="the cache folder to judge with: the suite phase's (default: a "
                        "new, empty one), and the again phase's when no suite phase runs "
                        "before it in this command (a fresh pass and its second pass in two "
                        "device calls on one machine)")
    parser.add_argument("--builds", default="ok,other,broken",
                        help="which builds the builds phase makes (ok, other, broken)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    entries = load_entries(args.only, forward_only=True)
    if args.one_per_task:
        entries = one_per_task(entries)
    problems = prepare(entries, args.kb, args.out, args.max_elements)
    tasks, solutions = layout(entries, problems, args.out)
    result: dict = {"corpus": {"entries": len(entries), "problems": len(problems),
                               "cuda": sum(_backend(e) == "cuda" for e in entries),
                               "honest": sum(e["kind"] == "honest" for e in entries)}}
    path = args.out / "suite_throughput.json"
    if any(phase.endswith("-rest") for phase in args.phases) and path.is_file():
        result = {**json.loads(path.read_text()), **result}  # the cut phases' figures kept
    for phase in args.phases:
        if phase == "builds":
            result["builds"] = builds_phase(tuple(args.builds.split(",")), args.out)
        elif phase == "suite":
            if args.cache:
                args.cache.mkdir(parents=True, exist_ok=True)
            result["suite"] = suite_phase(entries, tasks, solutions, args.out,
                                          args.suite_timeout_s, args.suite_args.split(),
                                          problems, cache=str(args.cache) if args.cache else None)
            result["suite"]["args"] = args.suite_args
        elif phase == "again":  # the same set judged again on this machine (its caches warm)
            cache = result.get("suite", {}).get("cache") or (str(args.cache) if args.cache
                                                             else None)
            if cache is None:
                parser.error("the again phase needs the suite phase before it or --cache")
            result["again"] = suite_phase(entries, tasks, solutions, args.out,
                                          args.suite_timeout_s, args.suite_args.split(),
                                          problems, cache=cache, name="again")
        elif phase in ("suite-rest", "again-rest"):
            cut = phase.removesuffix("-rest")
            if cut not in result:
                parser.error(f"{phase} needs {cut}'s figures in {path} (a call before on this "
                             "machine)")
            rest = suite_phase(entries, tasks, solutions, args.out, args.suite_timeout_s,
                               args.suite_args.split(), problems, cache=result[cut]["cache"],
                               name=cut, resume=True)
            rest["pass_wall_s"] = round(result[cut]["wall_s"] + rest["wall_s"], 1)
            rest["pass_per_hour"] = round(3600 * rest["judged"] / rest["pass_wall_s"])
            result[phase] = rest
        elif phase == "kb":
            result["kb"] = kb_phase(entries, problems, args.kb, args.out, args.kb_budget_s,
                                    args.kb_stratified, progress=args.out / "kb_partial.json")
        path.write_text(json.dumps(result, indent=1))
    suite, kb = result.get("suite", {}), result.get("kb", {})
    print(json.dumps(result["corpus"]))
    if suite:
        print(f"suite: {suite['judged']} judged in {suite['wall_s']} s = {suite['per_hour']}/h; "
              f"verdicts not as expected: {[(w['file'], w['reason']) for w in suite['wrong']]}")
    for name in ("suite", "again", "suite-rest", "again-rest"):
        if (result.get(name) or {}).get("stopped_early"):
            print(f"{name}: {result[name]['stopped_early']}")
    if kb:
        print(f"KernelBench harness: {kb['candidates']} ({kb['cuda']} CUDA) in {kb['wall_s']} s "
              f"= {kb['per_hour']}/h; on the corpus's mix {kb['per_hour_corpus_mix']}/h "
              f"(mean s {kb['mean_s']})")
    if suite.get("per_hour") and kb.get("per_hour"):
        print(f"ratio: {suite['per_hour'] / kb['per_hour']:.2f}x")
    for name in ("suite", "again"):
        run, mix = result.get(name, {}), kb.get("per_hour_corpus_mix")
        if run.get("time_spent"):
            print(f"{name}: " + "\n".join(time_lines(run["time_spent"])))
        if run.get("load"):
            print(f"{name}: {load_line(run['load'])}")
        if run.get("per_hour") and mix:
            print(f"{name}: first row after {run['first_row_s']} s; against the harness on "
                  f"the same mix: {run['per_hour'] / mix:.2f}x")
    for phase in ("suite-rest", "again-rest"):
        rest = result.get(phase)
        if rest and phase in args.phases:
            print(f"{phase}: {rest['judged_now']} more rows in {rest['wall_s']} s; the whole "
                  f"pass {rest['judged']} rows in {rest['pass_wall_s']} s = "
                  f"{rest['pass_per_hour']}/h"
                  + (f" ({rest['pass_per_hour'] / mix:.2f}x the harness on the same mix)"
                     if (mix := kb.get("per_hour_corpus_mix")) else ""))
    if "builds" in result:
        print(json.dumps(result["builds"]))


if __name__ == "__main__":
    main()
