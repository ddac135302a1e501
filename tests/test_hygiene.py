"""Packaging and command-line hygiene: version, license, dependencies, choices, logging."""

import ast
import os
import subprocess
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import kernelevo
from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def kernelevo_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kernelevo.cli.app", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _requirement_name(requirement: str) -> str:
    for stop in "<>=!~;[ ":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower()


def test_the_version_is_written_once_and_reported():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "kernelevo.version.__version__"}
    done = kernelevo_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"kernelevo {kernelevo.__version__}"


def test_license_changelog_and_typing_marker_ship():
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "KernelEvo contributors" in license_text
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()
    assert (ROOT / "src/kernelevo/py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["kernelevo"]


def test_declared_dependencies_are_the_third_party_imports():
    declared = {_requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {_requirement_name(r) for group in
              PYPROJECT["project"]["optional-dependencies"].values() for r in group}
    imported = set()
    for path in (ROOT / "src/kernelevo").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if (path.parent / f"{node.module}.py").is_file():
                    continue  # a sibling, as a script run on its own imports it (cuda/shims.py)
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"kernelevo", "__future__"}
    # Every distribution used here imports under its own name.
    assert third_party <= declared | extras, f"imported, undeclared: {third_party - declared}"
    unused = declared - imported
    assert not unused, f"declared, never imported by src/: {unused}"


def test_python_version_floor_matches_what_the_code_needs():
    floor = PYPROJECT["project"]["requires-python"]
    tomli = [r for r in PYPROJECT["project"]["dependencies"] if r.startswith("tomli")]
    assert floor in (">=3.10", ">=3.11")
    assert tomli and "python_version < '3.11'" in tomli[0]  # tomllib's stand-in on 3.10


def test_choices_are_the_values_the_settings_accept():
    from kernelevo.cli import app as cli
    from kernelevo.candidate import BACKENDS, KERNEL_BACKENDS
    from kernelevo.config import POLICIES, PRECISIONS, TIMING_MEASURES

    def values(enum):
        return tuple(member.value for member in enum)

    assert values(cli.Precision) == tuple(PRECISIONS)
    assert values(cli.Policy) == POLICIES
    assert values(cli.Backend) == BACKENDS
    assert values(cli.SearchBackend) == KERNEL_BACKENDS
    assert values(cli.Timing) == TIMING_MEASURES
    assert values(cli.Device) == ("auto", "cuda", "cpu")
    from kernelevo.cli.model import ModelDevice
    from kernelevo.model.contract import MODEL_DEVICES

    assert values(ModelDevice) == MODEL_DEVICES


def test_backends_and_measures_are_listed_only_in_their_registries():
    """A new backend is one entry of candidate.BACKEND_REGISTRY, a measure one of
    config.TIMING_MEASURES: no other module spells out a list of them."""
    from kernelevo.candidate import BACKENDS, KERNEL_BACKENDS
    from kernelevo.config import TIMING_MEASURES

    registries = [set(BACKENDS), set(KERNEL_BACKENDS), set(TIMING_MEASURES)]
    homes = {ROOT / "src" / "kernelevo" / "candidate.py", ROOT / "src" / "kernelevo" / "config.py"}
    spelled_out = []
    for path in sorted((ROOT / "src" / "kernelevo").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if path in homes or not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                continue
            words = {item.value for item in node.elts if isinstance(item, ast.Constant)}
            if words in registries:
                spelled_out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not spelled_out, f"read the registry instead: {spelled_out}"


def test_a_bad_choice_exits_2_listing_the_valid_ones():
    task, candidate = "tests/fixtures/tasks/add.py", "tests/fixtures/candidates/honest_add.py"
    for flag, bad, listed in (("--device", "gpu", "'auto', 'cuda', 'cpu'"),
                              ("--policy", "lax", "'strict', 'default', 'permissive'"),
                              ("--backend", "opencl", "'triton', 'cuda', 'pytorch'"),
                              ("--timing", "wall", "'gpu', 'call', 'kernelbench'")):
        done = kernelevo_cli("eval", task, candidate, flag, bad)
        assert done.returncode == 2 and listed in done.stderr, (flag, done.stderr)
    done = kernelevo_cli("evolve", task, "--backend", "pytorch")
    assert done.returncode == 2 and "'triton', 'cuda'" in done.stderr


def test_verbose_shows_diagnostics_and_quiet_keeps_errors(tmp_path):
    missing = str(tmp_path / "missing.py")
    candidate = "tests/fixtures/candidates/honest_add.py"
    plain = kernelevo_cli("eval", missing, candidate)
    verbose = kernelevo_cli("--verbose", "eval", missing, candidate)
    quiet = kernelevo_cli("--quiet", "eval", missing, candidate)
    assert "settings: EvalConfig(" in verbose.stderr
    assert "settings:" not in plain.stderr and "settings:" not in quiet.stderr
    for done in (plain, verbose, quiet):
        assert done.returncode == 2 and f"task {missing} does not exist" in done.stderr
    both = kernelevo_cli("-v", "-q", "runs")
    assert both.returncode == 2 and "contradict" in both.stderr
