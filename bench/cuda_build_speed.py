"""Cold and cached CUDA build times through the judge's load_inline hook, old path against new.

    PYTHONPATH=src python bench/cuda_build_speed.py --out DIR [--candidates add_one gelu]
                                                    [--variants plain fast]

Variants: `plain` is the old path (KERNELEVO_COMPILER_SHIMS=0: torch's own
compilers, as the judge built before issue 9); `fast` is the judge as it is
(the compiler stand-ins of `kernelevo.evaluate.cuda.shims`); `as_written` is
`fast` without the try of torch/types.h for torch/extension.h
(KERNELEVO_CUDA_LIGHT_HEADER=0). Each variant gets
a fresh cache folder. In it every candidate is built cold (nothing built yet;
under `fast` the first one also builds the precompiled torch header), in a
fresh process with no GPU visible, as the judge's prebuild does; then each is
loaded again from the cache in a fresh process with the GPU visible, as the
judging worker does, and, where a GPU is present, run once and compared with
its reference.

Candidates: `add_one` (bench/kernels/cuda_add_one.py: load_inline's implicit
headers only), an example's name (`gelu`: KernelBench-like, includes
torch/extension.h and ATen/cuda/CUDAContext.h in its CUDA source) or a
candidate file. Per build it records the load_inline seconds, the CPU
seconds of the compilers, ninja's own timing of each step (host compile,
nvcc, link) and what the stand-ins did. It needs torch with CUDA and nvcc;
the machine's torch decides where the extension can be loaded.

Writes DIR/cuda_build_speed.json and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CANDIDATES = ["add_one", "gelu"]


def candidate_path(name: str) -> Path:
    path = Path(name)
    if path.suffix == ".py":
        return path
    bench = ROOT / "bench" / "kernels" / f"cuda_{name}.py"
    return bench if bench.is_file() else ROOT / "examples" / name / "cuda_candidate.py"


# --- the child: one build or load, as the judge's children do it -----------------------------


def _ninja_steps(extensions_dir: Path, since: float) -> list[dict[str, Any]]:
    """Steps ninja ran since `since` (epoch s): target with start and end in s."""
    steps = []
    for log in extensions_dir.glob("*/.ninja_log"):
        if log.stat().st_mtime < since:
            continue
        for line in log.read_text().splitlines()[1:]:
            start_ms, end_ms, output_mtime_ns, target, _ = line.split("\t")
            if int(output_mtime_ns) / 1e9 >= since:  # else made by an earlier build
                steps.append({"folder": log.parent.name, "target": target,
                              "start_s": int(start_ms) / 1e3, "end_s": int(end_ms) / 1e3})
    return steps


def _check(module: Any, candidate: Path) -> str:
    """Run ModelNew once on the GPU against the reference: 'passed', a failure, or '-'."""
    import torch

    if not torch.cuda.is_available():
        return "-"
    task = candidate.with_name("task.py")
    if task.is_file():
        namespace: dict[str, Any] = {}
        exec(compile(task.read_text(), str(task), "exec"), namespace)  # our own example task
        reference = namespace["Model"]().cuda()
    else:
        reference = module.reference
    x = torch.randn(1024, 1024, device="cuda")
    got = module.ModelNew().cuda()(x)
    torch.cuda.synchronize()
    return "passed" if torch.allclose(got, reference(x), atol=1e-5, rtol=1e-5) else "WRONG"


def child(candidate: Path, scratch: Path) -> dict[str, Any]:
    """Import one candidate under the judge's hook; seconds, CPU seconds, ninja's steps."""
    from kernelevo.evaluate.child import guards
    from kernelevo.evaluate.shared import inputs as task_inputs
    from kernelevo.evaluate.cuda.build import LoadInlineHook

    extensions_dir = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    hook = LoadInlineHook(True, guards.KernelSwitch())
    started_epoch, started = time.time(), time.perf_counter()
    error, check = "", "-"
    try:
        module = task_inputs.import_source(candidate.read_text(), "kernelevo_bench_build", scratch)
        check = _check(module, candidate)
    except Exception as exc:  # reported as a row, not raised: one bad build ends no run
        error = f"{type(exc).__name__}: {exc}"[-2000:]
    wall_s = time.perf_counter() - started
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    times = Path(os.environ["KERNELEVO_BUILD_TIMES"])
    events = [json.loads(line) for line in times.read_text().splitlines()] if times.exists() else []
    return {"build_s": round(hook.build_s, 3), "wall_s": round(wall_s, 3),
            "compiler_cpu_s": round(children.ru_utime + children.ru_stime, 2),
            "check": check, "error": error,
            "steps": _ninja_steps(extensions_dir, started_epoch - 1), "shim_events": events}


# --- where the seconds go: nvcc's steps one at a time ------------------------------------------


def _cpu_of(command: list[str], environment: dict[str, str]) -> tuple[float, int]:
    """CPU seconds of one command and its children, and its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = subprocess.run(command, env=environment, capture_output=True).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2), code


