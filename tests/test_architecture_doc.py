"""docs/architecture.md against the code: its package map names every module and only
modules that exist, its message table every kind, its dotted names what they name."""

from __future__ import annotations

import ast
import re

from kernelevo.evaluate.shared import messages
from tests.conftest import ROOT
from tests.test_import_graph import PACKAGE_ROOT

DOC = ROOT / "docs" / "architecture.md"
# `name.py`, `package/`, `package/name.py`: a module or package named in the doc
_PATH = re.compile(r"`([a-z_][a-z0-9_]*(?:/[a-z0-9_]+)*(?:\.py|/))`")
# `a.b`, `a/b.c`: an attribute of a module (a function, class or constant)
_DOTTED = re.compile(r"`([a-z_]+(?:/[a-z_]+)*)\.([A-Za-z_]\w*)`")
# - **`package/`** opens that package's list: the names after it are its modules
_PACKAGE_ITEM = re.compile(r"^- \*\*`([a-z_/]+/)`\*\*")
_ELSEWHERE = ("src/", "tests/", "docs/", "bench/")  # paths outside the package


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _modules() -> set[str]:
    """Every module and package under src/kernelevo, as the doc writes them."""
    found = set()
    for path in PACKAGE_ROOT.rglob("*.py"):
        relative = path.relative_to(PACKAGE_ROOT).as_posix()
        found.add(relative[: -len("__init__.py")] if path.name == "__init__.py" else relative)
    return found - {""}


def _named_in_package_map() -> dict[str, str]:
    """Each module or package the package map names -> the line that names it."""
    named: dict[str, str] = {}
    package = ""
    for line in _section("Package map").splitlines():
        opened = _PACKAGE_ITEM.match(line)
        if opened:
            package = opened.group(1)
        elif line.startswith(("- ", "|", "#")) or not line.strip():
            package = ""  # a list item of its own, a table row or a paragraph: from the root
        for name in _PATH.findall(line):
            if name.startswith(_ELSEWHERE):
                continue
            inside = package + name if package and not name.endswith("/") else name
            named[inside if (PACKAGE_ROOT / inside).exists() else name] = line.strip()[:80]
    return named


def test_the_package_map_names_only_modules_that_exist():
    missing = {name: line for name, line in _named_in_package_map().items()
               if not (PACKAGE_ROOT / name).exists()}
    assert not missing, f"named in docs/architecture.md, not under src/kernelevo: {missing}"


def test_every_module_is_in_the_package_map():
    unnamed = sorted(_modules() - set(_named_in_package_map()))
    assert not unnamed, f"add these to docs/architecture.md's package map: {unnamed}"


def test_the_message_table_has_every_kind_a_child_sends():
    kinds = set()
    for table in (messages.ORACLE_KINDS, messages.WORKER_KINDS, messages.PREBUILD_KINDS,
                  messages.COMPILE_CHECK_KINDS):
        kinds |= set(table) - {"garbage"}  # no message: what is not one (the text says so)
    rows = set(re.findall(r"^\| `(\w+)`", _section("Judge ↔ child messages"), re.MULTILINE))
    assert kinds <= rows, f"docs/architecture.md's message table lacks {sorted(kinds - rows)}"
    assert rows <= kinds, f"docs/architecture.md's message table has no such kinds: {rows - kinds}"


def _defined_names(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def test_dotted_names_in_the_doc_are_defined_where_it_says():
    modules = [path for path in PACKAGE_ROOT.rglob("*.py") if path.name != "__init__.py"]
    wrong = []
    for module, name in set(_DOTTED.findall(DOC.read_text())):
        if name == "py" or module.startswith(_ELSEWHERE):
            continue
        # `outcome.x` may be evaluate/parent/outcome.py or search/outcome.py: any that defines x
        candidates = [path for path in modules
                      if path.relative_to(PACKAGE_ROOT).with_suffix("").as_posix()
                      .endswith(module) and path.stem == module.split("/")[-1]]
        if candidates and not any(name in _defined_names(path) for path in candidates):
            wrong.append(f"{module}.{name}")
    assert not wrong, f"docs/architecture.md names what its module does not define: {wrong}"


def test_adding_a_backend_or_a_measure_is_one_registry_entry_plus_its_code():
    where = _section("Where to add")
    for registry in ("candidate.BACKEND_REGISTRY", "config.TIMING_MEASURES"):
        assert f"one entry in\n  `{registry}`" in where or f"one entry in `{registry}`" in where
    assert "plus its code" in where
