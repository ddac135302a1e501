"""Judge one candidate with KernelBench's own harness, in this process; print one JSON line.

    python3 bench/kb_harness.py --kb-src .kb/src PROBLEM.py CANDIDATE.py [--deps .kbdeps]

Calls `kernelbench.eval.eval_kernel_against_ref` as KernelBench's
scripts/run_and_check.py does (5 correctness trials, 100 performance trials,
timing_method="cuda_event", seed 42, fp32, backend "triton"). With
measure_performance on, that same call also times the reference (its
"excessive speedup" check), so `ref_runtime` comes from it; only when it is
missing is the reference timed with `kernelbench.timing.measure_ref_program_time`.
Times are KernelBench's: means in ms, rounded by it to 3 significant figures.

KernelBench is test material: it is imported from --kb-src at run time, never
copied into this project. Third-party modules it imports:
  - pydantic (eval.py: KernelExecResult is a BaseModel): installed from wheels
    in .whl/ by bench/kernelbench/setup_device.sh into .kbdeps; if absent, a
    minimal stand-in (STUB_PYDANTIC below) is used and named in "stubs".
  - openai, litellm (utils.py: LLM clients for sample generation): always
    stubbed, eval never calls them, and importing litellm can reach the network.
  - python-dotenv, tqdm, requests (utils.py, eval.py; env loading, progress bars,
    an unused import): stubbed only where not installed.
  - numpy, torch, triton: the machine's own.
KernelBench's other imports (dataset, timing, kernel_static_checker) are stdlib.

Without CUDA it still imports KernelBench and runs its static checker, then
reports {"skipped": "no CUDA"}: that is what can be checked on a CPU machine.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import os
import sys
import tempfile
import time
import types

_STARTED = time.perf_counter()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("problem", help="KernelBench problem file (defines Model)")
    parser.add_argument("candidate", help="candidate file (defines ModelNew)")
    parser.add_argument("--kb-src", required=True, help="KernelBench's src folder")
    parser.add_argument("--deps", default=None, help="folder of wheels installed with "
                        "--target (setup_device.sh makes .kbdeps); put first on sys.path")
    parser.add_argument("--backend", default="triton", help="KernelBench backend (triton, cuda)")
    parser.add_argument("--num-correct-trials", type=int, default=5)
    parser.add_argument("--num-perf-trials", type=int, default=100)
    parser.add_argument("--timing-method", default="cuda_event")
    parser.add_argument("--gpu-arch", default="Hopper", help="as run_and_check's gpu_arch")
    parser.add_argument("--ref-program-time", action="store_true",
                        help="also time the reference as run_and_check does, with "
                        "measure_ref_program_time (eager, 5 warm-up, 100 trials)")
    return parser.parse_args()


# ---------------------------------------------------------------- stand-ins

def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__kb_harness_stub__ = True
    return module


def _unavailable(what: str):
    def call(*_args, **_kwargs):
        raise RuntimeError(f"{what} is stubbed by bench/kb_harness.py: not part of evaluation")
    return call


class _StubBaseModel:
    """Enough of pydantic.BaseModel for KernelExecResult: annotated fields with
    defaults (copied per instance, as pydantic does), keyword init, model_dump."""

    @classmethod
    def _fields(cls) -> list[str]:
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            names += [n for n in getattr(klass, "__annotations__", {}) if n not in names]
        return names

    def __init__(self, **values):
        unknown = set(values) - set(self._fields())
        if unknown:
            raise TypeError(f"unknown fields {sorted(unknown)}")
        for name in self._fields():
            default = copy.deepcopy(getattr(type(self), name, None))
            setattr(self, name, values.get(name, default))

    def model_dump(self) -> dict:
        return {name: getattr(self, name) for name in self._fields()}

    dict = model_dump

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_dump()!r})"


def _tqdm(iterable=None, *_args, **_kwargs):
    class Bar:  # used as tqdm(iterable) and as a context manager with update()
        def __iter__(self):
            return iter(iterable or ())

        def __enter__(self):
            return self

        def __exit__(self, *_exc):
            return False

        def update(self, *_a):
            pass
    return Bar()


STUB_PYDANTIC = _module("pydantic", BaseModel=_StubBaseModel)
ALWAYS_STUBBED = {
    "openai": _module("openai", OpenAI=_unavailable("openai.OpenAI")),
    "litellm": _module("litellm", completion=_unavailable("litellm.completion")),
}
STUBBED_IF_ABSENT = {
    "dotenv": _module("dotenv", load_dotenv=lambda *a, **k: False),
    "tqdm": _module("tqdm", tqdm=_tqdm),
    "requests": _module("requests", get=_unavailable("requests.get"),
                        post=_unavailable("requests.post")),
    "pydantic": STUB_PYDANTIC,
}


def install_stubs() -> list[str]:
    """Put stand-ins into sys.modules; returns the names stubbed."""
    stubbed = []
    for name, module in ALWAYS_STUBBED.items():
        sys.modules[name] = module
        stubbed.append(name)
    for name, module in STUBBED_IF_ABSENT.items():
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = module
            stubbed.append(name)
    return stubbed


# ---------------------------------------------------------------- KernelBench

def import_kernelbench(kb_src: str):
    """(kernelbench.eval, kernelbench.timing, kernel_static_checker); KernelBench's
    import-time prints go to stderr so stdout holds only our JSON line."""
    sys.path.insert(0, os.path.abspath(kb_src))
    with contextlib.redirect_stdout(sys.stderr):
        from kernelbench import eval as kb_eval
        from kernelbench import kernel_static_checker, timing
    return kb_eval, timing, kernel_static_checker


def static_check(checker, source: str, backend: str) -> dict:
    """KernelBench's optional regex checker (run_and_check asserts it passes)."""
    try:
        ok, errors, warnings = checker.validate_kernel_static(source, backend=backend,
                                                              precision="fp32")
        return {"ok": bool(ok), "errors": list(errors), "warnings": list(warnings)}
    except Exception as exc:  # a checker bug must not hide the harness result
        return {"ok": None, "error": f"{type(exc).__name__}: {exc}"}