def phases(build_dir: Path, pch_store: Path | None) -> list[dict[str, Any]]:
    """CPU seconds of each step nvcc runs on cuda.cu, in its order, and of main.cpp.

    Taken one after the other from a finished build's own flags (build.ninja),
    so each figure is that step alone: the critical path of a build is then
    max(main.cpp, nvcc's steps added up) for torch's build, and max(main.cpp
    with the header, longer of cudafe++'s and cicc's chains + final compile)
    for the judge's.
    """
    ninja = (build_dir / "build.ninja").read_text()

    def variable(name: str) -> list[str]:
        found = re.search(rf"^{name} = (.*)$", ninja, re.M)
        return shlex.split(found.group(1)) if found else []

    rows = []
    with tempfile.TemporaryDirectory(prefix="kernelevo-bench-phases-") as scratch:
        environment = {**os.environ, "TMPDIR": scratch}
        dry = subprocess.run([*variable("nvcc"), *variable("cuda_cflags"), "-c",
                              str(build_dir / "cuda.cu"), "-o", f"{scratch}/cuda.o", "--dryrun"],
                             capture_output=True, text=True, env=environment)
        for line in dry.stderr.splitlines():
            body = line[3:] if line.startswith("#$ ") else ""
            assignment = re.match(r"([A-Za-z_]\w*)=(.*)$", body)
            if assignment:
                environment[assignment.group(1)] = assignment.group(2)
            elif body and not body.startswith("rm "):  # nvcc's cleanup of its scratch files
                tool = os.path.basename(shlex.split(body)[0])
                cpu_s, code = _cpu_of(["sh", "-c", body], environment)
                rows.append({"step": tool, "cpu_s": cpu_s, "ok": code == 0})
        main = [*variable("cxx"), *variable("cflags"), "-c", str(build_dir / "main.cpp"), "-o",
                f"{scratch}/main.o"]
        cpu_s, code = _cpu_of(main, environment)
        rows.append({"step": "main.cpp", "cpu_s": cpu_s, "ok": code == 0})
        header = _header_for(main, pch_store)
        if header:
            cpu_s, code = _cpu_of([main[0], f"-I{header}", *main[1:]], environment)
            rows.append({"step": "main.cpp with the header", "cpu_s": cpu_s, "ok": code == 0})
    return rows


def _header_for(compile_: list[str], pch_store: Path | None) -> Path | None:
    """The folder of the precompiled header the judge's build made for this compile, if any."""
    from kernelevo.evaluate.cuda import shims_host

    plan = shims_host.host_plan(compile_[1:])
    compiler = shutil.which(compile_[0])
    if pch_store is None or plan is None or compiler is None:
        return None
    folder = pch_store / f"host-{shims_host.pch_key(compiler, *plan)}"
    return folder if (folder / "torch" / "extension.h.gch").is_file() else None


