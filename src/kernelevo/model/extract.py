"""Hot submodules as KernelBench tasks that run, and are judged, on their own.

Each task file rebuilds the model from a copy of the model file beside it
(`_model_<name>_<hash>.py`, which `suite` skips as it starts with "_") under
the profile's seed, and picks its submodule by path: the reference is the
submodule itself, of any class, with the very weights the profiled model had,
and nothing is pickled. Why not a saved state_dict: it would still need the
submodule's class to be rebuilt, and a size the judge varies could no longer
match it. Dimensions equal to a weight's are written as literals; the others
are module constants, which the judge varies and shrinks (task.py).
manifest.json beside the tasks names which submodules each task stands for.
Training tasks (`backward=True`) set `backward = True`: the judge checks the
gradients too, and apply puts the kernel's own backward into the model.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelevo.errors import ConfigError, TaskError
from kernelevo.model.contract import ModelFile, build_model, import_model_file, model_file, \
    module_name_for
from kernelevo.model.profile import InputSpec, ModelProfile, ModuleStat
from kernelevo.paths import check_folder

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class HotSpot:
    """Submodules alike in type, settings, weights' shapes and inputs: one task."""

    name: str
    stats: tuple[ModuleStat, ...]

    @property
    def first(self) -> ModuleStat:
        return self.stats[0]

    @property
    def time_ms(self) -> float:
        return sum(s.time_ms for s in self.stats)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(s.path for s in self.stats)


def select_hot(profile: ModelProfile, top: int, *, paths: list[str] | None = None,
               leaves: bool = False,
               keep: Callable[[HotSpot], bool] | None = None) -> list[HotSpot]:
    """The `top` hottest extractable groups, none inside another (or exactly `paths`).

    With `keep`, groups it refuses are passed over, so a submodule inside one
    of them may be taken instead.
    """
    stats = {s.path: s for s in profile.modules}
    if paths:
        return [_named_spot(stats, path) for path in paths]
    pool = [s for s in profile.modules if s.extractable]
    if leaves:
        pool = [s for s in pool if not any(p.startswith(s.path + ".") for p in stats)]
    groups: dict[tuple[Any, ...], list[ModuleStat]] = {}
    for stat in pool:
        groups.setdefault(stat.signature, []).append(stat)
    spots = sorted((_spot(members) for members in groups.values()),
                   key=lambda spot: spot.time_ms, reverse=True)
    chosen: list[HotSpot] = []
    for spot in spots:
        if len(chosen) == top:
            break
        if keep is not None and not keep(spot):
            continue
        if not any(_overlaps(a, b) for a in spot.paths for c in chosen for b in c.paths):
            chosen.append(spot)
    return chosen


def _named_spot(stats: dict[str, ModuleStat], path: str) -> HotSpot:
    if path not in stats:
        raise TaskError(f"no submodule {path!r} ran in the profiled forward; profiled ones "
                        f"are {sorted(stats)[:12]}")
    if not stats[path].extractable:
        raise TaskError(f"submodule {path!r} cannot be a task: it {stats[path].why_not}")
    return _spot([stats[path]])


def _spot(members: list[ModuleStat]) -> HotSpot:
    members = sorted(members, key=lambda s: s.path)
    return HotSpot(members[0].path.replace(".", "_"), tuple(members))


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def check_out_folder(out_dir: str | Path) -> Path:
    """The folder extract writes to: one, or a path where one can be made (ConfigError if not)."""
    return check_folder(out_dir, "-o", "give -o a folder for the tasks (made if missing)",
                        ConfigError, missing_ok=True)


