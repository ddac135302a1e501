"""Compiler stand-ins that make a load_inline build cheaper without changing what it means.

torch's cpp_extension runs `$CXX` on the host file (main.cpp) and
`$PYTORCH_NVCC` on the CUDA file. LoadInlineHook points both at small scripts
in the extensions folder that run this file (standard library only, so it
starts in milliseconds):

- host: main.cpp starts with `#include <torch/extension.h>`. That header is
  compiled once per (compiler, flags, torch) into a GCC precompiled header in
  the extensions folder (beside the first compile of those flags, which runs
  as usual), and each later main.cpp with the same flags reads it instead of
  parsing torch again. GCC checks that a precompiled header fits the compile
  and otherwise ignores it; either way the object is the same.
- nvcc: nvcc runs its host front end (cudafe++) and then the device compile
  (cicc, ptxas, fatbinary), though the two only share a module id (the name
  both give to anonymous namespaces). The stand-in asks nvcc for its own plan
  (--dryrun), writes the module id itself, runs the two chains at once, then
  nvcc's final host compile: nvcc's own commands, in a different order.
  A CUDA file that includes torch/extension.h is tried first with
  torch/types.h in its place (the part of torch a kernel file uses), and
  built as written if that does not compile.

A call either stand-in does not recognise runs the real compiler unchanged.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEADER = "torch/extension.h"
KEPT_HEADERS = 3  # one precompiled header is ~0.8 GB; a run uses one or two flag sets
_SOURCE = re.compile(r".*\.(cpp|cc|cxx|c\+\+)$")
_INCLUDE_OPTIONS = {"-I", "-isystem", "-iquote", "-idirafter"}  # with their folder apart
_PER_OBJECT_OPTIONS = {"-MF", "-MT", "-MQ", "-o"}  # and their value: not the header's concern
_DEPENDENCY_OPTIONS = {"-MMD", "-MD", "-MP"}
_DEVICE_TOOLS = {"cicc", "ptxas", "fatbinary"}
_NO_SPLIT = {"-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c", "-dw",
             "--device-w", "-dlink", "--device-link", "-E", "-M", "-ptx", "-cubin", "-fatbin",
             "--dryrun", "-dryrun", "-keep", "--keep", "-lto", "-dlto"}


# --- host: a precompiled torch/extension.h ---------------------------------------------------


def host_plan(args: list[str]) -> tuple[list[str], Path] | None:
    """For a compile of a file that starts with torch/extension.h: (PCH flags, the header)."""
    flags, sources, position = [], [], 0
    while position < len(args):
        arg = args[position]
        if arg in _PER_OBJECT_OPTIONS or arg in _INCLUDE_OPTIONS:
            if arg in _INCLUDE_OPTIONS:
                flags += args[position:position + 2]
            position += 2
            continue
        if arg in ("-x", "-include", "-imacros", "-E", "-S") or arg.startswith("-Wp,"):
            return None  # not a plain compile of one source
        if _SOURCE.match(arg) and not arg.startswith("-"):
            sources.append(arg)
        elif arg != "-c" and arg not in _DEPENDENCY_OPTIONS and not arg.startswith(
                "-DTORCH_EXTENSION_NAME="):  # the one flag that differs between extensions
            flags.append(arg)
        position += 1
    if "-c" not in args or len(sources) != 1 or not _starts_with_header(Path(sources[0])):
        return None
    header = _find_header(flags)
    return (flags, header) if header else None


def _starts_with_header(source: Path) -> bool:
    try:
        with source.open() as handle:
            first = handle.readline().strip()
    except OSError:
        return False
    return first == f"#include <{HEADER}>"


def _find_header(flags: list[str]) -> Path | None:
    """torch/extension.h as the compiler finds it: -I folders first, then -isystem ones."""
    user, system = [], []
    for position, flag in enumerate(flags):
        for option, found in (("-I", user), ("-isystem", system)):
            if flag == option and position + 1 < len(flags):
                found.append(flags[position + 1])
            elif flag.startswith(option) and flag != option:
                found.append(flag[len(option):])
    for folder in user + system:
        if (Path(folder) / HEADER).is_file():
            return Path(folder) / HEADER
    return None


def pch_key(compiler: str, flags: list[str], header: Path) -> str:
    """What a precompiled header depends on: compiler binary, flags, torch's headers."""
    real = Path(compiler).resolve()
    version = header.parents[2] / "version.py"  # torch/include/torch/extension.h -> torch/
    parts = [str(real), _stamp(real), *flags, str(header), _stamp(header),
             version.read_text() if version.is_file() else ""]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def _stamp(path: Path) -> str:
    status = path.stat()
    return f"{status.st_size}:{status.st_mtime_ns}"


