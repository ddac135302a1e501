"""CUDA builds: the cache key, the precompiled torch header, and nvcc with its front ends at once.

The fast tests stand a tiny header in for torch/extension.h and a tiny kernel
for a candidate's; the slow one builds against torch's own headers (minutes
of CPU on a small machine); the gpu ones build, load and run a real candidate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import kernelevo
from kernelevo.evaluate.cuda import build as cuda_build
from kernelevo.evaluate.cuda import shims as cuda_shims
from kernelevo.evaluate.cuda import shims_host, shims_nvcc, shims_shared
from kernelevo.evaluate.cuda.build import build_key
from kernelevo.evaluate.cuda.compilers import compiler_shims, write_script
from kernelevo.evaluate.cuda.shims_host import host_plan
from kernelevo.evaluate.cuda.shims_nvcc import compile_cuda, parse_dryrun

SHIMS = Path(cuda_shims.__file__)
needs_gcc = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

KERNEL = """
namespace { __device__ float twice(float v) { return 2.0f * v; } }
__global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]);
}
void launch(float* x, int n) { scale<<<(n + 255) / 256, 256>>>(x, n); }
"""


# --- the cache key ---------------------------------------------------------------------------


def test_same_source_and_flags_give_the_same_build(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    first = build_key(["decl;"], ["kernel"], ["f"], {"extra_cuda_cflags": ["-O3"]})
    again = build_key(["decl;"], ["kernel"], ["f"], {"extra_cuda_cflags": ["-O3"]})
    assert first == again and len(first) == 16


def test_flags_source_and_target_arch_each_change_the_build(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    base = build_key(["decl;"], ["kernel"], ["f"], {"extra_cuda_cflags": ["-O3"]})
    other_flags = build_key(["decl;"], ["kernel"], ["f"], {"extra_cuda_cflags": ["-O2"]})
    other_source = build_key(["decl;"], ["kernel2"], ["f"], {"extra_cuda_cflags": ["-O3"]})
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    other_arch = build_key(["decl;"], ["kernel"], ["f"], {"extra_cuda_cflags": ["-O3"]})
    assert len({base, other_flags, other_source, other_arch}) == 4


def test_the_key_is_the_same_in_another_process(monkeypatch):
    """Another run or task finds the build: no hash seed, object id or dict order in the key."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    arguments = (["decl;"], ["kernel"], ["f"], {"extra_cuda_cflags": ["-O3"], "verbose": False})
    script = ("from kernelevo.evaluate.cuda.build import build_key\n"
              f"print(build_key(*{arguments!r}))")
    environment = {**os.environ, "PYTHONHASHSEED": "12345",
                   "PYTHONPATH": str(Path(kernelevo.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == build_key(*arguments)


def test_what_only_changes_the_printing_leaves_the_key(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    quiet = build_key(["decl;"], ["kernel"], ["f"], {"verbose": False})
    loud = build_key(["decl;"], ["kernel"], ["f"], {"verbose": True, "keep_intermediates": False})
    assert quiet == loud == build_key(["decl;"], ["kernel"], ["f"], {})


def test_the_hook_passes_the_candidates_sources_as_written(tmp_path, monkeypatch):
    """C++ sources unchanged; CUDA sources changed only by the knockout check and its setter."""
    from torch.utils import cpp_extension

    from kernelevo.evaluate.cuda.build import LoadInlineHook
    from kernelevo.evaluate.child.guards import KernelSwitch

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored
    hook = LoadInlineHook(True, KernelSwitch())
    seen = []

    def record(name, cpp, cuda_sources=None, **kwargs):
        seen.append((list(cpp), list(cuda_sources or []), kwargs))
        return SimpleNamespace(kernelevo_set_knockout=print)  # a build that worked

    hook._original = record
    cpp = "torch::Tensor twice(torch::Tensor x);"
    hook.load_inline("ext", cpp, KERNEL, functions=["twice"], extra_cuda_cflags=["-O3"])
    (declared, cuda, kwargs), = seen
    assert declared == [cpp, "void kernelevo_set_knockout(int64_t value);"]
    assert kwargs["extra_cuda_cflags"] == ["-O3"]
    assert len(cuda) == 2 and cuda[1] == cuda_build._SETTER_SOURCE
    check = " if (kernelevo_knockout_flag) return; "
    assert cuda[0].count(check) == 1
    assert cuda[0].replace(check, "") == cuda_build._PRELUDE + KERNEL


def test_the_hook_takes_positional_arguments_as_the_installed_torch_does(tmp_path, monkeypatch):
    """functions passed by position reaches the build: torch 2.7 put sycl_sources before it."""
    import inspect

    from torch.utils import cpp_extension

    from kernelevo.evaluate.cuda.build import LoadInlineHook
    from kernelevo.evaluate.child.guards import KernelSwitch

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored
    order = list(inspect.signature(cpp_extension.load_inline).parameters)
    hook = LoadInlineHook(True, KernelSwitch())
    calls = []
    hook._original = lambda name, *args, **kwargs: calls.append(kwargs)
    args = [None] * order.index("functions")
    args[:2] = ["ext", "decl;"]
    hook.load_inline(*args, ["f"], extra_cflags=["-O2"])
    assert calls[0]["functions"] == ["f"] and calls[0]["extra_cflags"] == ["-O2"]
    # a second hook over the first binds the same way
    second = LoadInlineHook(True, KernelSwitch())
    second._original = hook._original
    second.load_inline(*args, ["g"])
    assert calls[1]["functions"] == ["g"]
    with pytest.raises(TypeError):  # as torch's own load_inline refuses it
        hook.load_inline("ext", "decl;", not_a_parameter=1)


def test_the_hook_names_each_build_by_its_key(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    from kernelevo.evaluate.cuda.build import LoadInlineHook
    from kernelevo.evaluate.child.guards import KernelSwitch

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored
    hook = LoadInlineHook(True, KernelSwitch())
    calls = []
    hook._original = lambda name, *args, **kwargs: calls.append((name, kwargs))
    hook.load_inline("ext", "decl;", None, functions=["f"], extra_cflags=["-O2"],
                     build_directory="/x")
    hook.load_inline("ext", "decl;", None, functions=["f"], extra_cflags=["-O2"])
    hook.load_inline("ext", "decl;", None, functions=["f"], extra_cflags=["-O3"])
    names = [name for name, _ in calls]
    assert names[0] == names[1] != names[2] and names[0].startswith("ext_")
    assert "build_directory" not in calls[0][1]  # builds live in the shared, keyed cache


# --- the host compile: which calls get the precompiled header --------------------------------


def _fake_torch(tmp_path: Path) -> Path:
    """An include folder whose torch/extension.h is small enough to precompile in a blink."""
    include = tmp_path / "torch" / "include"
    (include / "torch").mkdir(parents=True)
    (include / "torch" / "extension.h").write_text(
        "#pragma once\ninline int torch_answer() { return 42; }\n")
    (tmp_path / "torch" / "version.py").write_text("__version__ = '0.0-test'\n")
    return include


def _main_cpp(tmp_path: Path, body: str = "int f() { return torch_answer(); }\n") -> Path:
    source = tmp_path / "main.cpp"
    source.write_text("#include <torch/extension.h>\n" + body)
    return source


def _ninja_args(include: Path, source: Path, name: str = "ext_1") -> list[str]:
    """The host compile as torch's build.ninja writes it."""
    return ["-MMD", "-MF", "main.o.d", f"-DTORCH_EXTENSION_NAME={name}",
            "-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", str(include), "-fPIC", "-std=c++17",
            "-c", str(source), "-o", "main.o"]


def test_host_plan_keeps_the_flags_that_shape_the_header_and_drops_per_object_ones(tmp_path):
    include = _fake_torch(tmp_path)
    flags, header = host_plan(_ninja_args(include, _main_cpp(tmp_path)))
    assert header == include / "torch" / "extension.h"
    assert flags == ["-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", str(include), "-fPIC",
                     "-std=c++17"]


def test_host_plan_leaves_other_compiles_alone(tmp_path):
    include = _fake_torch(tmp_path)
    plain = tmp_path / "other.cpp"
    plain.write_text("int g() { return 1; }\n")
    assert host_plan(_ninja_args(include, plain)) is None
    assert host_plan(["-dumpfullversion", "-dumpversion"]) is None
    linking = ["main.o", "cuda.cuda.o", "-shared", "-o", "ext.so"]
    assert host_plan(linking) is None
    assert host_plan(["-x", "c++", *_ninja_args(include, _main_cpp(tmp_path))]) is None


# --- the precompiled header: built once, reused, never in the way ----------------------------


def _host_compile(tmp_path: Path, store: Path, args: list[str], *extra: str):
    """The host stand-in, as the script in the extensions folder runs it: each call a
    build of its own (a failed one marks the folder; a new build clears the mark)."""
    (tmp_path / shims_shared.SIBLING_FAILED).unlink(missing_ok=True)
    shim = [sys.executable, "-S", "-E", str(SHIMS), "cxx", shutil.which("g++"), str(store)]
    return subprocess.run([*shim, *extra, *args], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "KERNELEVO_BUILD_TIMES": str(tmp_path / "t.jsonl")})


def _events(tmp_path: Path) -> list[str]:
    times = tmp_path / "t.jsonl"
    lines = times.read_text().splitlines() if times.exists() else []
    return [entry["pch"] for entry in map(json.loads, lines) if "pch" in entry]


@needs_gcc
def test_the_first_compile_builds_the_header_and_the_next_ones_use_it(tmp_path):
    include, store = _fake_torch(tmp_path), tmp_path / "pch"
    source = _main_cpp(tmp_path)
    first = _host_compile(tmp_path, store, _ninja_args(include, source, "ext_1"), "-H")
    assert first.returncode == 0, first.stderr
    assert "! " not in first.stderr  # compiled as usual while the header was built
    built = next(store.glob("host-*/torch/extension.h.gch"))
    stamp = built.stat().st_ino
    for name in ("ext_2", "ext_3"):  # another extension name: the same header
        again = _host_compile(tmp_path, store, _ninja_args(include, source, name), "-H")
        assert again.returncode == 0, again.stderr
        assert f"! {built.parents[1]}" in again.stderr  # gcc -H marks a used header with '!'
    assert built.stat().st_ino == stamp  # not rebuilt
    other = _host_compile(tmp_path, store, [*_ninja_args(include, source), "-O2"])
    assert other.returncode == 0 and len(list(store.glob("host-*/torch/*.gch"))) == 2
    assert _events(tmp_path) == ["built", "used", "used", "built"]
    assert not list(store.glob("host-*/torch/*.partial")) and not list(store.glob("host-*/*.log"))


@needs_gcc
def test_the_compiler_uses_the_header_and_makes_the_same_object(tmp_path):
    include, store = _fake_torch(tmp_path), tmp_path / "pch"
    source = _main_cpp(tmp_path)
    for name in ("ext_1", "ext_2"):  # the first builds the header, the second only reads it
        done = _host_compile(tmp_path, store, _ninja_args(include, source, name), "-H")
        assert done.returncode == 0, done.stderr
    assert "! " + str(store) in done.stderr
    (tmp_path / "main.o").rename(tmp_path / "with_header.o")
    plain = subprocess.run(["g++", *_ninja_args(include, source, "ext_2")], cwd=tmp_path)
    assert plain.returncode == 0
    assert _text_of(tmp_path / "main.o") == _text_of(tmp_path / "with_header.o")


@needs_gcc
def test_a_busy_or_failed_header_leaves_the_compile_as_it_was(tmp_path):
    import fcntl

    include, store, compiler = _fake_torch(tmp_path), tmp_path / "pch", shutil.which("g++")
    source = _main_cpp(tmp_path)
    flags, header = host_plan(_ninja_args(include, source))
    folder = store / f"host-{shims_host.pch_key(compiler, flags, header)}"
    (folder / "torch").mkdir(parents=True)
    stale = folder / "torch" / "extension.h.gch.999.partial"
    stale.write_text("left by a builder killed midway")
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process is building it
        busy = _host_compile(tmp_path, store, _ninja_args(include, source))
        assert busy.returncode == 0 and (tmp_path / "main.o").is_file()
    assert _events(tmp_path) == ["busy"] and not (folder / "torch/extension.h.gch").exists()
    assert stale.exists()  # not this one's to clear while another holds the lock
    assert _host_compile(tmp_path, store, _ninja_args(include, source)).returncode == 0
    assert not stale.exists() and (folder / "torch/extension.h.gch").is_file()
    broken = [*_ninja_args(include, source), "-DSOMETHING", "-fno-such-option"]
    for _ in range(2):
        done = _host_compile(tmp_path, store, broken)
        assert done.returncode != 0 and "no-such-option" in done.stderr  # gcc's own word
    failed = next(store.glob("host-*/failed.log"))
    assert "no-such-option" in failed.read_text()
    assert _events(tmp_path) == ["busy", "built", "failed"]  # not retried


@needs_gcc
def test_a_host_compile_error_is_reported_as_the_compiler_wrote_it(tmp_path):
    include, store = _fake_torch(tmp_path), tmp_path / "pch"
    source = _main_cpp(tmp_path, "int f() { return undefined_thing; }\n")
    for _ in range(2):  # while the header is built, and with it
        done = _host_compile(tmp_path, store, _ninja_args(include, source))
        assert done.returncode != 0
        assert "undefined_thing" in done.stderr and "was not declared" in done.stderr


def _text_of(path: Path) -> str:
    """Disassembly without the first lines, which name the file."""
    listing = subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True)
    return listing.stdout.split("\n", 3)[-1]


# --- nvcc: the plan and the split run ---------------------------------------------------------

DRYRUN = """\
#$ _NVVM_BRANCH_=nvvm
#$ _SPACE_= \n\
#$ CICC_PATH=/cuda/bin/../nvvm/bin
#$ PATH=/cuda/bin/../nvvm/bin:/cuda/bin:/usr/bin
#$ gcc -D__CUDA_ARCH_LIST__=900 -E -x c++ -D__CUDACC__ "k.cu" -o "/s/t-5_k.cpp4.ii"
#$ cudafe++ --c++17 --gen_c_file_name "/s/t-6_k.cudafe1.cpp" --gen_module_id_file \
--module_id_file_name "/s/t-4_k.module_id" "/s/t-5_k.cpp4.ii"
#$ gcc -D__CUDA_ARCH__=900 -E -x c++ -D__CUDACC__ "k.cu" -o "/s/t-7_k.cpp1.ii"
#$ "$CICC_PATH/cicc" --c++17 -arch compute_90 --module_id_file_name "/s/t-4_k.module_id" \
"/s/t-7_k.cpp1.ii" -o "/s/t-6_k.ptx"
#$ ptxas -arch=sm_90 -m64  "/s/t-6_k.ptx"  -o "/s/t-8_k.cubin"
#$ fatbinary -64 "--image3=kind=elf,sm=90,file=/s/t-8_k.cubin" --embedded-fatbin="/s/t-3_k.fatbin.c"
#$ rm /s/t-3_k.fatbin
#$ gcc -D__CUDA_ARCH__=900 -c -x c++ "/s/t-6_k.cudafe1.cpp" -o "k.o"
"""


def test_the_dryrun_splits_into_host_and_device_chains():
    plan = parse_dryrun(DRYRUN)
    assert plan is not None
    assert [shims_nvcc._tool(s) for s in plan.host] == ["gcc", "cudafe++"]
    assert "--gen_module_id_file" not in plan.host[1]  # read, no longer written, by cudafe++
    assert [shims_nvcc._tool(s) for s in plan.device] == ["gcc", "cicc", "ptxas", "fatbinary"]
    assert plan.final.endswith('-o "k.o"') and plan.module_id_file == "/s/t-4_k.module_id"
    assert plan.environment["CICC_PATH"] == "/cuda/bin/../nvvm/bin"


@pytest.mark.parametrize("change", [
    ("#$ rm /s/t-3_k.fatbin\n", "-- Filter Dependencies -- > k.o.d\n"),  # done inside nvcc
    ("ptxas -arch", "nvlink -arch"),  # a step this does not know
    (" --gen_module_id_file", ""),  # cudafe++ would not write the module id
])
def test_a_dryrun_of_another_shape_runs_nvcc_as_usual(change):
    assert parse_dryrun(DRYRUN.replace(*change)) is None


@needs_nvcc
@pytest.mark.slow
def test_split_nvcc_makes_the_object_nvcc_makes(tmp_path, monkeypatch):
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    nvcc, keep = shutil.which("nvcc"), tmp_path / "keep"
    keep.mkdir()
    flags = ["-gencode=arch=compute_90,code=sm_90", "-O3", "-c", str(source)]
    plain = subprocess.run([nvcc, *flags, "-o", str(tmp_path / "plain.o"), "-keep",
                            "-keep-dir", str(keep)])
    assert plain.returncode == 0
    # With nvcc's own module id (the name both halves give the anonymous
    # namespace), the split run must make the very same object.
    nvcc_id = next(keep.glob("*.module_id")).read_text()
    monkeypatch.setattr(shims_nvcc, "_module_id", lambda source, args: nvcc_id)
    split, depfile = tmp_path / "split.o", tmp_path / "split.o.d"
    done = compile_cuda(nvcc, ["-MD", "-MF", str(depfile), *flags, "-o", str(split)])
    assert done is not None and done.returncode == 0, done and done.stderr
    assert _text_of(tmp_path / "plain.o") == _text_of(split)
    assert _symbols(tmp_path / "plain.o") == _symbols(split)
    fatbin = _section(split, ".nv_fatbin")
    assert fatbin and fatbin.split("\n", 3)[-1] == _section(
        tmp_path / "plain.o", ".nv_fatbin").split("\n", 3)[-1]
    assert depfile.read_text().replace("\\\n", " ").split()[:2] == [f"{split}:", str(source)]


def test_module_ids_are_names_and_differ_between_sources(tmp_path):
    first, second = tmp_path / "a.cu", tmp_path / "b.cu"
    first.write_text(KERNEL)
    second.write_text(KERNEL + "\n")
    ids = {shims_nvcc._module_id(str(p), ["-c", str(p)]) for p in (first, second)}
    assert len(ids) == 2 and all(i.replace("_", "").isalnum() for i in ids)


@needs_nvcc
@pytest.mark.slow
def test_a_cuda_compile_error_comes_back_with_nvccs_message(tmp_path):
    source = tmp_path / "bad.cu"
    source.write_text(KERNEL.replace("2.0f * v", "2.0f * missing_value"))
    done = compile_cuda(shutil.which("nvcc"), ["-c", str(source), "-o", str(tmp_path / "b.o")])
    assert done is not None and done.returncode != 0
    assert 'identifier "missing_value" is undefined' in done.stderr
    assert done.stderr.count("missing_value\" is undefined") == 1  # reported once, not twice


def _torch_headers(tmp_path: Path) -> Path:
    """torch/types.h and a torch/extension.h that declares more, as torch's do."""
    include = tmp_path / "light_include"
    (include / "torch").mkdir(parents=True)
    (include / "torch" / "types.h").write_text("#pragma once\nstruct Tensor { float* data; int n; };\n")
    (include / "torch" / "extension.h").write_text(
        "#pragma once\n#include <torch/types.h>\n"
        "namespace torch { namespace nn { int from_the_full_header(); } }\n")
    return include


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("extra, attempts", [
    ("", ["light"]),  # torch/types.h is all it uses
    ("int use() { return torch::nn::from_the_full_header(); }\n", ["light", "as_written"]),
])
def test_a_cuda_file_is_tried_with_torch_types_h_and_else_built_as_written(
        tmp_path, monkeypatch, extra, attempts):
    include, times = _torch_headers(tmp_path), tmp_path / "times.jsonl"
    monkeypatch.setenv("KERNELEVO_BUILD_TIMES", str(times))
    source, built, depfile = tmp_path / "k.cu", tmp_path / "k.o", tmp_path / "k.o.d"
    source.write_text("#include <torch/extension.h>\n" + KERNEL
                      + "void take(Tensor t) { launch(t.data, t.n); }\n" + extra)
    light = shims_nvcc.write_light_header(tmp_path / "light")
    done = compile_cuda(shutil.which("nvcc"), ["-MD", "-MF", str(depfile), "-isystem", str(include),
                                               "-c", str(source), "-o", str(built)], light)
    assert done is not None and done.returncode == 0, done and done.stderr
    entries = [json.loads(line) for line in times.read_text().splitlines()]
    assert [e["attempt"] for e in entries] == attempts
    assert "failed" not in entries[-1]
    # The object built as written calls what only the full header declares.
    assert any("from_the_full_header" in name for name in _symbols(built)) == bool(extra)
    # Every file the object depends on is still there, or ninja builds it
    # again each time the extension is loaded.
    needed = depfile.read_text().replace("\\\n", " ").split()[1:]
    assert needed and all(Path(path).is_file() for path in needed), needed
    assert (str(light / "torch" / "extension.h") in needed) == (not extra)


@needs_nvcc
@pytest.mark.slow
def test_a_file_broken_as_written_is_compiled_once_and_reports_its_error(tmp_path, monkeypatch):
    include, times = _torch_headers(tmp_path), tmp_path / "times.jsonl"
    monkeypatch.setenv("KERNELEVO_CUDA_LIGHT_HEADER", "1")
    monkeypatch.setenv("KERNELEVO_BUILD_TIMES", str(times))
    source = tmp_path / "bad.cu"
    source.write_text("#include <torch/extension.h>\n"
                      + KERNEL.replace("2.0f * v", "2.0f * missing_value"))
    light = shims_nvcc.write_light_header(tmp_path / "light")
    done = compile_cuda(shutil.which("nvcc"), ["-isystem", str(include), "-c", str(source),
                                               "-o", str(tmp_path / "b.o")], light)
    assert done is not None and done.returncode != 0
    assert done.stderr.count('identifier "missing_value" is undefined') == 1
    # Its error names nothing torch/extension.h adds: no second compile.
    attempts = [json.loads(line)["attempt"] for line in times.read_text().splitlines()]
    assert attempts == ["light"]


def test_only_a_cuda_file_that_includes_torch_extension_h_is_tried_light(tmp_path, monkeypatch):
    source = tmp_path / "k.cu"
    for text, wanted in (("#include <torch/extension.h>\n", True),
                         ("  #  include \"torch/extension.h\"\n", True),
                         ("#include <torch/types.h>\n", False),
                         ("// #include <torch/extension.h>\n", False),
                         # its own binding needs pybind11: the try could only fail
                         ("#include <torch/extension.h>\nPYBIND11_MODULE(m, m) {}\n", False)):
        source.write_text(text + KERNEL)
        assert shims_nvcc.light_header_wanted(source) is wanted, text
    source.write_text("#include <torch/extension.h>\n")
    monkeypatch.setenv("KERNELEVO_CUDA_LIGHT_HEADER", "0")
    assert not shims_nvcc.light_header_wanted(source)


def test_the_light_header_is_written_once_and_left_alone(tmp_path):
    light = shims_nvcc.write_light_header(tmp_path / "light")
    header = light / "torch" / "extension.h"
    assert header.read_text() == shims_nvcc.LIGHT_HEADER
    os.utime(header, (1, 1))  # an older file: rewriting it would make ninja build again
    shims_nvcc.write_light_header(tmp_path / "light")
    assert header.stat().st_mtime == 1


def _symbols(path: Path) -> list[str]:
    names = subprocess.run(["nm", str(path)], capture_output=True, text=True).stdout
    return sorted(line.split()[-1] for line in names.splitlines())


def _section(path: Path, name: str) -> str:
    return subprocess.run(["objdump", "-s", "-j", name, str(path)], capture_output=True,
                          text=True).stdout


# --- the hook: shims installed where ninja will look for them --------------------------------


def test_shims_are_installed_once_at_fixed_paths_and_the_environment_restored(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.delenv("PYTORCH_NVCC", raising=False)
    before = os.environ.get("CXX")
    with compiler_shims():
        inside = {k: os.environ.get(k) for k in ("CXX", "PYTORCH_NVCC")}
    with compiler_shims():
        again = {k: os.environ.get(k) for k in ("CXX", "PYTORCH_NVCC")}
    assert inside == again
    assert os.environ.get("CXX") == before and "PYTORCH_NVCC" not in os.environ
    if shutil.which("g++"):
        assert inside["CXX"] == str(tmp_path / "kernelevo-tools" / "g++")
        script = Path(inside["CXX"]).read_text()
        assert str(SHIMS) in script and os.access(inside["CXX"], os.X_OK)
        version = subprocess.run([inside["CXX"], "-dumpversion"], capture_output=True, text=True)
        assert version.returncode == 0 and version.stdout.strip()[0].isdigit()


def test_the_script_sends_compiles_to_the_stand_in_and_the_rest_to_the_compiler(tmp_path):
    """Version queries and links skip the Python start; a compile goes through cuda_shims."""
    real = tmp_path / "real-cc"
    real.write_text('#!/bin/sh\necho "real $*"\n')
    real.chmod(0o755)
    script = write_script(tmp_path / "tools" / "g++", "cxx", str(real), str(tmp_path / "pch"))
    query = subprocess.run([script, "-dumpfullversion", "-dumpversion"], capture_output=True,
                           text=True)
    assert query.stdout.strip() == "real -dumpfullversion -dumpversion"
    link = subprocess.run([script, "main.o", "-shared", "-o", "x.so"], capture_output=True,
                          text=True)
    assert link.stdout.strip() == "real main.o -shared -o x.so"
    source = tmp_path / "plain.cpp"
    source.write_text("int g() { return 1; }\n")  # no torch header: the stand-in passes it on
    compile_ = subprocess.run([script, "-c", str(source), "-o", "plain.o"], capture_output=True,
                              text=True)
    assert compile_.stdout.strip() == f"real -c {source} -o plain.o"
    assert str(cuda_shims.__file__) in Path(script).read_text()
    again = write_script(tmp_path / "tools" / "g++", "cxx", str(real), str(tmp_path / "pch"))
    assert again == script and os.access(script, os.X_OK)


def test_shims_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELEVO_COMPILER_SHIMS", "0")
    monkeypatch.delenv("CXX", raising=False)
    with compiler_shims():
        assert "CXX" not in os.environ
    assert not (tmp_path / "kernelevo-tools").exists()


_LOAD_AGAIN = """
import sys, time
from kernelevo.evaluate.child.guards import KernelSwitch
from kernelevo.evaluate.cuda.build import LoadInlineHook
hook = LoadInlineHook(True, KernelSwitch())
module = hook.load_inline(sys.argv[1], sys.argv[2], sys.argv[3] or None, functions=[sys.argv[4]])
print(hook.build_s)
"""


def _load_in_a_fresh_process(extensions: Path, name: str, cpp: str, cuda: str,
                             function: str) -> float:
    """load_inline through the hook in another process, as the judging worker does; seconds."""
    environment = {**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions),
                   "PYTHONPATH": str(Path(kernelevo.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", _LOAD_AGAIN, name, cpp, cuda, function],
                          capture_output=True, text=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return float(done.stdout.split()[-1])


def _objects(extensions: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in extensions.glob("*/*.o")}


@needs_gcc
@pytest.mark.slow
def test_a_host_only_extension_builds_with_the_header_loads_cached_and_reports_errors(
        tmp_path, monkeypatch):
    """torch's own headers, a real build: the header is made by the first build only."""
    from torch.utils import cpp_extension

    from kernelevo.evaluate.cuda.build import LoadInlineHook
    from kernelevo.evaluate.child.guards import KernelSwitch

    times, extensions = tmp_path / "times.jsonl", tmp_path / "extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    monkeypatch.setenv("KERNELEVO_BUILD_TIMES", str(times))
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored
    hook = LoadInlineHook(True, KernelSwitch())
    source = "int64_t add(int64_t x) { return x + %d; }"
    first = hook.load_inline("ke_add", source % 1, functions=["add"])
    second = hook.load_inline("ke_add", source % 2, functions=["add"])
    assert (first.add(1), second.add(1)) == (2, 3)
    assert [json.loads(line).get("pch") for line in times.read_text().splitlines()] == [
        "built", "used"]
    built = _objects(extensions)
    _load_in_a_fresh_process(extensions, "ke_add", source % 1, "", "add")
    assert _objects(extensions) == built  # found by its key, and ninja had nothing to do
    with pytest.raises(RuntimeError) as failure:
        hook.load_inline("ke_add", "int64_t add(int64_t x) { return y; }", functions=["add"])
    report = str(failure.value) + _build_logs(extensions)
    assert "return y;" in report and "was not declared" in report


def _build_logs(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.glob("*/*.log"))


# --- on the GPU machine: a real candidate, built fast, loaded from the cache, run ------------

ADD_ONE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "cuda_add_one.py"


def _add_one_sources() -> tuple[str, str]:
    namespace: dict = {}
    text = ADD_ONE.read_text().split("_ext = load_inline(")[0]
    exec(compile(text, str(ADD_ONE), "exec"), namespace)  # the candidate's own source strings
    return namespace["CPP_SRC"], namespace["CUDA_SRC"]


@pytest.mark.gpu
def test_a_candidate_built_through_the_stand_ins_runs_right_and_loads_from_the_cache(
        tmp_path, monkeypatch):
    import torch
    from torch.utils import cpp_extension

    from kernelevo.evaluate.cuda.build import LoadInlineHook
    from kernelevo.evaluate.child.guards import KernelSwitch

    times, extensions = tmp_path / "times.jsonl", tmp_path / "extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    monkeypatch.setenv("KERNELEVO_BUILD_TIMES", str(times))
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored
    cpp, cuda = _add_one_sources()
    cuda = "#include <torch/extension.h>\n" + cuda  # as most candidates write it
    switch = KernelSwitch()
    module = LoadInlineHook(True, switch).load_inline("ke_add_one", cpp, cuda,
                                                      functions=["add_one"])
    events = [json.loads(line) for line in times.read_text().splitlines()]
    assert {"cxx", "nvcc"} <= {e["role"] for e in events}  # both stand-ins did the build
    assert not any("failed" in e or e.get("pch") == "failed" for e in events)
    # built with torch/types.h for torch/extension.h, at the first try
    assert [e["attempt"] for e in events if e["role"] == "nvcc"] == ["light"]
    x = torch.randn(1000, 1000, device="cuda")
    expected, computed = x + 1, module.add_one(x)  # both kept: no freed block holds x + 1
    assert torch.equal(computed, expected)
    switch.cuda_setters[-1](1)  # the knockout still switches the candidate's kernel off
    assert not torch.equal(module.add_one(x), expected)
    switch.cuda_setters[-1](0)
    built = _objects(extensions)
    load_s = _load_in_a_fresh_process(extensions, "ke_add_one", cpp, cuda, "add_one")
    assert _objects(extensions) == built and load_s < 0.5


def _failing_hook(tmp_path, monkeypatch, message):
    from torch.utils import cpp_extension

    from kernelevo.evaluate.cuda.build import LoadInlineHook
    from kernelevo.evaluate.child.guards import KernelSwitch

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored
    hook = LoadInlineHook(True, KernelSwitch())
    calls = []

    def build(name, *args, **kwargs):
        calls.append(name)
        raise RuntimeError(f"Error building extension '{name}': {message}")

    hook._original = build
    return hook, calls


def test_a_source_the_compiler_refused_is_not_compiled_again(tmp_path, monkeypatch):
    hook, calls = _failing_hook(tmp_path, monkeypatch, "k.cu(3): error: expected a \";\"")
    for _ in range(2):  # the second time: at once, with the first time's message
        with pytest.raises(RuntimeError, match='expected a ";"'):
            hook.load_inline("ext", "void f();", "__global__ void k() { x }", functions=["f"])
    # One build: the instrumented one. Its error is the source's own, so
    # neither the plain source nor the second load compiles again.
    assert len(calls) == 1


def test_a_failure_the_instrumentation_caused_builds_the_plain_source(tmp_path, monkeypatch):
    hook, calls = _failing_hook(tmp_path, monkeypatch,
                                "error: kernelevo_knockout_flag redeclared")
    with pytest.raises(RuntimeError):
        hook.load_inline("ext", "void f();", "__global__ void k() { }", functions=["f"])
    assert len(calls) == 2 and calls[0] != calls[1]


def test_a_build_cut_short_is_not_remembered(tmp_path, monkeypatch):
    hook, calls = _failing_hook(tmp_path, monkeypatch, "error: No space left on device")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            hook.load_inline("ext", "void f();", "__global__ void k() { }", functions=["f"])
    assert len(calls) == 2


def test_a_build_whose_only_error_is_a_stopped_compile_is_not_remembered(tmp_path, monkeypatch):
    """A compile stopped by the build folder's failure mark, with no compiler error
    anywhere in the log (a mark nothing of this build made), says nothing about
    the source: it is built again. With a compiler's error beside it, it is remembered."""
    stopped = f"Error building extension 'ext':\nFAILED: main.o\n{shims_shared.STOPPED}\n"
    hook, calls = _failing_hook(tmp_path, monkeypatch, stopped)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            hook.load_inline("ext", "void f();", "__global__ void k() { }", functions=["f"])
    assert len(calls) == 2
    real = stopped + "k.cu(3): error: identifier \"missing\" is undefined\n"
    hook, calls = _failing_hook(tmp_path / "again", monkeypatch, real)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="missing"):
            hook.load_inline("ext", "void f();", "__global__ void k() { missing; }",
                             functions=["f"])
    assert len(calls) == 1


def test_a_long_compiler_log_keeps_its_error_lines_ahead_of_the_tail():
    from kernelevo.evaluate.cuda.build import _errors_first

    log = "k.cu(3): error: no instance of function template matches\n" + "expanded macro\n" * 2000
    kept = _errors_first(log)
    assert len(kept) <= 6000 and kept.startswith("k.cu(3): error: no instance")
    assert kept.endswith("expanded macro\n")
    assert _errors_first("short log") == "short log"


def _slow_header_compiler(tmp_path: Path) -> str:
    """g++, except that precompiling a header takes 60 s (a real torch/extension.h
    takes about 35 s on the GPU machine)."""
    script = tmp_path / "slow-g++"
    script.write_text("#!/bin/sh\n"
                      'case " $* " in *" c++-header "*) sleep 60 ;; esac\n'
                      f'exec {shutil.which("g++")} "$@"\n')
    script.chmod(0o755)
    return str(script)


@needs_gcc
def test_a_failed_build_gives_the_header_up_instead_of_waiting_for_it(tmp_path):
    """The first build of a flag set builds the header beside its compile and waits for
    it; but once the CUDA file beside it has failed (its mark in the build folder),
    the host file's compile stops too, and once its own compile has failed, it marks
    the folder: either way the build ends after one compile and the header is left
    for a later build."""
    import time

    include, store = _fake_torch(tmp_path), tmp_path / "pch"
    slow = _slow_header_compiler(tmp_path)
    shim = [sys.executable, "-S", "-E", str(SHIMS), "cxx", slow, str(store)]
    env = {**os.environ, "KERNELEVO_BUILD_TIMES": str(tmp_path / "t.jsonl")}
    marker = tmp_path / shims_shared.SIBLING_FAILED
    marker.touch()  # nvcc's stand-in failed on the CUDA file
    started = time.monotonic()
    done = subprocess.run([*shim, *_ninja_args(include, _main_cpp(tmp_path))], cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    assert done.returncode != 0 and shims_shared.STOPPED in done.stderr
    assert not (tmp_path / "main.o").is_file()
    assert time.monotonic() - started < 20
    marker.unlink()
    broken = _main_cpp(tmp_path, "int f() { return undefined_thing; }\n")
    started = time.monotonic()
    done = subprocess.run([*shim, *_ninja_args(include, broken)], cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    assert done.returncode != 0 and "undefined_thing" in done.stderr
    assert time.monotonic() - started < 20
    assert marker.exists()  # the CUDA file's compile, running beside it, stops at this
    assert _events(tmp_path) == ["abandoned", "abandoned"]
    assert not list(store.glob("host-*/torch/*.gch*"))  # nothing half-written is left
    assert not list(store.glob("host-*/failed.log"))  # the flags are fine: tried again later


@needs_gcc
def test_in_the_background_a_working_compile_does_not_wait_for_the_header(tmp_path):
    """With $KERNELEVO_PCH_BACKGROUND (a prebuild's job), the first compile of a flag
    set ends after its own compile; the header's build goes on, registered there,
    and is put in place when done, for the next compile to use."""
    import time

    from kernelevo.evaluate.cuda.shims_host import BACKGROUND, wait_for_background

    include, store = _fake_torch(tmp_path), tmp_path / "pch"
    script = tmp_path / "slowish-g++"  # precompiling a header takes 4 s here
    script.write_text("#!/bin/sh\n"
                      'case " $* " in *" c++-header "*) sleep 4 ;; esac\n'
                      f'exec {shutil.which("g++")} "$@"\n')
    script.chmod(0o755)
    waiting = tmp_path / "background"
    shim = [sys.executable, "-S", "-E", str(SHIMS), "cxx", str(script), str(store)]
    env = {**os.environ, "KERNELEVO_BUILD_TIMES": str(tmp_path / "t.jsonl"),
           BACKGROUND: str(waiting)}
    started = time.monotonic()
    done = subprocess.run([*shim, *_ninja_args(include, _main_cpp(tmp_path))], cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    compiled_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "main.o").is_file()
    assert compiled_s < 3.5  # not the header's 4 s
    assert not list(store.glob("host-*/torch/extension.h.gch"))  # still being built
    assert not wait_for_background(waiting, timeout_s=0.2)  # registered, and running
    assert wait_for_background(waiting, timeout_s=30)
    assert next(store.glob("host-*/torch/extension.h.gch")).is_file()
    assert _events(tmp_path) == ["background", "built"]
    (tmp_path / "main.o").unlink()
    env.pop(BACKGROUND)
    again = subprocess.run([*shim, *_ninja_args(include, _main_cpp(tmp_path))], cwd=tmp_path,
                           capture_output=True, text=True, env=env)
    assert again.returncode == 0 and _events(tmp_path)[-1] == "used"
    assert not list(store.glob("host-*/torch/*.partial")) and not list(store.glob("host-*/torch/*.log"))


def _slow_compiler(tmp_path: Path) -> str:
    """A compiler that takes 60 s for anything (torch's headers, parsed cold)."""
    script = tmp_path / "slow-cc"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    return str(script)


def test_a_compile_still_running_stops_once_the_other_file_of_its_build_failed(tmp_path,
                                                                              monkeypatch):
    """ninja waits for every running compile after one fails: the host file's
    compile and nvcc's two chains each stop as the build folder is marked, so a
    broken CUDA file is reported after its own compile, not after the host file's."""
    import threading
    import time

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / shims_shared.SIBLING_FAILED
    threading.Timer(1.0, marker.touch).start()
    started = time.monotonic()
    assert shims_shared.compile_in_build([_slow_compiler(tmp_path)]) == 1
    assert time.monotonic() - started < 10
    marker.unlink()
    threading.Timer(1.0, marker.touch).start()
    started = time.monotonic()
    done = shims_nvcc._run_chains(["sleep 60"], ["sleep 60"], "true", dict(os.environ),
                                  tmp_path, "light")
    assert done.returncode == 1 and shims_shared.STOPPED in done.stderr
    assert time.monotonic() - started < 10
    assert not shims_nvcc.lighter_header_to_blame(done.stderr)  # no second compile for it
    marker.unlink()
    # a compile of its own that fails marks the folder; one that works does not
    assert shims_shared.compile_in_build(["false"]) == 1 and marker.exists()
    marker.unlink()
    assert shims_shared.compile_in_build(["true"]) == 0 and not marker.exists()


def test_a_build_clears_a_mark_left_by_an_earlier_build_cut_short(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    from kernelevo.evaluate.cuda.build import LoadInlineHook, build_key
    from kernelevo.evaluate.child.guards import KernelSwitch

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored
    hook = LoadInlineHook(True, KernelSwitch())
    seen = []
    hook._original = lambda name, *args, **kwargs: seen.append(
        (tmp_path / name / shims_shared.SIBLING_FAILED).exists())
    unique = f"ext_{build_key(['void f();'], [], ['f'], {})}"
    (tmp_path / unique).mkdir()
    (tmp_path / unique / shims_shared.SIBLING_FAILED).touch()
    hook.load_inline("ext", "void f();", None, functions=["f"])
    assert seen == [False]