def run_eval(kb_eval, ref_src: str, cand_src: str, args: argparse.Namespace) -> dict:
    """eval_kernel_against_ref as run_and_check's evaluate_single_sample_src calls it."""
    import torch

    from kernelbench import utils as kb_utils

    kb_utils.set_gpu_arch([args.gpu_arch])
    build_dir = tempfile.mkdtemp(prefix="kb_build_")
    with contextlib.redirect_stdout(sys.stderr):
        result = kb_eval.eval_kernel_against_ref(
            original_model_src=ref_src, custom_model_src=cand_src, seed_num=42,
            num_correct_trials=args.num_correct_trials, num_perf_trials=args.num_perf_trials,
            measure_performance=True, timing_method=args.timing_method, verbose=False,
            build_dir=build_dir, device=torch.device("cuda:0"), backend=args.backend,
            precision=torch.float32)
    if result is None:  # KernelBench's answer to a lock-file error: "please retry"
        return {"error": "eval_kernel_against_ref returned None (lock file error)"}
    fields = result.model_dump() if hasattr(result, "model_dump") else dict(result)
    return {key: fields.get(key) for key in ("compiled", "correctness", "runtime",
                                              "runtime_stats", "ref_runtime",
                                              "ref_runtime_stats", "metadata")}


def ref_program_ms(timing, ref_src: str, args: argparse.Namespace) -> float | None:
    """The reference's mean time as run_and_check measures it (eager)."""
    import torch

    with contextlib.redirect_stdout(sys.stderr):
        stats = timing.measure_ref_program_time(
            ref_arch_name="Reference Program", ref_arch_src=ref_src,
            num_trials=args.num_perf_trials, use_torch_compile=False,
            timing_method=args.timing_method, device=torch.device("cuda:0"),
            verbose=False, precision="fp32")
    return (stats or {}).get("mean")


def jsonable(value):
    """Metadata holds exception objects; make everything printable as JSON."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return f"{type(value).__name__}: {value}"


def measure(kb_eval, timing, ref_src: str, cand_src: str, args: argparse.Namespace) -> dict:
    out = run_eval(kb_eval, ref_src, cand_src, args)
    runtime, ref = out.get("runtime") or -1.0, out.get("ref_runtime") or -1.0
    if out.get("correctness") and (ref <= 0 or args.ref_program_time):
        out["ref_program_ms"] = ref_program_ms(timing, ref_src, args)
        if ref <= 0 and out["ref_program_ms"]:
            out["ref_runtime"] = ref = out["ref_program_ms"]
            out["ref_runtime_source"] = "measure_ref_program_time"
    out["speedup"] = ref / runtime if runtime > 0 and ref > 0 else None
    return out


def main() -> None:
    args = parse_args()
    if args.deps and os.path.isdir(args.deps):
        sys.path.insert(0, os.path.abspath(args.deps))  # before torch imports typing_extensions
    stubs = install_stubs()
    report: dict = {"stubs": stubs, "settings": {
        "num_correct_trials": args.num_correct_trials, "num_perf_trials": args.num_perf_trials,
        "timing_method": args.timing_method, "backend": args.backend, "precision": "fp32"}}
    try:
        kb_eval, timing, checker = import_kernelbench(args.kb_src)
        report["imported"] = True
        with open(args.problem) as f:
            ref_src = f.read()
        with open(args.candidate) as f:
            cand_src = f.read()
        report["static_check"] = static_check(checker, cand_src, args.backend)
        import torch

        if not torch.cuda.is_available():
            report["skipped"] = "no CUDA"
        else:
            report.update(measure(kb_eval, timing, ref_src, cand_src, args))
    except Exception as exc:  # run_and_check's "last level catch": a result, not a crash
        report["error"] = f"{type(exc).__name__}: {exc}"
    report["wall_s"] = round(time.perf_counter() - _STARTED, 3)
    sys.stdout.write(json.dumps(jsonable(report)) + "\n")


if __name__ == "__main__":
    main()
