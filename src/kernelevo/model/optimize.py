"""The whole loop: profile, extract, evolve each task with a share of the budget, apply, verify.

Everything lands in one folder, with a state file (state.json) written after
every step, so a stopped `kernelevo model optimize` continues where it was:
profile.json, tasks/ (the extracted tasks), runs/<task>/ (each task's search,
resumed when it holds a run), kernels/<task>.py (each search's best, as a
standalone file), then model_report.json and model_report.md. Without an
LLM the tuner searches alone, from the seed kernel a task has in `seeds`.
With `backward`, the tasks are training tasks (gradients judged, the training
step timed), a seed must bring its own backward, and verify trains the
patched model a few SGD steps against the original.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelevo.budget import parse_duration_s, parse_tokens, parse_usd
from kernelevo.errors import ConfigError
from kernelevo.model.contract import build_model, device_for, dtype_of, model_file, moved
from kernelevo.model.extract import HotSpot, extract, read_manifest, select_hot
from kernelevo.model.profile import ModelProfile, profile_built
from kernelevo.parsing import parse_source
from kernelevo.paths import check_folder

STATE_NAME = "state.json"


@dataclass(frozen=True)
class OptimizeOptions:
    """What `kernelevo model optimize` was asked to do."""

    model_path: str
    out_dir: str
    top: int = 3
    leaves: bool = False
    paths: tuple[str, ...] = ()
    seeds_dir: str | None = None  # kernels to start from: <task>.py or <task>__*.py
    models: tuple[str, ...] = ()
    base_url: str | None = None
    tokens: str | None = None
    usd: str | None = None
    time: str | None = None
    candidates: int | None = None
    precision: str = "fp32"
    device: str | None = None
    seed: int = 42
    compile_backend: str | None = None
    timed: bool = True  # time the patched model against the original at the end
    backward: bool = False  # training tasks: kernels with their own backward, trained in verify
    evolve_settings: dict[str, Any] = field(default_factory=dict)


Evolve = Callable[..., Any]  # kernelevo.evolve's signature
Export = Callable[..., Any]  # kernelevo.export's signature
Say = Callable[[str], None]


def optimize(options: OptimizeOptions, *, evolve: Evolve | None = None,
             export: Export | None = None, say: Say = print) -> dict[str, Any]:
    """Run (or continue) the loop; returns the report's data."""
    from kernelevo import api
    from kernelevo.model.apply import apply
    from kernelevo.model.report import report_data, write_report
    from kernelevo.model.verify import verify

    out = check_folder(options.out_dir, "-o", "give -o a folder for the loop's files (made "
                       "if missing)", ConfigError, missing_ok=True)
    device = device_for(options.device)
    out.mkdir(parents=True, exist_ok=True)
    state = load_state(out, options)
    built = moved(build_model(model_file(options.model_path, options.seed)), device,
                  dtype_of(options.precision))
    profile = _profile_once(out, state, built, device, options, say)
    tasks_dir = _extract_once(out, state, profile, options, say)
    for entry in read_manifest(tasks_dir)["tasks"]:
        _search_once(out, state, entry, options, evolve or api.evolve, export or api.export,
                     say)
    original = copy.deepcopy(built.module)
    applied = apply(built.module, out / "kernels", tasks=tasks_dir)
    say(f"applied {len(applied.swapped)} kernels, left {len(applied.skipped)} submodules")
    verification = verify(original, built.module, built.inputs, device=device,
                          compile_backend=options.compile_backend, timed=options.timed,
                          training=options.backward)
    data = report_data(profile.to_dict(), applied.to_dict(), verification.to_dict(),
                       state["tasks"], passed_over=state.get("passed_over"))
    json_path, md_path = write_report(out, data)
    say(f"report: {md_path} and {json_path}")
    return data


def load_state(out: Path, options: OptimizeOptions) -> dict[str, Any]:
    """The folder's state, or a fresh one; a folder made for another model is refused.

    So is one whose tasks were extracted with the other `--backward`: its tasks,
    runs and kernels are of the other kind (before the extract, either goes).
    """
    path = out / STATE_NAME
    model = str(Path(options.model_path).resolve())
    if not path.is_file():
        return {"model": model, "backward": options.backward, "done": [], "tasks": {}}
    state = json.loads(path.read_text())
    if state.get("model") != model:
        raise ConfigError(f"{out} holds the loop of {state.get('model')}, not {model}: give "
                          "another -o folder")
    made = bool(state.get("backward", False))  # states from before the flag: forward only
    if "extract" in state["done"] and made != options.backward:
        kind, flag = ("training", "with") if made else ("forward-only", "without")
        raise ConfigError(f"{out} holds {kind} tasks (extracted {flag} --backward): run again "
                          f"{flag} --backward to continue it, or give another -o folder")
    state["backward"] = options.backward
    return state


