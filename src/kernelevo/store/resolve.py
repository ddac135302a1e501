"""Finding a stored run from what was given: one set of rules for every command and the API.

`show`, `export`, `report`, `ui`, `evolve --resume`, `kernelevo migrate` and
the Python API all name a run the same ways, in this order: the path of a
run.db or of a run folder; a run id under the runs folder; a part of an id
that only one run's id holds. Each fails with the same words. Readers get
a read-only store (store_readonly); only `write=True` may change the file.
"""

from __future__ import annotations

from pathlib import Path

from kernelevo.errors import StoreError
from kernelevo.store.run_store import DB_NAME, RunStore

_LISTED_IDS = 20  # run ids named in an error, newest last


def database_of(path: str | Path) -> Path:
    """The run.db of a run folder, or the path itself when it is the database."""
    path = Path(path)
    return path / DB_NAME if path.is_dir() else path


def find_run(runs_dir: str | Path, run: str) -> Path:
    """The run.db that `run` names (see the module's rules); StoreError saying what to give."""
    runs_dir = Path(runs_dir)
    if not str(run).strip():
        # An empty part of an id is part of every id: it must not pick one.
        raise StoreError(f"the run given is empty: give a run id, part of one, or a run "
                         f"folder (`kernelevo runs --runs-dir {runs_dir}` lists them)")
    given = Path(run)
    if given.is_file() or (given / DB_NAME).is_file():
        return database_of(given)
    if (runs_dir / run / DB_NAME).is_file():
        return runs_dir / run / DB_NAME
    if given.is_dir():
        raise StoreError(f"no run database at {given / DB_NAME}: give a run folder (it holds "
                         f"{DB_NAME}) or a run id listed by `kernelevo runs`")
    ids = sorted(path.parent.name for path in runs_dir.glob(f"*/{DB_NAME}"))
    matches = [run_id for run_id in ids if run in run_id]
    if len(matches) == 1:
        return runs_dir / matches[0] / DB_NAME
    if not ids:
        raise StoreError(f"no run {run!r}: {runs_dir} holds no runs (set KERNELEVO_RUNS_DIR, "
                         "pass --runs-dir, or give the path to a run folder)")
    listed = matches or ids
    named = ", ".join(listed[-_LISTED_IDS:])
    more = f" and {len(listed) - _LISTED_IDS} older" if len(listed) > _LISTED_IDS else ""
    why = f"{run!r} matches several runs" if matches else f"no run {run!r} in {runs_dir}"
    raise StoreError(f"{why}: give one of {named}{more}")


def open_run(runs_dir: str | Path, run: str, *, write: bool = False) -> RunStore:
    """The run `run` names, read-only unless `write` (which migrates an older file)."""
    path = find_run(runs_dir, run)
    return RunStore.open(path) if write else RunStore.read(path)
