import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """CPU runs use the Triton interpreter; a `-m gpu` run must not (its kernels run on the GPU).

    Set before any test module imports Triton, which reads it at import. A GPU
    run that inherited TRITON_INTERPRET=1 ran every Triton candidate on the host.
    """
    marks = config.getoption("markexpr", "") or ""
    if "gpu" in marks and "not gpu" not in marks:
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise pytest.UsageError("TRITON_INTERPRET=1 is set: -m gpu tests need real kernels")
    else:
        os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    os.environ.setdefault("KERNELEVO_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _private_memory(tmp_path_factory, monkeypatch):
    """Each test its own memory store: one test's runs must not seed another's."""
    monkeypatch.setenv("KERNELEVO_MEMORY_DB", str(tmp_path_factory.mktemp("memory") / "memory.db"))


def bench_module(name: str):
    """A script of bench/ (`bench/<name>.py`) loaded as a module, for its functions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@contextmanager
def tensor_reads() -> Iterator[list[str]]:
    """Every read of a tensor's value back into Python inside the block (`.item()`,
    `.tolist()`, `float()`, `bool()`, ...): on a GPU each one waits for the device."""
    import torch

    reads: list[str] = []
    names = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")
    originals = {name: getattr(torch.Tensor, name) for name in names}

    def counted(name, original):
        def read(self, *args, **kwargs):
            reads.append(name)
            return original(self, *args, **kwargs)
        return read

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, counted(name, original))
        yield reads
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
