import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Tests judge on the CPU under the Triton interpreter unless run with -m gpu.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    os.environ.setdefault("KERNELEVO_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