def claim_pch(compiler: str, flags: list[str], header: Path,
              store: Path) -> tuple[Path, Any | None]:
    """The header's folder, and a held lock if this process is to build it (else None).

    Only one process builds a given header; the others compile without it
    meanwhile rather than wait. A header that failed to build is not retried.
    """
    folder = store / f"host-{pch_key(compiler, flags, header)}"
    if (folder / f"{HEADER}.gch").is_file() or (folder / "failed.log").is_file():
        return folder, None
    (folder / "torch").mkdir(parents=True, exist_ok=True)
    lock = open(folder / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        record({"role": "cxx", "pch": "busy"})
        return folder, None
    if (folder / f"{HEADER}.gch").is_file():  # finished while this one looked
        lock.close()
        return folder, None
    for stale in (folder / "torch").glob("*.partial"):  # from a builder killed midway
        stale.unlink(missing_ok=True)
    return folder, lock


def start_pch(compiler: str, flags: list[str], header: Path, folder: Path) -> subprocess.Popen:
    """Start building the header into `folder` (under a temporary name)."""
    partial = folder / f"{HEADER}.gch.{os.getpid()}.partial"
    log = open(folder / f"build.{os.getpid()}.log", "w+")
    # A group of its own, so that giving it up ends GCC's cc1plus too (abandon_pch).
    return subprocess.Popen([compiler, *flags, "-x", "c++-header", str(header), "-o",
                             str(partial)], stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=os.setpgrp)  # this script runs no threads


def finish_pch(builder: subprocess.Popen, folder: Path, store: Path, started: float) -> bool:
    """Wait for the header's build; put it in place, or note why it failed."""
    code = builder.wait()
    partial = folder / f"{HEADER}.gch.{os.getpid()}.partial"
    log = folder / f"build.{os.getpid()}.log"
    if code == 0:
        os.replace(partial, folder / f"{HEADER}.gch")
    else:
        partial.unlink(missing_ok=True)
        if code > 0:  # the compiler refused (killed by a signal: try again later)
            (folder / "failed.log").write_text(log.read_text(errors="replace")[-20000:])
    log.unlink(missing_ok=True)
    record({"role": "cxx", "pch": "built" if code == 0 else "failed",
            "pch_build_s": round(time.perf_counter() - started, 3)})
    if code == 0:
        _evict(store, keep=KEPT_HEADERS)
    return code == 0


def _evict(store: Path, keep: int) -> None:
    built = sorted(store.glob(f"host-*/{HEADER}.gch"), key=lambda p: p.stat().st_mtime,
                   reverse=True)
    for old in built[keep:]:
        old.unlink(missing_ok=True)  # a compile reading it keeps its open copy


def run_host(compiler: str, store: Path, args: list[str]) -> None:
    """Stand-in for the host compiler: compile with the precompiled header where one fits.

    The first compile of a flag set compiles as usual while it builds the
    header for the next ones (which takes about twice a plain compile). A build
    that works waits for the header; one that fails, in this file or in the
    CUDA file beside it (SIBLING_FAILED), gives the header up and fails after
    its own compile. GCC checks that a header fits and otherwise reads the
    source's own; the object is the same either way.
    """
    plan = host_plan(args)
    if plan is None:
        os.execvp(compiler, [compiler, *args])
    folder, lock = claim_pch(compiler, *plan, store)
    if lock is None:
        built = (folder / f"{HEADER}.gch").is_file()
        if built:
            os.utime(folder / f"{HEADER}.gch")  # recently used: kept by the eviction
            record({"role": "cxx", "pch": "used"})
        sys.exit(compile_in_build([compiler, *([f"-I{folder}"] if built else []), *args]))
    started = time.perf_counter()
    builder = start_pch(compiler, *plan, folder)
    code = compile_in_build([compiler, *args])
    # A build that has failed (this file, or the CUDA file beside it) gives up
    # the header rather than wait for it: the failure is reported after one
    # compile, not after the header's (about twice as long).
    if code == 0 and _wait_unless_sibling_failed(builder) or _ended(builder, _FLAGS_FAIL_S):
        finish_pch(builder, folder, store, started)  # built, or refused (its flags): noted
    else:
        abandon_pch(builder, folder)
    lock.close()
    sys.exit(code)


SIBLING_FAILED = ".kernelevo-compile-failed"  # in the build folder, where ninja runs both
# What a compile stopped for its sibling's failure says (with "error", so
# that nvcc's stand-in never takes it for the lighter header's fault).
STOPPED = "error: stopped: another compile of this extension failed (its error is above or below)"


def compile_in_build(command: list[str]) -> int:
    """Run one compile of a load_inline build; its exit code.

    ninja waits for every running compile once one has failed, so a broken
    CUDA file would cost the host file's whole compile too (about 15 s of
    torch's headers). A failure marks the build folder (SIBLING_FAILED); a
    compile still running when the mark appears is stopped, and the build
    reports the first failure after that one compile.
    """
    process = None
    while not Path(SIBLING_FAILED).exists():
        if process is None:
            process = subprocess.Popen(command, preexec_fn=os.setpgrp)  # cc1plus goes with it
        try:
            code = process.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
    else:  # failed before this compile started, or while it ran
        if process is not None:
            _kill_group(process)
            process.wait()
        sys.stderr.write(STOPPED + "\n")
        record({"role": "cxx", "stopped": True})
        return 1
    if code != 0:
        Path(SIBLING_FAILED).touch()
    return code
# A header build that fails over its flags does so at once: a failed compile
# waits this long for it, so such a header is noted and never tried again.
_FLAGS_FAIL_S = 1.0


def _ended(process: subprocess.Popen, within_s: float) -> bool:
    try:
        process.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _wait_unless_sibling_failed(builder: subprocess.Popen) -> bool:
    """Wait for the header's build; False as soon as another compile of this build failed."""
    while builder.poll() is None:
        if Path(SIBLING_FAILED).exists():
            return False
        time.sleep(0.1)
    return True


def abandon_pch(builder: subprocess.Popen, folder: Path) -> None:
    """Stop building the header (a later build makes it); remove what it wrote."""
    if builder.poll() is None:
        try:
            os.killpg(builder.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        builder.wait()
    (folder / f"{HEADER}.gch.{os.getpid()}.partial").unlink(missing_ok=True)
    (folder / f"build.{os.getpid()}.log").unlink(missing_ok=True)
    record({"role": "cxx", "pch": "abandoned"})


# --- nvcc: host and device front ends at once ------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """nvcc's steps for one compile, split into the host chain, device chain and final step."""

    environment: dict[str, str]  # the variables nvcc sets for its steps ($CICC_PATH, PATH)
    host: list[str]  # host preprocessing, then cudafe++
    device: list[str]  # device preprocessing, cicc, ptxas, fatbinary
    final: str  # the host compiler on cudafe++'s output, which includes the device stub
    module_id_file: str


def _tool(command: str) -> str:
    return os.path.basename(shlex.split(command)[0]) if command.strip() else ""


def parse_dryrun(text: str) -> Plan | None:
    """nvcc --dryrun output as a Plan, or None where it is not the shape this knows."""
    try:
        return _parse_dryrun(text)
    except (ValueError, IndexError):  # a line shlex cannot split: not ours to run
        return None


def _parse_dryrun(text: str) -> Plan | None:
    environment, steps = {}, []
    for line in text.splitlines():
        if not line.startswith("#$ "):
            return None  # a step nvcc does internally (e.g. filtering dependencies)
        body = line[3:]
        assignment = re.match(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)$", body)
        if assignment and " " not in body.split("=", 1)[0]:
            environment[assignment.group(1)] = assignment.group(2)
        else:
            steps.append(body)
    front = [s for s in steps if _tool(s) == "cudafe++"]
    if len(front) != 1 or "--gen_module_id_file" not in front[0] or len(steps) < 4:
        return None
    module_id = re.search(r'--module_id_file_name\s+"?([^"\s]+)"?', front[0])
    final, host_compiler = steps[-1], _tool(steps[-1])  # nvcc ends with the host compile

    def preprocessing(step: str) -> bool:
        return _tool(step) == host_compiler and " -E " in f" {step} "

    feeders = [s for s in steps if preprocessing(s) and _last_word(s) == _last_word(front[0])]
    if module_id is None or len(feeders) != 1 or " -c " not in f" {final} ":
        return None
    # nvcc's `rm` of an intermediate it never wrote here is left out: the
    # scratch folder goes as a whole.
    device = [s for s in steps[:-1] if s not in (front[0], feeders[0]) and _tool(s) != "rm"]
    if not all(_tool(s) in _DEVICE_TOOLS or preprocessing(s) for s in device):
        return None
    host = [feeders[0], front[0].replace("--gen_module_id_file", "")]
    return Plan(environment, host, device, final, module_id.group(1))


def _last_word(command: str) -> str:
    return shlex.split(command)[-1]


def _split_arguments(args: list[str]) -> tuple[list[str], str | None]:
    """The args without nvcc's -MD/-MF (done here instead), and the dependency file if any.

    torch has spelt them both ways: `-MD -MF F` and `--generate-dependencies-with-compile
    --dependency-output F`.
    """
    kept, depfile, wanted, position = [], None, False, 0
    while position < len(args):
        arg = args[position]
        if arg in ("-MF", "--dependency-output") and position + 1 < len(args):
            depfile = args[position + 1]
            position += 2
            continue
        if arg.startswith(("-MF=", "--dependency-output=")):
            depfile = arg.split("=", 1)[1]
        elif arg in ("-MD", "--generate-dependencies-with-compile"):
            wanted = True
        else:
            kept.append(arg)
        position += 1
    if wanted and depfile is None:
        return [], None  # nvcc would pick the name itself: left to nvcc
    return kept, (depfile if wanted else None)


def _output(args: list[str]) -> str | None:
    for option, value in zip(args, args[1:]):
        if option in ("-o", "--output-file"):
            return value
    return None


def compile_cuda(nvcc: str, args: list[str],
                 light: Path | None = None) -> subprocess.CompletedProcess | None:
    """Run nvcc's plan with the two front ends at once; None where it must run as usual.

    With `light` (a folder written by `write_light_header`), a CUDA file that
    includes torch/extension.h is first compiled with torch/types.h in its
    place; if that fails, it is compiled as written, and that compile's
    messages are the ones reported. The folder stays: ninja finds it among
    the object's dependencies when the build is loaded again.
    """
    kept, depfile = _split_arguments(args)
    output = _output(kept)  # None for an empty `kept`: nvcc runs as usual
    sources = [a for a in kept if a.endswith(".cu") and not a.startswith("-")]
    if "-c" not in kept or output is None or len(sources) != 1 or _NO_SPLIT & set(kept):
        return None
    module_id = _module_id(sources[0], kept)
    if light is not None and (light / HEADER).is_file() and light_header_wanted(Path(sources[0])):
        done = _compile_split(nvcc, [f"-I{light}", *kept], depfile, output, module_id, "light")
        if done is None or done.returncode == 0 or not lighter_header_to_blame(done.stderr):
            return done  # a source broken as written is not compiled twice to fail twice
    return _compile_split(nvcc, kept, depfile, output, module_id, "as_written")


# What torch/extension.h holds beyond torch/types.h. Errors that name none of
# it are the source's own, and compiling it as written would only repeat them.
_TORCH_ALL = r"(?:nn|optim|data|serialize|jit|autograd|cuda|fft|linalg|nested|sparse|special)"
_BEYOND_TYPES_H = re.compile(r"pybind11|\bpy::|PYBIND11|Py[A-Z]\w+|Python\.h|"
                             rf"torch::{_TORCH_ALL}\b|\"torch\" has no member \"{_TORCH_ALL}\"|"
                             r"torch/(?:extension|all|python)\.h")


def lighter_header_to_blame(log: str) -> bool:
    """Whether a failed compile with torch/types.h could build with torch/extension.h."""
    # The whole log: nvcc quotes each failing source line under its message.
    return bool(_BEYOND_TYPES_H.search(log)) or "error" not in log.lower()


# What a kernel file uses of torch/extension.h (tensors, their methods, the
# ATen operators and factories, TORCH_CHECK, AT_DISPATCH) is in torch/types.h,
# which load_inline itself puts before every CUDA source; the rest (the C++
# frontend's nn, optim, data and serialize, pybind11 and Python.h) is about a
# third of the parse, done three times by nvcc (cudafe++, cicc, the host
# compile). A file that needs more fails to compile and is built as written.
LIGHT_HEADER = "#pragma once\n#include <torch/types.h>\n"
_INCLUDES_HEADER = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/extension\.h[>\"]",
                              re.MULTILINE)
_USES_PYBIND = re.compile(r"\bPYBIND11_|\bpybind11\b|\bpy::")  # such a try would only fail


def write_light_header(folder: Path) -> Path:
    """`folder`/torch/extension.h holding LIGHT_HEADER, rewritten only if it differs; `folder`."""
    header = folder / HEADER
    if not header.is_file() or header.read_text() != LIGHT_HEADER:
        header.parent.mkdir(parents=True, exist_ok=True)
        partial = header.with_name(f".extension.h.{os.getpid()}")
        partial.write_text(LIGHT_HEADER)
        os.replace(partial, header)
    return folder


def light_header_wanted(source: Path) -> bool:
    """Whether to try torch/types.h for torch/extension.h (KERNELEVO_CUDA_LIGHT_HEADER=0: never)."""
    if os.environ.get("KERNELEVO_CUDA_LIGHT_HEADER", "1") == "0":
        return False
    try:
        text = source.read_text(errors="replace")
    except OSError:
        return False
    return bool(_INCLUDES_HEADER.search(text)) and not _USES_PYBIND.search(text)


def _compile_split(nvcc: str, kept: list[str], depfile: str | None, output: str,
                   module_id: str, attempt: str) -> subprocess.CompletedProcess | None:
    with tempfile.TemporaryDirectory(prefix="kernelevo-nvcc-") as scratch:
        environment = {**os.environ, "TMPDIR": scratch}  # nvcc's intermediates: ours alone
        dry = subprocess.run([nvcc, *kept, "--dryrun"], capture_output=True, text=True,
                             env=environment)
        plan = parse_dryrun(dry.stderr) if dry.returncode == 0 else None
        if plan is None:
            return None
        environment.update(plan.environment)
        Path(plan.module_id_file).write_text(module_id)
        host = plan.host
        if depfile:  # what nvcc -MD writes, from the host preprocessing
            host = [f"{host[0]} -MD -MF {shlex.quote(depfile)} -MT {shlex.quote(output)}",
                    *host[1:]]
        return _run_chains(host, plan.device, plan.final, environment, Path(scratch), attempt)


def _module_id(source: str, args: list[str]) -> str:
    """A module id unique to this source and these flags (nvcc derives its own likewise)."""
    digest = hashlib.sha256("\0".join([Path(source).read_text(), *args]).encode()).hexdigest()
    return f"_{digest[:8]}_kernelevo_{digest[8:24]}"


def _run_chains(host: list[str], device: list[str], final: str, environment: dict[str, str],
                scratch: Path, attempt: str) -> subprocess.CompletedProcess:
    """Host and device chains side by side, then the final step; logs in nvcc's order."""
    started = time.perf_counter()
    chains = {}
    for name, steps in (("host", host), ("device", device)):
        log = open(scratch / f"{name}.log", "w+")
        # Each in its own process group, so a failed host chain can stop the device one.
        process = subprocess.Popen(["sh", "-c", "set -e\n" + "\n".join(steps)], env=environment,
                                   stdout=log, stderr=subprocess.STDOUT, preexec_fn=os.setpgrp)
        chains[process.pid] = {"name": name, "log": log, "process": process}
    times: dict[str, float] = {}
    running = dict(chains)
    while running:  # by pid, never wait(-1): in the worker other children are not ours
        if Path(SIBLING_FAILED).exists():  # the host file failed: this build is over
            for chain in running.values():
                _kill_group(chain["process"])
                os.waitpid(chain["process"].pid, 0)
            for chain in chains.values():
                chain["log"].close()
            record({"role": "nvcc", "attempt": attempt, "stopped": True, **times})
            return subprocess.CompletedProcess([], 1, "", STOPPED + "\n")
        for pid, chain in list(running.items()):
            reaped, status, usage = os.wait4(pid, os.WNOHANG)
            if not reaped:
                continue
            del running[pid]
            chain["process"].returncode = code = os.waitstatus_to_exitcode(status)
            times[f"{chain['name']}_s"] = round(time.perf_counter() - started, 3)
            times[f"{chain['name']}_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 3)
            if chain["name"] == "host" and code:
                for other in running.values():
                    _kill_group(other["process"])
        time.sleep(0.02)
    text = ""
    for chain in chains.values():  # host first, as nvcc reports them
        chain["log"].seek(0)
        text += chain["log"].read()
        chain["log"].close()
        if chain["process"].returncode:
            record({"role": "nvcc", "attempt": attempt, "failed": chain["name"], **times})
            return subprocess.CompletedProcess([], chain["process"].returncode, "", text)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(["sh", "-c", final], env=environment, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    final_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    record({"role": "nvcc", "attempt": attempt, **times,
            "final_s": round(time.perf_counter() - started, 3),
            "final_cpu_s": round(final_cpu_s, 3)})
    return subprocess.CompletedProcess([], done.returncode, "", text + done.stdout + done.stderr)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def record(entry: dict) -> None:
    """Append one line of build timing to $KERNELEVO_BUILD_TIMES, if set (a benchmark's switch)."""
    target = os.environ.get("KERNELEVO_BUILD_TIMES")
    if target:
        with open(target, "a") as handle:
            handle.write(json.dumps(entry) + "\n")


def run_nvcc(nvcc: str, light: Path, args: list[str]) -> None:
    """Stand-in for nvcc: the split plan where it applies, else nvcc itself."""
    done = compile_cuda(nvcc, args, light)
    if done is None:
        os.execv(nvcc, [nvcc, *args])
    if done.returncode != 0:  # the host file's compile stops waiting for its header
        Path(SIBLING_FAILED).touch()
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)


def main(argv: list[str]) -> None:
    role, real = argv[1], argv[2]
    if role == "cxx":
        run_host(real, Path(argv[3]), argv[4:])
    elif role == "nvcc":
        run_nvcc(real, Path(argv[3]), argv[4:])
    else:
        raise SystemExit(f"unknown role {role!r}: expected cxx or nvcc")


if __name__ == "__main__":
    main(sys.argv)
