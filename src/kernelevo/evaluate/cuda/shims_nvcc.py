"""nvcc's stand-in: its host and device front ends at once (shims.py).

nvcc runs its host front end (cudafe++) and then the device compile (cicc,
ptxas, fatbinary), though the two only share a module id (the name both give
to anonymous namespaces). The stand-in asks nvcc for its own plan
(--dryrun), writes the module id itself, runs the two chains at once, then
nvcc's final host compile: nvcc's own commands, in a different order. A
CUDA file that includes torch/extension.h is tried first with torch/types.h
in its place (the part of torch a kernel file uses), and built as written if
that does not compile.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypedDict

try:  # imported as part of the package
    from kernelevo.evaluate.cuda.shims_shared import (HEADER, SIBLING_FAILED, STOPPED, kill_group,
                                                      record)
except ImportError:  # run as the stand-in script (python -S -E shims.py): its folder leads sys.path
    from shims_shared import (HEADER, SIBLING_FAILED, STOPPED, kill_group, record)  # type: ignore[no-redef]

_DEVICE_TOOLS = {"cicc", "ptxas", "fatbinary"}
_NO_SPLIT = {"-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c", "-dw",
             "--device-w", "-dlink", "--device-link", "-E", "-M", "-ptx", "-cubin", "-fatbin",
             "--dryrun", "-dryrun", "-keep", "--keep", "-lto", "-dlto"}


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


class _Chain(TypedDict):
    name: str  # "host" or "device"
    log: IO[str]
    process: subprocess.Popen[bytes]


def _run_chains(host: list[str], device: list[str], final: str, environment: dict[str, str],
                scratch: Path, attempt: str) -> subprocess.CompletedProcess:
    """Host and device chains side by side, then the final step; logs in nvcc's order."""
    started = time.perf_counter()
    chains: dict[int, _Chain] = {}
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
                kill_group(chain["process"])
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
                    kill_group(other["process"])
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


def run_nvcc(nvcc: str, light: Path, args: list[str]) -> None:
    """Stand-in for nvcc: the split plan where it applies, else nvcc itself."""
    done = compile_cuda(nvcc, args, light)
    if done is None:
        os.execv(nvcc, [nvcc, *args])
    if done.returncode != 0:  # the host file's compile stops waiting for its header
        Path(SIBLING_FAILED).touch()
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)
