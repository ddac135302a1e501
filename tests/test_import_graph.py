"""The import graph of src/kernelevo: no cycles, only the CLI imports the CLI, and the
sides of evaluate/ (the judge's process, its children's, pure analysis, shared) kept apart.

Lazy imports (inside functions) count: a cycle closed at call time still
ties two modules into one. `if TYPE_CHECKING:` imports and
`importlib.import_module("kernelevo...")` calls count too. `from a import b`
reads a's `__init__`, so it is an edge to a (and to a.b when b is a module):
a submodule importing its own package's re-exports closes a cycle.

Run `python -m tests.test_import_graph` from the repository root to print
the graph's counts, its cycles, library imports of the CLI, imports up
the layers (LAYERS below) and across evaluate/'s sides (SIDES); it exits 1
when there is any.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "src" / "kernelevo"

# Layers from the bottom up (docs/architecture.md): a module may import its
# own layer and those below. fnmatch patterns; the longest that matches wins,
# so `kernelevo.store*` takes the whole store/ package.
LAYERS: tuple[tuple[str, ...], ...] = (
    # settings, inputs and the small things every layer uses
    ("kernelevo.version", "kernelevo.errors", "kernelevo.paths", "kernelevo.logs",
     "kernelevo.parsing",
     "kernelevo.cache_dir", "kernelevo.schema", "kernelevo.candidate", "kernelevo.task",
     "kernelevo.config", "kernelevo.budget"),
    # the judge and the model client, each knowing nothing of runs
    ("kernelevo.evaluate*", "kernelevo.llm*"),
    # what is kept of a run, and the prompts made from it
    ("kernelevo.render", "kernelevo.export_guard", "kernelevo.store*", "kernelevo.run",
     "kernelevo.run.signals", "kernelevo.propose*", "kernelevo.memory*"),
    # the search over a store, and what reads stored runs back
    ("kernelevo.search*", "kernelevo.run.view", "kernelevo.run.as_json", "kernelevo.report*"),
    # one run put together from the settings and driven
    ("kernelevo.config_file", "kernelevo.run.resume", "kernelevo.run.setup",
     "kernelevo.run.driver"),
    # the front doors: the Python API and suites of tasks
    ("kernelevo", "kernelevo.api", "kernelevo.suite*", "kernelevo.model*"),
    ("kernelevo.cli*",),
)


# Inside evaluate/, by the process a module's code runs in (docs/architecture.md):
# the judge's own (parent), the oracle's and the worker's (child), pure rules
# both use (analysis), and what crosses between them (shared: messages, inputs,
# the sandbox's two ends). fnmatch patterns; the longest that matches wins.
SIDES: dict[str, tuple[str, ...]] = {
    "parent": ("kernelevo.evaluate.parent*", "kernelevo.evaluate.protocol",
               "kernelevo.evaluate.remote*", "kernelevo.evaluate.cuda.check",
               "kernelevo.evaluate.cuda.prebuild"),
    "child": ("kernelevo.evaluate.child*", "kernelevo.evaluate.cuda*"),
    "analysis": ("kernelevo.evaluate.analysis*", "kernelevo.evaluate.static*",
                 "kernelevo.evaluate.verdict"),
    "shared": ("kernelevo.evaluate.shared*", "kernelevo.evaluate.sandbox*"),
}
# The sides a side may import: analysis and shared know neither process; a
# child never imports the judge's side, nor the judge a child's.
SIDE_IMPORTS: dict[str, frozenset[str]] = {
    "parent": frozenset({"parent", "analysis", "shared"}),
    "child": frozenset({"child", "analysis", "shared"}),
    "analysis": frozenset({"analysis", "shared"}),
    "shared": frozenset({"shared"}),
}
# Imports across the sides allowed anyway, each with its reason.
SIDE_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("kernelevo.evaluate.parent.session", "kernelevo.evaluate.child.worker"):
        "run_worker is the job run_job starts; the child imports it again by name",
    ("kernelevo.evaluate.parent.oracle_run", "kernelevo.evaluate.child.oracle"):
        "run_oracle is the job run_job starts; the child imports it again by name",
    ("kernelevo.evaluate.cuda.prebuild", "kernelevo.evaluate.child.worker"):
        "run_prebuild is the job run_job starts; the child imports it again by name",
    ("kernelevo.evaluate.cuda.check", "kernelevo.evaluate.child.worker"):
        "run_compile_check is the job run_job starts; the child imports it again by name",
}


@dataclass(frozen=True)
class ImportGraph:
    """Modules of one package and the imports between them."""

    modules: frozenset[str]
    edges: frozenset[tuple[str, str]]

    def successors(self, module: str) -> list[str]:
        return sorted(target for source, target in self.edges if source == module)


def module_name(path: Path, root: Path = PACKAGE_ROOT) -> str:
    """kernelevo.a.b for root/a/b.py, kernelevo.a for root/a/__init__.py."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imported_names(node: ast.AST, importer: str, package: bool) -> Iterator[str]:
    """Dotted names one import statement (or import_module("literal") call) brings in."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if _is_import_module_call(node):
        yield node.args[0].value  # type: ignore[attr-defined]
        return
    if not isinstance(node, ast.ImportFrom):
        return
    base = node.module or ""
    if node.level:
        anchor = importer.split(".")
        # A package's own __init__ is its anchor at level 1; a module's is its parent.
        anchor = anchor[: len(anchor) - node.level + (1 if package else 0)]
        base = ".".join(anchor + ([base] if base else []))
    # `from a import b` reads a's namespace, so it depends on a's __init__,
    # and on the module a.b as well when b is one.
    yield base
    for alias in node.names:
        yield f"{base}.{alias.name}"


def _is_import_module_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module")


def _resolve(name: str, modules: frozenset[str]) -> str | None:
    """The longest prefix of a dotted name that is a module of the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imports_of(path: Path, importer: str, modules: frozenset[str]) -> set[str]:
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = _imported_names(node, importer, is_package(path))
        targets |= {t for t in (_resolve(n, modules) for n in names) if t and t != importer}
    return targets