def save_state(out: Path, state: dict[str, Any]) -> None:
    temporary = out / (STATE_NAME + ".tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    temporary.replace(out / STATE_NAME)  # atomic: a kill never leaves half a state


def _profile_once(out: Path, state: dict[str, Any], built: Any, device: str,
                  options: OptimizeOptions, say: Say) -> ModelProfile:
    path = out / "profile.json"
    if "profile" in state["done"] and path.is_file():
        return ModelProfile.from_dict(json.loads(path.read_text()))
    profile = profile_built(built, device=device, precision=options.precision)
    path.write_text(json.dumps(profile.to_dict(), indent=2) + "\n")
    state["done"].append("profile")
    save_state(out, state)
    say(f"profiled: forward {profile.total_ms:.3f} ms ({profile.activity} time)")
    return profile


def _extract_once(out: Path, state: dict[str, Any], profile: ModelProfile,
                  options: OptimizeOptions, say: Say) -> Path:
    tasks_dir = out / "tasks"
    if "extract" in state["done"]:
        return tasks_dir
    spots = choose_spots(profile, options, state, say)
    extract(profile, spots, tasks_dir, backward=options.backward)
    state["done"].append("extract")
    state["tasks"] = {spot.name: {"status": "pending", "paths": list(spot.paths)}
                      for spot in spots}
    save_state(out, state)
    say(f"extracted {len(spots)} tasks: {', '.join(s.name for s in spots)}")
    return tasks_dir


def choose_spots(profile: ModelProfile, options: OptimizeOptions, state: dict[str, Any],
                 say: Say) -> list[HotSpot]:
    """The hot spots to search: without an LLM, the hottest that have a seed kernel.

    The tuner alone cannot start without a seed, so a hotter group without one
    is passed over (and said so, with what would let it in) rather than
    extracted only to be skipped.
    """
    paths = list(options.paths) or None
    hottest = select_hot(profile, options.top, paths=paths, leaves=options.leaves)
    if options.models or paths:
        return hottest
    workable = select_hot(profile, options.top, leaves=options.leaves,
                          keep=lambda spot: usable_seed(options, spot.name) is not None)
    if hottest and not workable:
        names = ", ".join(spot.name for spot in hottest)
        wanted = "a seed kernel with its own backward" if options.backward else "a seed kernel"
        raise ConfigError(f"no hot submodule has {wanted} and no --model is given (the "
                          f"hottest tasks are {names}): {_seed_fix(options, hottest[0].name)}")
    chosen = {spot.name for spot in workable}
    passed_over = [spot for spot in hottest if spot.name not in chosen
                   and usable_seed(options, spot.name) is None]
    state["passed_over"] = [{"name": spot.name, "paths": list(spot.paths),
                             "share": sum(s.share for s in spot.stats),
                             "reason": no_seed_reason(options, spot.name)}
                            for spot in passed_over]
    for record in state["passed_over"]:
        say(f"{record['name']} ({record['share']:.1%} of the forward): passed over, "
            f"{record['reason']}")
    return workable


def no_seed_reason(options: OptimizeOptions, name: str) -> str:
    """Why a task cannot be searched without an LLM, and what would let it be."""
    seed = _seed_kernel(options.seeds_dir, name)
    if seed is not None and options.backward:
        # The tuner only varies a seed's settings: it cannot write the backward a training task's
        # judge asks for, so a forward-only seed could only ever fail there.
        return (f"seed kernel {seed.name} has no backward of its own (no torch.autograd.Function "
                f"with a backward), which a training task (--backward) needs, and no --model: "
                f"{_seed_fix(options, name)}")
    missing = "no seed kernel in --seeds" if options.seeds_dir else "no --seeds"
    return f"{missing} and no --model: {_seed_fix(options, name)}"


def _seed_fix(options: OptimizeOptions, name: str) -> str:
    kind = (" (a forward and backward kernel: a torch.autograd.Function, as in "
            "examples/layernorm_backward/)" if options.backward else "")
    if options.seeds_dir:
        return f"add {Path(options.seeds_dir) / f'{name}.py'}{kind} or pass --model/--base-url"
    return f"pass --seeds DIR holding {name}.py{kind}, or --model/--base-url"


def usable_seed(options: OptimizeOptions, name: str) -> Path | None:
    """The seed a task's search may start from: for a training task, one with its own backward."""
    seed = _seed_kernel(options.seeds_dir, name)
    if seed is not None and options.backward and not has_own_backward(seed):
        return None
    return seed


def has_own_backward(kernel: Path) -> bool:
    """Whether a kernel file defines a backward: a class with a `backward` method (an
    autograd.Function) or a `register_autograd` call (a custom op's).

    Read, not run: importing a seed would launch its kernels' compilation here. A file
    that does not parse counts as having one, so the judge says what is wrong with it.
    """
    try:
        tree = parse_source(kernel.read_text())
    except SyntaxError:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                and item.name == "backward" for item in node.body):
            return True
        if isinstance(node, ast.Call) and _called_name(node.func) == "register_autograd":
            return True
    return False


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _search_once(out: Path, state: dict[str, Any], entry: dict[str, Any],
                 options: OptimizeOptions, evolve: Evolve, export: Export, say: Say) -> None:
    name = entry["name"]
    record = state["tasks"].setdefault(name, {"status": "pending"})
    if record["status"] in ("done", "skipped"):
        return
    seed = usable_seed(options, name)
    if not options.models and seed is None:
        record.update(status="skipped", reason=no_seed_reason(options, name))
        save_state(out, state)
        say(f"{name}: skipped ({record['reason']})")
        return
    forward_only = _seed_kernel(options.seeds_dir, name) if seed is None else None
    if forward_only is not None:
        say(f"{name}: seed kernel {forward_only.name} has no backward of its own: the LLM "
            "starts without it")
    runs_dir = out / "runs" / name
    earlier = sorted(p for p in runs_dir.glob("*") if p.is_dir()) if runs_dir.is_dir() else []
    share = _budget_share(options, len(state["tasks"]))
    say(f"{name}: searching" + (" (resuming)" if earlier else ""))
    result = evolve(None if earlier else str(out / "tasks" / f"{name}.py"),
                    seeds=[str(seed)] if seed and not earlier else None,
                    models=list(options.models) or None, base_url=options.base_url,
                    runs_dir=str(runs_dir), resume=str(earlier[-1]) if earlier else None,
                    quiet=True, **share, **options.evolve_settings)
    record["run"] = str(result.run_dir)
    kernel = out / "kernels" / f"{name}.py"
    kernel.parent.mkdir(exist_ok=True)
    if result.best_id is None and seed is None:
        record.update(status="done", reason="the search ranked no kernel best (none correct, "
                      "or no timings to rank by without a GPU)")
    elif result.best_id is None and seed is not None:
        # Without a GPU the search has no timings to rank by; apply still checks the seed.
        shutil.copyfile(seed, kernel)
        record.update(status="done", kernel=str(kernel), reason="the search ranked no kernel "
                      "best (no timings without a GPU?): the seed kernel is used")
    else:
        export(result, kernel, recheck=False, force=True)
        progress = result.progress
        record.update(status="done", kernel=str(kernel),
                      speedup_vs_eager=progress.best_vs_eager,
                      speedup_vs_compile=progress.best_vs_compile)
    save_state(out, state)
    say(f"{name}: {record.get('reason') or 'best kernel ' + record.get('kernel', '')}")


def _seed_kernel(seeds_dir: str | None, name: str) -> Path | None:
    if not seeds_dir:
        return None
    folder = Path(seeds_dir)
    exact = folder / f"{name}.py"
    if exact.is_file():
        return exact
    others = sorted(folder.glob(f"{name}__*.py"))
    return others[0] if others else None


def _budget_share(options: OptimizeOptions, count: int) -> dict[str, Any]:
    """Each task's equal share of the budgets given (never rounding up past the whole)."""
    count = max(1, count)
    share: dict[str, Any] = {}
    if options.tokens:
        share["tokens"] = max(1, parse_tokens(options.tokens) // count)
    if options.usd:
        share["usd"] = parse_usd(options.usd) / count
    if options.time:
        share["time"] = parse_duration_s(options.time) / count
    if options.candidates:
        share["candidates"] = max(1, math.floor(options.candidates / count))
    return share
