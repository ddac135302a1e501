"""The model file contract: `build() -> (nn.Module, inputs)`, or a KernelBench file.

A model file defines `build()`, returning the model and a list of example
inputs for its forward, or KernelBench's `Model`, `get_inputs()` and
`get_init_inputs()`. Either is called right after `torch.manual_seed(seed)`,
so the same file and seed always give the same weights: extracted tasks
rebuild their submodule this way (docs/model.md).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelevo.cache_dir import cache_key
from kernelevo.errors import ConfigError, EnvironmentProblem, TaskError
from kernelevo.paths import read_text_file

# KernelBench seeds Model's parameters with this value; model files are built under it too.
DEFAULT_SEED = 42


@dataclass(frozen=True)
class ModelFile:
    """A model file on disk and the seed it is built under."""

    path: Path
    seed: int = DEFAULT_SEED

    @property
    def source(self) -> str:
        return self.path.read_text()

    @property
    def module_name(self) -> str:
        """A module name unique to this source, so two model files never share sys.modules."""
        return module_name_for(self.path.stem, self.source)


def module_name_for(stem: str, source: str) -> str:
    """`_model_<stem>_<hash of source>`: one name per distinct source."""
    digest = cache_key(source, digits=10)  # the names of tasks extracted before
    clean = "".join(c if c.isalnum() else "_" for c in stem)
    return f"_model_{clean}_{digest}"


@dataclass(frozen=True)
class BuiltModel:
    """A model built from its file, with the example inputs of its forward."""

    module: Any  # torch.nn.Module
    inputs: tuple[Any, ...]
    file: ModelFile


def model_file(path: str | Path, seed: int = DEFAULT_SEED) -> ModelFile:
    """A ModelFile after checking the file exists and follows the contract."""
    path = Path(path)
    text = read_text_file(path, "model file", "give a .py file that defines build() -> "
                          "(model, inputs), or Model/get_inputs/get_init_inputs", TaskError)
    if "def build" not in text and "class Model" not in text:
        raise TaskError(f"{path} defines neither build() nor class Model: a model file "
                        "defines build() -> (nn.Module, inputs) (docs/model.md)")
    return ModelFile(path.resolve(), seed)


def import_model_file(file: ModelFile) -> ModuleType:
    """Import the model file once per source (its folder first on sys.path, as a script)."""
    name = file.module_name
    if name in sys.modules:
        return sys.modules[name]
    folder = str(file.path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, file.path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TaskError(f"{file.path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def build_model(file: ModelFile) -> BuiltModel:
    """Build the model and its inputs under the file's seed."""
    import torch

    module = import_model_file(file)
    torch.manual_seed(file.seed)
    try:
        model, inputs = build_from(module)
    except TaskError:
        raise
    except Exception as exc:
        raise TaskError(f"{file.path}: building the model failed: "
                        f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise TaskError(f"{file.path}: build() returned {type(model).__name__} as the model; "
                        "it must return (nn.Module, list of inputs)")
    return BuiltModel(model.eval(), tuple(inputs), file)


def build_from(module: ModuleType) -> tuple[Any, list[Any]]:
    """(model, inputs) from an imported model file, by either contract."""
    if hasattr(module, "build"):
        built = module.build()
        if not (isinstance(built, (tuple, list)) and len(built) == 2):
            raise TaskError("build() must return (nn.Module, inputs), got "
                            f"{type(built).__name__}")
        model, inputs = built
    elif all(hasattr(module, n) for n in ("Model", "get_inputs", "get_init_inputs")):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    else:
        raise TaskError("the model file defines neither build() nor Model, get_inputs and "
                        "get_init_inputs (docs/model.md)")
    if not isinstance(inputs, (list, tuple)):
        raise TaskError(f"the model's inputs are {type(inputs).__name__}; give a list of "
                        "tensors for its forward")
    return model, list(inputs)


def moved(built: BuiltModel, device: str, dtype: Any) -> BuiltModel:
    """The model and its floating inputs on `device` in `dtype`."""
    import torch

    inputs = tuple(x.to(device=device, dtype=dtype) if isinstance(x, torch.Tensor)
                   and x.is_floating_point() else
                   (x.to(device) if isinstance(x, torch.Tensor) else x) for x in built.inputs)
    return BuiltModel(built.module.to(device=device, dtype=dtype), inputs, built.file)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


MODEL_DEVICES = ("cpu", "cuda")


def device_for(device: str | None) -> str:
    """The device a model runs on: `device`, else cuda where a GPU is visible, else cpu."""
    import torch

    if device is None:
        return default_device()
    if device not in MODEL_DEVICES:
        raise ConfigError(f"--device {device!r} is no device a model runs on here: give cpu "
                          "or cuda, or leave out --device")
    if device == "cuda" and not torch.cuda.is_available():
        raise EnvironmentProblem("--device cuda: no CUDA GPU is visible here "
                                 "(torch.cuda.is_available() is False): give --device cpu, "
                                 "or leave out --device")
    return device


DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def dtype_of(precision: str) -> Any:
    """torch dtype for fp32|fp16|bf16."""
    import torch

    if precision not in DTYPES:
        raise ConfigError(f"precision {precision!r} is not one of {sorted(DTYPES)}: "
                          "give fp32, fp16 or bf16")
    return getattr(torch, DTYPES[precision])