def build_graph(root: Path = PACKAGE_ROOT) -> ImportGraph:
    """Every module under root and every import between two of them."""
    paths = sorted(root.rglob("*.py"))
    # A folder without __init__.py is still a package name to resolve to.
    folders = {module_name(p.parent / "__init__.py", root) for p in paths}
    modules = frozenset({module_name(p, root) for p in paths} | folders)
    edges = {(module_name(p, root), target) for p in paths
             for target in _imports_of(p, module_name(p, root), modules)}
    return ImportGraph(modules, frozenset(edges))


@functools.lru_cache(maxsize=1)
def package_graph() -> ImportGraph:
    """The graph of src/kernelevo, built once per process."""
    return build_graph()


def find_cycles(graph: ImportGraph) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module."""
    cycles = []
    for component in _strongly_connected(graph):
        if len(component) > 1:
            cycles.append(_cycle_within(graph, component))
    return sorted(cycles)


def _strongly_connected(graph: ImportGraph) -> list[set[str]]:
    """Tarjan's algorithm, iterative so deep chains do not hit the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(graph.successors(start)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    components.append(_pop_component(stack, on_stack, node))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph.successors(child))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def _pop_component(stack: list[str], on_stack: set[str], root: str) -> set[str]:
    component = set()
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.add(member)
        if member == root:
            return component