# --- the parent ------------------------------------------------------------------------------


def _environment(cache_dir: Path, variant: str) -> dict[str, str]:
    from kernelevo.evaluate.sandbox.environment import cache_environment

    environment = {**os.environ, **cache_environment(cache_dir)}
    environment["KERNELEVO_COMPILER_SHIMS"] = "0" if variant == "plain" else "1"
    environment["KERNELEVO_CUDA_LIGHT_HEADER"] = "0" if variant == "as_written" else "1"
    environment.setdefault("TORCH_CUDA_ARCH_LIST", _device_arch())
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return environment


def _device_arch() -> str:
    """The judge builds for the device's arch only; without a device, the H200's."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}"
    return "9.0"


def _run_child(candidate: Path, environment: dict[str, str], timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kernelevo-bench-build-") as scratch:
        command = [sys.executable, __file__, "--child", str(candidate), "--scratch", scratch]
        environment = {**environment, "KERNELEVO_BUILD_TIMES": str(Path(scratch) / "times.jsonl")}
        started = time.perf_counter()
        # Its own session, so that a build past the limit goes with all its compilers.
        process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += f"\nstopped after {timeout_s:.0f} s"
        process_s = time.perf_counter() - started
    if process.returncode or not stdout.strip():
        return {"error": (stdout + stderr)[-3000:], "process_s": round(process_s, 2)}
    result = json.loads(stdout.strip().splitlines()[-1])
    result["process_s"] = round(process_s, 2)
    return result


def _step_s(result: dict[str, Any], suffix: str) -> float | None:
    spans = [s["end_s"] - s["start_s"] for s in result.get("steps", [])
             if s["target"].endswith(suffix)]
    return round(sum(spans), 2) if spans else None


def _row(variant: str, name: str, kind: str, result: dict[str, Any]) -> dict[str, Any]:
    events = result.get("shim_events", [])
    attempts = [e for e in events if e.get("role") == "nvcc"]
    nvcc = attempts[-1] if attempts else {}
    pch = next((e for e in events if e.get("role") == "cxx"), {})
    return {"variant": variant, "candidate": name, "kind": kind,
            "build_s": result.get("build_s"), "process_s": result.get("process_s"),
            "compiler_cpu_s": result.get("compiler_cpu_s"),
            "host_cpp_s": _step_s(result, "main.o"), "nvcc_s": _step_s(result, ".cuda.o"),
            "link_s": _step_s(result, ".so"), "pch": pch.get("pch"),
            "pch_build_s": pch.get("pch_build_s"), "nvcc_host_chain_s": nvcc.get("host_s"),
            "nvcc_device_chain_s": nvcc.get("device_s"), "nvcc_final_s": nvcc.get("final_s"),
            "nvcc_host_chain_cpu_s": nvcc.get("host_cpu_s"),
            "nvcc_device_chain_cpu_s": nvcc.get("device_cpu_s"),
            "nvcc_final_cpu_s": nvcc.get("final_cpu_s"),
            "nvcc_attempts": [e.get("attempt") + (" failed" if "failed" in e else "")
                              for e in attempts if e.get("attempt")],
            "check": result.get("check"), "error": result.get("error", "")[-600:],
            "build_folder": next((s["folder"] for s in result.get("steps", [])), None)}


def measure(variant: str, candidates: list[str], cache_dir: Path,
            timeout_s: float) -> list[dict[str, Any]]:
    """Each candidate cold (no GPU visible), then each cached (GPU visible), sharing `cache_dir`."""
    environment = _environment(cache_dir, variant)
    rows = []
    for kind in ("cold", "cached"):
        visible = {"CUDA_VISIBLE_DEVICES": ""} if kind == "cold" else {}
        for name in candidates:
            result = _run_child(candidate_path(name), {**environment, **visible}, timeout_s)
            rows.append(_row(variant, name, kind, result))
            print(format_row(rows[-1]), flush=True)
    return rows


def measure_phases(rows: list[dict[str, Any]], cache_root: Path) -> dict[str, list[dict]]:
    """nvcc's steps, one at a time, for each candidate's build of the plain variant."""
    pch_store = cache_root / "fast" / "torch_extensions" / "kernelevo-tools" / "pch"
    found = {}
    for row in rows:
        if row["variant"] == "plain" and row["kind"] == "cold" and row["build_folder"]:
            folder = cache_root / "plain" / "torch_extensions" / row["build_folder"]
            found[row["candidate"]] = phases(folder, pch_store if pch_store.is_dir() else None)
            print(f"phases of {row['candidate']}: {found[row['candidate']]}", flush=True)
    return found


def format_row(row: dict[str, Any]) -> str:
    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    text = (f"| {row['variant']} | {row['candidate']} | {row['kind']} | {cell(row['build_s'])} | "
            f"{cell(row['compiler_cpu_s'])} | {cell(row['host_cpp_s'])} | {cell(row['nvcc_s'])} | "
            f"{cell(row['link_s'])} | {row['pch'] or '-'} | {', '.join(row['nvcc_attempts']) or '-'} "
            f"| {row['check'] or '-'} |")
    return text + (f" error: {row['error'][-200:]!r}" if row["error"] else "")


HEADER = ("| variant | candidate | kind | load_inline s | compiler CPU s | main.cpp s | "
          "cuda.cu s | link s | pch | nvcc | check |\n|---|---|---|---|---|---|---|---|---|---|---|")


def _machine() -> dict[str, Any]:
    import torch

    def first_line(command: list[str], index: int) -> str:
        try:
            return subprocess.run(command, capture_output=True,
                                  text=True).stdout.splitlines()[index]
        except (OSError, IndexError):
            return "absent"

    return {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
            "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpus": os.cpu_count(), "max_jobs": os.environ.get("MAX_JOBS"),
            "cxx": first_line(["c++", "--version"], 0), "nvcc": first_line(["nvcc", "--version"], -1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the JSON (required)")
    parser.add_argument("--candidates", nargs="+", default=DEFAULT_CANDIDATES,
                        help="add_one, an example's name (gelu) or a candidate file")
    parser.add_argument("--variants", nargs="+", default=["plain", "fast"],
                        choices=["plain", "as_written", "fast"],
                        help="plain: torch's compilers; as_written: the stand-ins without the "
                             "torch/types.h try; fast: the judge's")
    parser.add_argument("--cache-dir", type=Path,
                        help="cache folder, one subfolder per variant (default: a fresh one)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="limit per build (s)")
    parser.add_argument("--no-phases", dest="phases", action="store_false",
                        help="skip timing nvcc's steps one at a time (needs the plain variant)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.scratch)))
        return
    if args.out is None:
        parser.error("--out is required")
    rows = []
    print(HEADER, flush=True)
    steps: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="kernelevo-bench-cache-") as fresh:
        for variant in args.variants:
            cache_dir = (args.cache_dir or Path(fresh)) / variant
            rows += measure(variant, args.candidates, cache_dir, args.timeout_s)
        if args.phases and "plain" in args.variants:
            steps = measure_phases(rows, args.cache_dir or Path(fresh))
    report = {"machine": _machine(), "arch": os.environ.get("TORCH_CUDA_ARCH_LIST")
              or _device_arch(), "command": " ".join(sys.argv), "rows": rows, "phases": steps}
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "cuda_build_speed.json"
    target.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {target}")
    for name, found in steps.items():
        print(f"\nCPU seconds, one step at a time ({name}): "
              + ", ".join(f"{s['step']} {s['cpu_s']}" + ("" if s["ok"] else " (failed)")
                          for s in found))
    print(f"\n{HEADER}")
    for row in rows:
        print(format_row(row))


if __name__ == "__main__":
    main()
