"""The torch/types.h try on CUDA sources we did not write: does it build, and build the same?

    python bench/cuda_light_check.py --kb /path/to/KernelBench --site SITE_PACKAGES \\
        [--compare NAME ...] [--out DIR]

Takes the CUDA sources of KernelBench's own example and unit-test kernels
(every .py under src/kernelbench that includes torch/extension.h; they are
run up to load_inline, which only records its arguments), writes each .cu as
load_inline does, and compiles it through the nvcc stand-in
(kernelevo.evaluate.cuda.shims.compile_cuda) with the light header: which
attempt built it. For the --compare names it also builds the file as written
to the same object path (so both get the same module id) and compares the
objects: global text symbols and the device code (.nv_fatbin) must be equal.
SITE_PACKAGES holds a CUDA build of torch (its headers) and nvidia/cu13;
needs nvcc; no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kernelevo.evaluate.cuda import shims_nvcc  # noqa: E402

PREFIX = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


def extract(kb: Path, out: Path) -> list[Path]:
    """Each file's cuda_sources, as load_inline would write them, under out/."""
    import torch.utils.cpp_extension as cpp_extension

    seen: list[object] = []
    cpp_extension.load_inline = lambda *a, **k: seen.append(k.get("cuda_sources")) or \
        types.SimpleNamespace()
    written = []
    for path in sorted((kb / "src" / "kernelbench").rglob("*.py")):
        text = path.read_text(errors="replace")
        if "torch/extension.h" not in text or "thunderkittens" in path.name:
            continue
        seen.clear()
        try:
            exec(compile(text, str(path), "exec"), {"__name__": "kb_source"})
        except Exception as exc:  # noqa: BLE001 - a file that does not run is skipped, said so
            print(f"skipped {path.name}: {type(exc).__name__}: {str(exc)[:80]}")
        for sources in filter(None, seen):
            body = "\n".join(sources) if isinstance(sources, list) else str(sources)
            target = out / f"{path.parent.name}_{path.stem}.cu"
            target.write_text(PREFIX + body)
            written.append(target)
    return written


def compile_one(source: Path, output: Path, site: Path, light: Path | None) -> dict:
    include = []
    for folder in (site / "torch/include", site / "torch/include/torch/csrc/api/include",
                   site / "nvidia/cu13/include", Path(sysconfig.get_paths()["include"])):
        include += ["-isystem", str(folder)]
    flags = [f"-DTORCH_EXTENSION_NAME=kb_{source.stem}", "-DTORCH_API_INCLUDE_EXTENSION_H",
             "-D_GLIBCXX_USE_CXX11_ABI=1", *include, "-gencode=arch=compute_90,code=sm_90",
             "--compiler-options", "-fPIC", "-O3", "-std=c++20", "-c", str(source),
             "-o", str(output)]
    times = output.with_suffix(".times")
    times.unlink(missing_ok=True)
    os.environ["KERNELEVO_BUILD_TIMES"] = str(times)
    started = time.perf_counter()
    done = shims_nvcc.compile_cuda(shutil.which("nvcc"), flags, light)
    attempts = [json.loads(line) for line in times.read_text().splitlines()] if times.exists() else []
    return {"rc": None if done is None else done.returncode,
            "attempts": [a["attempt"] + (" failed" if "failed" in a else "") for a in attempts],
            "s": round(time.perf_counter() - started, 1),
            "error": "" if done is None or done.returncode == 0 else done.stderr[-400:]}


def _symbols(path: Path) -> list[str]:
    listing = subprocess.run(["nm", "--defined-only", str(path)], capture_output=True,
                             text=True).stdout
    return sorted(line.split()[-1] for line in listing.splitlines() if line.split()[-2] == "T")


def _device_code(path: Path) -> str:
    dump = subprocess.run(["objdump", "-s", "-j", ".nv_fatbin", str(path)], capture_output=True,
                          text=True).stdout
    return dump.split("\n", 3)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, required=True, help="a KernelBench checkout")
    parser.add_argument("--site", type=Path, required=True,
                        help="site-packages with a CUDA build of torch and nvidia/cu13")
    parser.add_argument("--compare", nargs="*", default=[], help="file stems to build both ways")
    parser.add_argument("--out", type=Path, help="folder for results.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kernelevo-light-check-"))
    light = shims_nvcc.write_light_header(work / "light")
    results = {}
    for source in extract(args.kb, work):
        row = compile_one(source, source.with_suffix(".o"), args.site, light)
        if source.stem in args.compare and row["rc"] == 0:
            kept = source.with_suffix(".light.o")
            shutil.move(source.with_suffix(".o"), kept)
            os.environ["KERNELEVO_CUDA_LIGHT_HEADER"] = "0"
            written = compile_one(source, source.with_suffix(".o"), args.site, light)
            os.environ.pop("KERNELEVO_CUDA_LIGHT_HEADER")
            row.update(as_written_rc=written["rc"], as_written_s=written["s"],
                       same_symbols=_symbols(kept) == _symbols(source.with_suffix(".o")),
                       same_device_code=_device_code(kept) == _device_code(
                           source.with_suffix(".o")))
        results[source.stem] = row
        print(source.stem, json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cuda_light_check.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