def _cycle_within(graph: ImportGraph, component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in graph.successors(node):
                if child == start:
                    return paths[node] + [start]
                if child in component and child not in paths:
                    paths[child] = paths[node] + [child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def is_cli(module: str) -> bool:
    """kernelevo.cli and anything under it."""
    parts = module.split(".")
    return len(parts) > 1 and parts[1] == "cli"


def cli_imports(graph: ImportGraph) -> list[tuple[str, str]]:
    """Imports of a CLI module by a module outside the CLI."""
    return sorted((s, t) for s, t in graph.edges if is_cli(t) and not is_cli(s))


def layer_of(module: str) -> int:
    """The layer of the longest pattern matching the module; -1 if none does."""
    matches = [(len(pattern), layer) for layer, patterns in enumerate(LAYERS)
               for pattern in patterns if fnmatch.fnmatchcase(module, pattern)]
    return max(matches)[1] if matches else -1


def upward_imports(graph: ImportGraph) -> list[tuple[str, str]]:
    """Imports of a module in a higher layer than the importer's."""
    return sorted((s, t) for s, t in graph.edges if layer_of(t) > layer_of(s))


def side_of(module: str) -> str | None:
    """The side of an evaluate/ module by its longest matching pattern; None outside them."""
    matches = [(len(pattern), side) for side, patterns in SIDES.items()
               for pattern in patterns if fnmatch.fnmatchcase(module, pattern)]
    return max(matches)[1] if matches else None


def side_crossings(graph: ImportGraph) -> list[tuple[str, str]]:
    """Imports from one side of evaluate/ into a side it may not import, less the exceptions."""
    crossings = []
    for source, target in graph.edges:
        importer, imported = side_of(source), side_of(target)
        if importer and imported and imported not in SIDE_IMPORTS[importer]:
            crossings.append((source, target))
    return sorted(edge for edge in crossings if edge not in SIDE_EXCEPTIONS)


def _describe(edges: list[tuple[str, str]]) -> str:
    return "\n".join(f"  {source} -> {target}" for source, target in edges)


def test_every_module_has_a_layer():
    unplaced = [m for m in sorted(package_graph().modules) if layer_of(m) < 0]
    assert not unplaced, f"add {unplaced} to LAYERS in tests/test_import_graph.py"


def test_the_package_has_no_import_cycle():
    cycles = find_cycles(package_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_only_the_cli_imports_the_cli():
    offenders = cli_imports(package_graph())
    assert not offenders, "library modules importing the CLI:\n" + _describe(offenders)


def test_no_module_imports_a_layer_above_its_own():
    upward = upward_imports(package_graph())
    assert not upward, "imports up the layers (move the code, or the module in LAYERS):\n" \
        + _describe(upward)


def test_every_evaluate_module_has_a_side():
    unsided = [m for m in sorted(package_graph().modules)
               if m.startswith("kernelevo.evaluate.") and side_of(m) is None]
    assert not unsided, f"add {unsided} to SIDES in tests/test_import_graph.py"


def test_no_side_of_evaluate_imports_a_side_it_may_not():
    crossings = side_crossings(package_graph())
    assert not crossings, "imports across evaluate/'s sides (move the code, or name the " \
        "exception and its reason in SIDE_EXCEPTIONS):\n" + _describe(crossings)


def test_every_side_exception_is_still_an_import():
    stale = sorted(set(SIDE_EXCEPTIONS) - package_graph().edges)
    assert not stale, f"SIDE_EXCEPTIONS names imports that are gone: {stale}"


def test_side_crossings_are_found():
    edges = {("kernelevo.evaluate.analysis.a", "kernelevo.evaluate.child.b"),
             ("kernelevo.evaluate.child.b", "kernelevo.evaluate.parent.c"),
             ("kernelevo.evaluate.parent.c", "kernelevo.evaluate.analysis.a"),
             ("kernelevo.evaluate.shared.d", "kernelevo.evaluate.analysis.a"),
             ("kernelevo.evaluate.parent.session", "kernelevo.evaluate.child.worker")}
    graph = ImportGraph(frozenset(m for edge in edges for m in edge), frozenset(edges))
    assert side_crossings(graph) == [
        ("kernelevo.evaluate.analysis.a", "kernelevo.evaluate.child.b"),
        ("kernelevo.evaluate.child.b", "kernelevo.evaluate.parent.c"),
        ("kernelevo.evaluate.shared.d", "kernelevo.evaluate.analysis.a")]


def test_relative_lazy_and_package_imports_are_edges(tmp_path):
    package = tmp_path / "kernelevo"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import importlib\nimportlib.import_module('kernelevo.a')\n")
    (package / "a.py").write_text("def f():\n    from kernelevo import version\n")
    (package / "version.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .b import name\n")
    (package / "sub" / "b.py").write_text("from ..version import v\nfrom . import c\n")
    (package / "sub" / "c.py").write_text("import kernelevo.version\n")
    graph = build_graph(package)
    assert graph.edges == {
        ("kernelevo", "kernelevo.a"),
        ("kernelevo.a", "kernelevo"), ("kernelevo.a", "kernelevo.version"),
        ("kernelevo.sub", "kernelevo.sub.b"), ("kernelevo.sub.b", "kernelevo.version"),
        ("kernelevo.sub.b", "kernelevo.sub"), ("kernelevo.sub.b", "kernelevo.sub.c"),
        ("kernelevo.sub.c", "kernelevo.version")}
    assert find_cycles(graph) == [["kernelevo", "kernelevo.a", "kernelevo"],
                                  ["kernelevo.sub", "kernelevo.sub.b", "kernelevo.sub"]]


def test_cli_imports_and_upward_imports_are_found():
    edges = {("kernelevo.api", "kernelevo.cli.evolve"), ("kernelevo.cli.app", "kernelevo.cli.evolve"),
             ("kernelevo.cli.app", "kernelevo.api"), ("kernelevo.config", "kernelevo.config_file")}
    graph = ImportGraph(frozenset(m for edge in edges for m in edge), frozenset(edges))
    assert cli_imports(graph) == [("kernelevo.api", "kernelevo.cli.evolve")]
    assert upward_imports(graph) == [("kernelevo.api", "kernelevo.cli.evolve"),
                                     ("kernelevo.config", "kernelevo.config_file")]


def main() -> int:
    graph = package_graph()
    cycles, offenders, upward = find_cycles(graph), cli_imports(graph), upward_imports(graph)
    crossings = side_crossings(graph)
    print(f"modules {len(graph.modules)}, edges {len(graph.edges)}, cycles {len(cycles)}, "
          f"library->CLI imports {len(offenders)}, upward imports {len(upward)}, "
          f"crossings of evaluate/'s sides {len(crossings)}")
    for cycle in cycles:
        print("cycle: " + " -> ".join(cycle))
    if offenders:
        print("library modules importing the CLI:\n" + _describe(offenders))
    if upward:
        print("imports up the layers:\n" + _describe(upward))
    if crossings:
        print("imports across evaluate/'s sides:\n" + _describe(crossings))
    return 1 if cycles or offenders or upward or crossings else 0


if __name__ == "__main__":
    sys.exit(main())


def test_keys_are_made_by_the_one_recipe():
    """Every SHA-256 key comes from cache_dir.cache_key; the compiler stand-ins, which
    run where KernelEvo is not importable, repeat the recipe (cuda/shims_*.py)."""
    source_root = Path(__file__).resolve().parents[1] / "src" / "kernelevo"
    makers = sorted(str(path.relative_to(source_root))
                    for path in source_root.rglob("*.py") if "sha256(" in path.read_text())
    assert makers == ["cache_dir.py", "evaluate/cuda/shims_host.py",
                      "evaluate/cuda/shims_nvcc.py"], makers
