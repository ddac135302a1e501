"""A memory store as a JSON file and back: to move what was learned to another machine."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelevo.errors import MemoryStoreError
from kernelevo.memory.signature import Signature
from kernelevo.memory.store import EditMemory, FixMemory, KernelMemory, MemoryStore

FORMAT = "kernelevo-memory"
FORMAT_VERSION = 1


def export_memory(memory: MemoryStore, keys: list[str] | None = None) -> dict[str, Any]:
    """The remembered tasks (all, or those of `keys`) with their kernels, edits and fixes."""
    tasks = [task for task in memory.tasks() if keys is None or task.key in keys]
    return {"format": FORMAT, "version": FORMAT_VERSION, "tasks": [{
        "key": task.key, "name": task.name, "signature": json.loads(task.signature.to_json()),
        "runs": task.runs,
        "kernels": [_without(asdict(k), "task_key", "id") for k in memory.kernels(task.key)],
        "edits": [_without(asdict(e), "task_key") for e in memory.edits(task.key)],
        "fixes": [_without(asdict(f), "task_key") for f in memory.fixes(task.key)],
    } for task in tasks]}


def write_export(memory: MemoryStore, path: Path, keys: list[str] | None = None) -> int:
    """Write the export to `path`; how many tasks it holds."""
    data = export_memory(memory, keys)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return len(data["tasks"])


def import_memory(memory: MemoryStore, data: Any, where: str = "the import") -> dict[str, int]:
    """Merge an export into `memory` (what it already holds stays); counts added by kind."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MemoryStoreError(f"{where} is not a KernelEvo memory export (no \"format\": "
                               f"\"{FORMAT}\"): give a file written by `kernelevo memory export`")
    if data.get("version", 0) > FORMAT_VERSION:
        raise MemoryStoreError(f"{where} is export version {data.get('version')}; this "
                               f"KernelEvo reads version {FORMAT_VERSION}: upgrade KernelEvo")
    counts = {"tasks": 0, "kernels": 0, "edits": 0, "fixes": 0}
    try:
        for task in data.get("tasks", []):
            _import_task(memory, task, counts)
    except (KeyError, TypeError, ValueError) as exc:
        raise MemoryStoreError(f"{where} is damaged ({type(exc).__name__}: {exc}): export "
                               "it again with `kernelevo memory export`") from exc
    return counts


def _import_task(memory: MemoryStore, task: dict[str, Any], counts: dict[str, int]) -> None:
    key = task["key"]
    signature = Signature.from_json(json.dumps(task["signature"]))
    memory.note_task(key, task["name"], signature, runs_at_least=int(task.get("runs", 0)))
    counts["tasks"] += 1
    for kernel in task.get("kernels", []):
        counts["kernels"] += memory.add_kernel(KernelMemory(task_key=key, **kernel))
    for edit in task.get("edits", []):
        memory.add_edit(EditMemory(task_key=key, **edit))
        counts["edits"] += 1
    for fix in task.get("fixes", []):
        memory.add_fix(FixMemory(task_key=key, **fix))
        counts["fixes"] += 1


def _without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in keys}
