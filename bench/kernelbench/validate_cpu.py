"""Judge every candidate of manifest.toml on this CPU with the project's own CLI.

    python bench/kernelbench/validate_cpu.py [--jobs 2] [--only SUBSTRING[,SUBSTRING...]] [--timeout 900]
    python bench/kernelbench/validate_cpu.py --rerun-mismatches   # again the failures, merged
    python3 bench/kernelbench/validate_cpu.py --device gpu [--extra-args=--no-compile]   # on a GPU

Each entry runs `kernelevo eval kernelbench:<problem> <file> --json` (plus the
entry's eval_args) under the Triton interpreter, in a subprocess, and its
verdict reason is checked against the manifest (cpu_expect_reasons where given,
else expect_reasons). Prints a table and writes results/cpu_validation.json.

CPU task edits. The judge shrinks a task's module-level integer constants for
the interpreter, but some level-1 sizes escape it: constants written as
products (`N = 2048 * 2`), sizes held in tuples (`input_shape = (32768,)`), and
single-constant GEMMs (`N = 4096`, whose product of constants is already under
the judge's limit, so a 4097^3 fp32 GEMM would run in the interpreter, where
tl.dot runs at about 25 MFLOP/s). Problem 35 (GroupNorm) is the reverse case:
the judge's odd sizes make its channel count indivisible by the group count,
so the reference itself fails. For those problems this script evaluates a
copy of the KernelBench file with the sizes below written in as literals (the
judge may shrink them further); the verdict records which edits were made.
Nothing else in the task changes. Level 2 has its own table (CPU_SIZES_L2):
spatial sizes written as chained assignments (`height = width = 128`), which
the judge does not take for size constants, 3-D transposed convolutions, and
GroupNorm tasks whose shrunk sizes break divisibility.

CUDA entries (backend = "cuda") need no special handling: on a CPU the judge
compiles their CUDA source with nvcc and ends with `no_gpu` (compiled) or
`compile_failed`; the manifest's cpu_expect_reasons say which.

With --device gpu the same table is made on a GPU machine: the KernelBench
tasks as they are (no edits), expect_reasons rather than cpu_expect_reasons,
the CLI run as `python3 -c "from kernelevo.cli.app import app; app()"` with src/ on
PYTHONPATH where there is no .venv, and results/gpu_validation.json written.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CANDIDATES = HERE / "candidates"
RESULTS = HERE / "results"

# problem number -> {module-level name: literal source written for the CPU run}
CPU_SIZES: dict[int, dict[str, str]] = {
    1: {"N": "201"},
    2: {"M": "131", "K": "160", "N": "201"},
    3: {"batch_size": "3", "m": "131", "k": "160", "n": "201"},
    13: {"N": "201"},
    14: {"N": "301"},
    15: {"M": "301"},
    16: {"M": "131", "K": "160", "N": "201"},
    17: {"M": "131", "K": "160", "N": "201"},
    18: {"M": "131", "K": "160", "N": "201"},
    # the judge's odd sizes break divisibility (features 64 -> 17 with 8 groups);
    # constants under 16 are left alone: 4 groups of 3 channels
    35: {"features": "12", "num_groups": "4"},
    89: {"batch_size": "67", "input_shape": "(1001,)"},
    90: {"batch_size": "67", "input_shape": "(257,)"},
    91: {"batch_size": "67", "input_shape": "(1001,)"},
    92: {"batch_size": "67", "input_shape": "(1001,)"},
    93: {"batch_size": "67", "input_shape": "(1001,)"},
    94: {"batch_size": "67", "input_shape": "(1001,)"},
    96: {"batch_size": "67", "input_shape": "(1001,)"},
    98: {"batch_size": "67", "input_shape": "(1001,)"},
    99: {"batch_size": "67", "input_shape": "(1001,)"},
    # predictions (B, D) * targets (B,) broadcasts only when D == B
    100: {"batch_size": "129", "input_shape": "(129,)"},
}

# The same for level 2. A key naming several targets ("height = width") rewrites a
# chained assignment (`height = width = 128`), which the judge neither shrinks nor
# perturbs (it is not a size constant to it): the spatial sizes are set here so the
# interpreter sees a few hundred thousand elements rather than 33 x 33 x 126 x 126.
CPU_SIZES_L2: dict[int, dict[str, str]] = {
    **dict.fromkeys((1, 4, 25, 31, 32), {"height = width": "17"}),
    # transposed convolutions (stride 2) double the plane: 9 -> 18 or 19
    **dict.fromkeys((2, 5, 16), {"height = width": "9"}),
    # 3-D transposed convolutions: 17 images of 17 x 34^3 (11 M values) take the
    # interpreter seconds per call; a tuple assignment is set as written
    20: {"batch_size": "5", "depth, height, width": "8, 8, 8"},
    26: {"batch_size": "5", "D, H, W": "8, 8, 8"},
    # GroupNorm: the judge's odd sizes leave out_features indivisible by num_groups
    # (8192 / 16 -> 17 / 17, groups of one, a constant output); sizes under 16 or
    # already odd and small are left alone: 7 groups of 9 features
    30: {"batch_size": "15", "in_features": "33", "out_features": "63", "num_groups": "7"},
    88: {"batch_size": "15", "in_features": "33", "out_features": "63", "num_groups": "7"},
}


def kernelbench_dir() -> Path:
    return Path(os.environ.get("KERNELBENCH_DIR", "/work/kb"))


def problem_file(problem: str) -> Path:
    level, number = problem.split("/")
    folder = kernelbench_dir() / "KernelBench" / level
    hits = sorted(folder.glob(f"{int(number)}_*.py"))
    if not hits:
        raise SystemExit(f"no {problem} under {folder}")
    return hits[0]


def fold_products(source: str) -> tuple[str, list[str]]:
    """Module-level `NAME = 2048 * 2` (ints only) rewritten as `NAME = 4096`."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.BinOp, ast.UnaryOp))):
            try:
                value = eval(compile(ast.Expression(node.value), "<size>", "eval"), {"__builtins__": {}})
            except Exception:
                continue
            if type(value) is int:
                edits.append((node, value))
    changed = []
    for node, value in sorted(edits, key=lambda e: e[0].lineno, reverse=True):
        row = node.value.lineno - 1
        if node.value.end_lineno != node.value.lineno:
            continue
        line = lines[row]
        lines[row] = line[: node.value.col_offset] + str(value) + line[node.value.end_col_offset:]
        changed.append(f"{node.targets[0].id}={value}")
    return "".join(lines), sorted(changed)


