"""`kernelevo memory list | show | forget | export | import`: what runs remember."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kernelevo.cli.options import CONFIG_OPTION, EXIT_BAD_INPUT, fail, out
from kernelevo.errors import KernelEvoError
from kernelevo.paths import read_text_file

memory_app = typer.Typer(no_args_is_help=True, help="What runs remember for similar tasks "
                         "(docs/memory.md): list, show, forget, export, import.")
STORE_OPTION = typer.Option(None, "--store", help="the memory file (default: [memory] path "
                            "of --config, else the cache folder's memory.db)")
TASK_ARGUMENT = typer.Argument(..., help="a remembered task: its key, a prefix of it, or its "
                               "name (`kernelevo memory list` shows them)")


def _open(store: Optional[Path], config_file: Optional[str]) -> Any:
    from kernelevo.config_file import memory_config, resolve
    from kernelevo.memory.settings import store_path
    from kernelevo.memory.store import MemoryStore

    path = store or store_path(memory_config(resolve(config_file)))
    return MemoryStore(path)


def _matches(memory: Any, task: str) -> list[Any]:
    found = memory.find_tasks(task)
    if not found:
        out.print(f"no remembered task is {escape(task)!r} in {memory.path}: "
                  "`kernelevo memory list` shows the keys and names")
        raise typer.Exit(EXIT_BAD_INPUT)
    return found


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")


@memory_app.command("list")
def list_command(store: Optional[Path] = STORE_OPTION, config_file: Optional[str] = CONFIG_OPTION,
                 as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The remembered tasks, most recent first."""
    try:
        with _open(store, config_file) as memory:
            rows = [(task, memory.counts(task.key)) for task in memory.tasks()]
            path = memory.path
    except KernelEvoError as exc:
        fail(exc)
    if as_json:
        out.print_json(json.dumps([{"key": t.key, "name": t.name, "runs": t.runs,
                                    "signature": json.loads(t.signature.to_json()), **counts}
                                   for t, counts in rows]))
        return
    table = Table(title=f"memory {path}")
    for column in ("key", "task", "signature", "runs", "kernels", "edits", "fixes", "last seen"):
        table.add_column(column)
    for task, counts in rows:
        table.add_row(task.key, escape(task.name), escape(task.signature.describe()),
                      str(task.runs), str(counts["kernels"]), str(counts["edits"]),
                      str(counts["fixes"]), _when(task.last_seen))
    out.print(table if rows else f"memory {path}: nothing remembered yet")


@memory_app.command("show")
def show_command(task: str = TASK_ARGUMENT, store: Optional[Path] = STORE_OPTION,
                 config_file: Optional[str] = CONFIG_OPTION,
                 source: bool = typer.Option(False, "--source", help="print kernels' sources"),
                 as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """A remembered task: its signature, kernels, edits that paid and fixes."""
    from kernelevo.memory.transfer import export_memory

    try:
        with _open(store, config_file) as memory:
            found = _matches(memory, task)
            data = export_memory(memory, [t.key for t in found])
    except KernelEvoError as exc:
        fail(exc)
    if as_json:
        out.print_json(json.dumps(data["tasks"]))
        return
    for item in data["tasks"]:
        _print_task(item, source)


def _print_task(item: dict[str, Any], source: bool) -> None:
    from kernelevo.memory.signature import Signature

    signature = Signature.from_json(json.dumps(item["signature"]))
    out.print(f"[bold]{escape(item['name'])}[/] {item['key']}: {escape(signature.describe())}; "
              f"{item['runs']} run(s)")
    for kernel in item["kernels"]:
        speed = ("untimed" if kernel["speedup"] is None else
                 f"{kernel['speedup']:.2f}x vs eager ({kernel['measure']}) {kernel['gpu']}")
        out.print(f"  kernel {kernel['backend']}, {escape(speed)}; run {kernel['run_id']} "
                  f"candidate {kernel['candidate_id']}", markup=False)
        if source:
            out.print(kernel["source"], markup=False)
    for edit in item["edits"]:
        out.print(f"  edit gained {edit['gain']:.2f}x (run {edit['run_id']}, "
                  f"{edit['child_id']}):\n{edit['diff']}", markup=False)
    for fix in item["fixes"]:
        out.print(f"  fix of {fix['reason']} (seen {fix['occurrences']} time(s), run "
                  f"{fix['run_id']}):\n{fix['diff']}", markup=False)


@memory_app.command("forget")
def forget_command(task: str = TASK_ARGUMENT, store: Optional[Path] = STORE_OPTION,
                   config_file: Optional[str] = CONFIG_OPTION) -> None:
    """Remove a remembered task (every one its name or key prefix matches) and all it holds."""
    try:
        with _open(store, config_file) as memory:
            for found in _matches(memory, task):
                removed = memory.forget(found.key)
                out.print(f"forgot {escape(found.name)} {found.key}: {removed['kernels']} "
                          f"kernel(s), {removed['edits']} edit(s), {removed['fixes']} fix(es)")
    except KernelEvoError as exc:
        fail(exc)


@memory_app.command("export")
def export_command(output: Path = typer.Option(..., "-o", "--output", help="JSON file to write"),
                   tasks: list[str] = typer.Argument(None, help="tasks to export (default: all)"),
                   force: bool = typer.Option(False, "--force", help="overwrite the output "
                                              "file if it exists"),
                   store: Optional[Path] = STORE_OPTION,
                   config_file: Optional[str] = CONFIG_OPTION) -> None:
    """Write the memory (or some tasks of it) to a JSON file, for `memory import` elsewhere."""
    from kernelevo.memory.transfer import write_export
    from kernelevo.run.view import refuse_to_overwrite

    try:
        if not force:
            refuse_to_overwrite(output)
        with _open(store, config_file) as memory:
            keys = [t.key for name in tasks for t in _matches(memory, name)] if tasks else None
            count = write_export(memory, output, keys)
    except KernelEvoError as exc:
        fail(exc)
    except OSError as exc:
        fail(KernelEvoError(f"cannot write {output}: {exc.strerror or exc}: give -o a file "
                            "path you can write to"))
    out.print(f"exported {count} task(s) to {output}", markup=False)


@memory_app.command("import")
def import_command(path: Path = typer.Argument(..., help="a file `memory export` wrote"),
                   store: Optional[Path] = STORE_OPTION,
                   config_file: Optional[str] = CONFIG_OPTION) -> None:
    """Merge an exported memory into this one (what is here already stays)."""
    from kernelevo.memory.transfer import import_memory

    fix = "give a file written by `kernelevo memory export`"
    try:
        # Checked first: a named pipe would block the read, a folder fail it obscurely.
        data = json.loads(read_text_file(path, "memory export", fix))
    except KernelEvoError as exc:
        fail(exc)
    except ValueError as exc:
        fail(KernelEvoError(f"memory export {path} is not JSON ({exc}): {fix}"))
    except RecursionError:
        fail(KernelEvoError(f"memory export {path} nests its JSON too deeply to be an export: "
                            f"{fix}"))
    try:
        with _open(store, config_file) as memory:
            counts = import_memory(memory, data, str(path))
    except KernelEvoError as exc:
        fail(exc)
    out.print(f"imported {counts['tasks']} task(s): {counts['kernels']} new kernel(s), "
              f"{counts['edits']} edit(s), {counts['fixes']} fix(es)", markup=False)
