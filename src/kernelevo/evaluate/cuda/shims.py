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
The host stand-in is in shims_host.py, nvcc's in shims_nvcc.py, what they
share in shims_shared.py; standard library only, each.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:  # imported as part of the package
    from kernelevo.evaluate.cuda.shims_host import build_pch, run_host
    from kernelevo.evaluate.cuda.shims_nvcc import run_nvcc
except ImportError:  # run as the stand-in script (python -S -E shims.py): its folder leads sys.path
    from shims_host import build_pch, run_host  # type: ignore[no-redef]
    from shims_nvcc import run_nvcc  # type: ignore[no-redef]


def main(argv: list[str]) -> None:
    role, real = argv[1], argv[2]
    if role == "cxx":
        run_host(real, Path(argv[3]), argv[4:])
    elif role == "nvcc":
        run_nvcc(real, Path(argv[3]), argv[4:])
    elif role == "pch":  # the host stand-in's header builder: folder, store, partial, header, flags
        folder, store, partial, header = map(Path, argv[3:7])
        sys.exit(build_pch(real, folder, store, partial, header, argv[7:]) and 1)
    else:
        raise SystemExit(f"unknown role {role!r}: expected cxx, nvcc or pch")


if __name__ == "__main__":
    main(sys.argv)