def set_sizes(source: str, sizes: dict[str, str]) -> str:
    for name, literal in sizes.items():
        # "a = b" names a chained assignment `a = b = value`; spacing as written
        targets = r"\s*=\s*".join(re.escape(part.strip()) for part in name.split("="))
        source, count = re.subn(rf"^{targets}\s*=.*$", f"{name} = {literal}", source,
                                count=1, flags=re.M)
        if count != 1:
            raise SystemExit(f"no module-level {name} to set")
    return source


def task_for_cpu(problem: str, folder: Path) -> tuple[str, list[str]]:
    """The task argument for `kernelevo eval`, and the edits made for the CPU (if any)."""
    level, number = problem.split("/")[0], int(problem.split("/")[1])
    table = {"level1": CPU_SIZES, "level2": CPU_SIZES_L2}.get(level, {}).get(number, {})
    path = problem_file(problem)
    source = path.read_text()
    edits: list[str] = []
    if table:
        source = set_sizes(source, table)
        edits += [f"{k.replace(' ', '')}={v}" for k, v in table.items()]
    source, folded = fold_products(source)
    edits += [f"{e} (folded)" for e in folded if e.split("=")[0] not in table]
    if not edits:
        return f"kernelbench:{problem}", []
    target = folder / path.name  # same file name: the task keeps its name in verdicts
    target.write_text(source)
    return str(target), edits


def file_hash(name: str) -> str:
    return hashlib.sha256((CANDIDATES / name).read_bytes()).hexdigest()


def kernelevo_command() -> list[str]:
    script = REPO / ".venv" / "bin" / "kernelevo"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from kernelevo.cli.app import app; app()"]