def extract(profile: ModelProfile, spots: list[HotSpot], out_dir: str | Path, *,
            fixed_shapes: bool = False, check: bool = True, backward: bool = False) -> Path:
    """Write one task per hot spot, the model file's copy and manifest.json; returns out_dir.

    `backward`: training tasks, whose gradients are judged too.
    """
    out = check_out_folder(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    file = model_file(profile.model_path, profile.seed)
    copy_text = source_copy(file)
    source_module = module_name_for(file.path.stem, copy_text)
    (out / f"{source_module}.py").write_text(copy_text)
    entries = []
    for spot in spots:
        text = task_source(spot, file, source_module, fixed_shapes, backward)
        (out / f"{spot.name}.py").write_text(text)
        entries.append({**_entry(spot), "backward": backward})
    # Relative, so a folder shipped with its model file (examples/) reads the same anywhere.
    manifest = {"format": MANIFEST_FORMAT, "model": os.path.relpath(file.path, out.resolve()),
                "model_source": f"{source_module}.py", "seed": file.seed,
                "profile": {"activity": profile.activity, "device": profile.device,
                            "precision": profile.precision, "total_ms": profile.total_ms},
                "tasks": entries}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if check:
        for spot in spots:
            check_task(out, spot, file)
    return out


def source_copy(file: ModelFile) -> str:
    """The model file as tasks import it: a KernelBench file gains the build() it implies."""
    text = file.source
    if "def build(" in text:
        return text
    return text.rstrip("\n") + _KERNELBENCH_BUILD


_KERNELBENCH_BUILD = '''


def build():
    """Added by kernelevo model extract: the model and inputs, as KernelBench builds them."""
    return Model(*get_init_inputs()), get_inputs()
'''


def _entry(spot: HotSpot) -> dict[str, Any]:
    first = spot.first
    return {"name": spot.name, "file": f"{spot.name}.py", "type": first.type_name,
            "paths": list(spot.paths), "inputs": [_spec_dict(s) for s in first.inputs],
            "params": [[n, list(shape)] for n, shape in first.params],
            "time_ms": spot.time_ms, "share": sum(s.share for s in spot.stats),
            "calls_per_forward": sum(s.calls_per_forward for s in spot.stats)}


def _spec_dict(spec: InputSpec) -> dict[str, Any]:
    return {"shape": list(spec.shape), "dtype": spec.dtype, "min": spec.min, "max": spec.max,
            "mean": spec.mean, "std": spec.std}


def task_source(spot: HotSpot, file: ModelFile, source_module: str,
                fixed_shapes: bool = False, backward: bool = False) -> str:
    """The KernelBench task file of one hot spot."""
    first = spot.first
    weight_dims = set() if fixed_shapes else {n for _, shape in first.params for n in shape}
    names: dict[int, str] = {}
    for spec in first.inputs:
        for size in spec.shape:
            if not fixed_shapes and size not in weight_dims and size not in names:
                names[size] = f"size{len(names)}"
    constants = "".join(f"{name} = {size}\n" for size, name in names.items())
    args = ", ".join(f"x{i}" for i in range(len(first.inputs)))
    makers = ",\n        ".join(input_maker(spec, names) for spec in first.inputs)
    notes = "\n".join(f"    # input {i}: {s.dtype} {tuple(s.shape)}, values in "
                      f"[{s.min:.4g}, {s.max:.4g}], mean {s.mean:.4g}, std {s.std:.4g}"
                      for i, s in enumerate(first.inputs))
    also = (f"\nThe same task stands for {', '.join(spot.paths[1:])} (alike in type, "
            "settings, weights' shapes and inputs).\n" if len(spot.paths) > 1 else "")
    return _TEMPLATE.format(path=first.path, type_name=first.type_name,
                            model_name=file.path.name, seed=file.seed, also=also,
                            module=source_module, constants=constants, args=args,
                            makers=makers, notes=notes,
                            backward=_BACKWARD if backward else "")


def input_maker(spec: InputSpec, names: dict[int, str] | None = None) -> str:
    """Source of an expression drawing one input like the recorded one."""
    names = names or {}
    dims = [str(names.get(n, n)) for n in spec.shape]
    shape = f"({dims[0]},)" if len(dims) == 1 else "(" + ", ".join(dims) + ")"
    dtype = f"torch.{spec.dtype}"
    if spec.dtype == "bool":
        return f"torch.rand({shape}) < {spec.mean:.6g}"
    if not spec.dtype.startswith(("float", "bfloat", "complex")):
        return f"torch.randint({int(spec.min)}, {int(spec.max) + 1}, {shape}, dtype={dtype})"
    if spec.min >= 0:  # a one-signed input stays so (probabilities, ReLU outputs, scales)
        return (f"torch.rand({shape}, dtype={dtype}) * {spec.max - spec.min:.6g} "
                f"+ {spec.min:.6g}")
    return f"torch.randn({shape}, dtype={dtype}) * {spec.std:.6g} + {spec.mean:.6g}"


_TEMPLATE = '''"""Submodule `{path}` ({type_name}) of {model_name}, as a KernelBench task.

Written by `kernelevo model extract`: the reference is the submodule itself,
rebuilt from the copy of the model file beside this task under seed {seed}, so
its weights are the profiled model's; inputs have the recorded shapes, dtypes
and value ranges.
{also}"""

import torch
import torch.nn as nn

from {module} import build as build_model  # the copy of {model_name} beside this task

SUBMODULE = "{path}"
{backward}
{constants}

def reference_submodule() -> nn.Module:
    """The submodule, with the weights the model file's build() gives under its seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed({seed})  # the profile's seed (a literal: the judge varies constants)
        model = build_model()[0]
    return model.eval().get_submodule(SUBMODULE)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = reference_submodule()

    def forward(self, {args}):
        return self.inner({args})


def get_inputs():
{notes}
    return [
        {makers},
    ]


def get_init_inputs():
    return []
'''


_BACKWARD = """
# A training task: the gradients of the inputs and weights are judged too.
backward = True
"""


def load_task_module(folder: Path, name: str) -> Any:
    """Import a written task in this process (its folder first on sys.path, as the judge does)."""
    import importlib.util

    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(f"_kernelevo_task_{name}", folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_task(folder: Path, spot: HotSpot, file: ModelFile) -> None:
    """The written task's reference has the profiled submodule's weights and outputs."""
    import torch

    task = load_task_module(folder.resolve(), spot.name)
    reference = task.Model()
    original = build_model(file).module.get_submodule(spot.first.path)
    mine, theirs = reference.inner.state_dict(), original.state_dict()
    differing = [k for k in theirs if k not in mine or not torch.equal(mine[k], theirs[k])]
    if differing:
        raise TaskError(f"task {spot.name}: rebuilding {file.path.name} under seed {file.seed} "
                        f"gave other weights for {differing[:4]}: build() must draw its "
                        "weights from torch's global RNG only, after the caller's seed")
    torch.manual_seed(0)
    inputs = task.get_inputs()
    with torch.no_grad():
        if not torch.equal(reference(*inputs), original(*inputs)):
            raise TaskError(f"task {spot.name}: its reference differs from {spot.first.path} "
                            "on the same inputs (does the submodule's forward use randomness "
                            "or state outside its weights?)")


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """manifest.json of an extracted folder."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise TaskError(f"{path} not found: give the folder `kernelevo model extract` wrote "
                        "(it holds the tasks and manifest.json)")
    data = json.loads(path.read_text())
    if data.get("format") != MANIFEST_FORMAT:
        raise TaskError(f"{path} has format {data.get('format')!r}, expected "
                        f"{MANIFEST_FORMAT}: extract the tasks again")
    return data


def import_source_copy(folder: Path, manifest: dict[str, Any]) -> Any:
    """The model file's copy beside the tasks, imported (kernels may import it too)."""
    path = folder / manifest["model_source"]
    return import_model_file(ModelFile(path.resolve(), manifest["seed"]))


def draw_input(spec: InputSpec, float_dtype: Any, device: Any,
               shape: tuple[int, ...] | None = None) -> Any:
    """One tensor drawn as input_maker's source draws it, floating ones in `float_dtype`."""
    import torch

    shape = tuple(spec.shape if shape is None else shape)
    if spec.dtype == "bool":
        return torch.rand(shape, device=device) < spec.mean
    if not spec.dtype.startswith(("float", "bfloat")):
        return torch.randint(int(spec.min), int(spec.max) + 1, shape,
                             dtype=getattr(torch, spec.dtype), device=device)
    if spec.min >= 0:
        values = torch.rand(shape, device=device) * (spec.max - spec.min) + spec.min
    else:
        values = torch.randn(shape, device=device) * spec.std + spec.mean
    return values.to(float_dtype)


def spec_from_dict(data: dict[str, Any]) -> InputSpec:
    return InputSpec(**{**data, "shape": tuple(data["shape"])})