def trimmed(message: str, limit: int = 2000) -> str:
    """The message's head and tail: a compiler log's error is at its end."""
    if len(message) <= limit:
        return message
    return message[: limit // 4] + "\n[...]\n" + message[-(limit - limit // 4):]


def run_one(entry: dict, folder: Path, timeout: float, device: str,
            extra_args: list[str]) -> dict:
    if device == "cpu":
        task, edits = task_for_cpu(entry["problem"], folder / entry["file"].removesuffix(".py"))
    else:
        task, edits = f"kernelbench:{entry['problem']}", []
    command = [*kernelevo_command(), "eval", task, str(CANDIDATES / entry["file"]), "--json",
               "--device", device if device == "cpu" else "cuda", *entry.get("eval_args", []),
               *extra_args]
    env = dict(os.environ, KERNELBENCH_DIR=str(kernelbench_dir()))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"),
                                                      env.get("PYTHONPATH", "")]))
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=REPO)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, exc.stdout or "", f"timed out after {timeout:.0f} s"
        out = out.decode() if isinstance(out, bytes) else out
    wall = time.perf_counter() - started
    verdict: dict = {}
    try:
        verdict = json.loads(out)
    except (json.JSONDecodeError, TypeError):
        pass
    expected = (entry.get("cpu_expect_reasons", entry["expect_reasons"]) if device == "cpu"
                else entry["expect_reasons"])
    got = verdict.get("reason") or ("eval_timeout" if rc is None else f"exit_{rc}")
    return {
        "file": entry["file"], "sha256": file_hash(entry["file"]),
        "problem": entry["problem"], "kind": entry["kind"],
        "structured": entry.get("structured", False), "expected": expected, "got": got,
        "ok": got in expected, "status": verdict.get("status"), "exit_code": rc,
        "message": trimmed(verdict.get("message", "")),
        "notes": verdict.get("notes", []), "errors": verdict.get("errors"),
        "speedup_vs_eager": verdict.get("speedup_vs_eager"),
        "speedup_vs_compile": verdict.get("speedup_vs_compile"),
        "median_ms": {name: stats.get("median_ms")
                      for name, stats in (verdict.get("timings") or {}).items() if stats},
        "task": task if edits else f"kernelbench:{entry['problem']}", "cpu_task_edits": edits,
        "eval_args": entry.get("eval_args", []), "extra_args": extra_args,
        "wall_s": round(wall, 1),
        "stderr_tail": "" if verdict else (err or "")[-2000:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="evaluations at once (2 cores: 2)")
    parser.add_argument("--only", default="",
                        help="only files whose name contains this (comma-separated: any of these)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per evaluation")
    parser.add_argument("--rerun-mismatches", action="store_true",
                        help="judge again only the entries that did not match, are missing, or "
                             "whose file changed since, and merge into the results file")
    parser.add_argument("--first", default="",
                        help="comma-separated name parts: matching entries are started first")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--extra-args", default="", help="more `kernelevo eval` flags, one string")
    parser.add_argument("--out", default=None,
                        help="JSON written (default results/<device>_validation.json)")
    args = parser.parse_args()
    out = Path(args.out or RESULTS / f"{args.device}_validation.json")
    extra = args.extra_args.split()

    manifest = tomllib.loads((HERE / "manifest.toml").read_text())["candidate"]
    only = [part for part in args.only.split(",") if part] or [""]
    entries = [e for e in manifest if any(part in e["file"] for part in only)]
    kept: list[dict] = []  # earlier results merged into the new file
    if (args.only or args.rerun_mismatches) and out.exists():
        earlier = json.loads(out.read_text()).get("results", [])
        current = {e["file"] for e in manifest}
        redo = {e["file"] for e in entries}
        if args.rerun_mismatches:
            # a result stands while it matched and its candidate file is unchanged
            done = {r["file"] for r in earlier
                    if r["ok"] and r.get("sha256") == file_hash(r["file"])}
            redo = {f for f in redo if f not in done}
            entries = [e for e in entries if e["file"] in redo]
        kept = [r for r in earlier if r["file"] in current and r["file"] not in redo]
    first = [part for part in args.first.split(",") if part]
    entries.sort(key=lambda e: not any(part in e["file"] for part in first))
    with tempfile.TemporaryDirectory(prefix="kb-cpu-tasks-") as tmp:
        for entry in entries:
            (Path(tmp) / entry["file"].removesuffix(".py")).mkdir()
        results = list(kept)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(run_one, e, Path(tmp), args.timeout, args.device, extra): e
                       for e in entries}
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                results.append(result)
                write_results(out, args.device, extra, results, manifest, final=False)
                mark = "OK" if result["ok"] else "MISMATCH"
                print(f"[{len(results) - len(kept)}/{len(entries)}] {result['file']}: {result['got']} "
                      f"({mark}, {result['wall_s']} s)", file=sys.stderr, flush=True)
    summary = write_results(out, args.device, extra, results, manifest, final=True)

    width = max(len(r["file"]) for r in results)
    print(f"{'file':<{width}}  {'kind':<6}  {'expected':<44}  {'got':<22}  result")
    for r in results:
        expected = ",".join(r["expected"])
        print(f"{r['file']:<{width}}  {r['kind']:<6}  {expected[:44]:<44}  {r['got']:<22}  "
              f"{'OK' if r['ok'] else 'MISMATCH'}")
    print(json.dumps(summary, indent=1))
    return 0 if not summary["mismatches"] else 1


def write_results(out: Path, device: str, extra: list[str], results: list[dict],
                  manifest: list[dict], final: bool) -> dict:
    """Sort the results in manifest order and write the JSON (also after each result)."""
    order = {e["file"]: i for i, e in enumerate(manifest)}
    results.sort(key=lambda r: order[r["file"]])
    honest = [r for r in results if r["kind"] == "honest"]
    bad = [r for r in results if r["kind"] == "bad"]
    summary = {
        "complete": final,
        "honest_passed": sum(r["ok"] for r in honest), "honest_total": len(honest),
        "bad_rejected_as_expected": sum(r["ok"] for r in bad), "bad_total": len(bad),
        "mismatches": [r["file"] for r in results if not r["ok"]],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    name = "cpu (Triton interpreter)" if device == "cpu" else "gpu"
    out.write_text(json.dumps({"device": name, "extra_args": extra, "summary": summary,
                               "results": results}, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(main())
