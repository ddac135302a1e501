"""`kernelevo runs`, `show RUN` and `export RUN`: plain functions the CLI calls."""

from __future__ import annotations

import ast
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import ConfigError, StoreError
from kernelevo.export_guard import GUARD_SOURCE, needs_guard
from kernelevo.parsing import parse_source
from kernelevo.paths import check_folder
from kernelevo.schema import settings_from_dict
from kernelevo.evaluate.verdict import Verdict
from kernelevo.render import fitted_table, print_verdict
from kernelevo.store.lock import status_now
from kernelevo.store.listing import folders_without_runs, list_runs
from kernelevo.store.resolve import open_run
from kernelevo.store.run_store import Ranking, RunInfo, RunStore, StoredCandidate
from kernelevo.task import find_constants, task_from_source

TOP_CANDIDATES = 10
# Entry points of a KernelBench file besides the model: the harness calls these.
TASK_ENTRY_POINTS = ("get_inputs", "get_init_inputs")
SECTION_RULE = "# " + "-" * 76
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORTS = (ast.Import, ast.ImportFrom)


def default_runs_dir() -> Path:
    """KERNELEVO_RUNS_DIR, else ./runs; read at call time so tests and shells can change it."""
    return Path(os.environ.get("KERNELEVO_RUNS_DIR") or "runs")


def check_runs_dir(runs_dir: Path, missing_ok: bool = False) -> Path:
    """`runs_dir` if it is a folder (or, `missing_ok`, none yet); else ConfigError naming it."""
    return check_folder(runs_dir, "the runs folder", "give --runs-dir (or KERNELEVO_RUNS_DIR) "
                        "the folder that holds the runs", ConfigError, missing_ok=missing_ok)


def not_runs_note(runs_dir: Path, shown: int = 5) -> str | None:
    """A line naming the folders under `runs_dir` that hold no run.db, or None if there are none."""
    names = folders_without_runs(runs_dir)
    if not names:
        return None
    listed = ", ".join(names[:shown]) + (f" and {len(names) - shown} more"
                                         if len(names) > shown else "")
    return (f"{len(names)} folder(s) in {runs_dir} hold no run.db and are not runs: {listed} "
            "(a run's folder holds its run.db; a run copied without it cannot be read)")


def eval_config_from_run(config: Mapping[str, Any]) -> EvalConfig:
    """Rebuild the run's EvalConfig from its stored JSON; absent settings take defaults."""
    # Settings a newer or older KernelEvo wrote that this one lacks are dropped,
    # so an old run can still be shown and exported.
    return settings_from_dict(EvalConfig, config.get("eval") or {}, "eval", drop_unknown=True)


RUN_COLUMNS = ("run", "task", "status", "created", "candidates", "best vs eager",
               "best vs compile", "tokens", "cost")
_LEFT_COLUMNS = 5  # the rest are numbers, aligned right
# Which columns a narrow terminal keeps first: the run id names its task and date.
_RUN_PRIORITY = (0, 2, 4, 5, 8, 6, 7, 1, 3)


def list_runs_table(console: Console, runs_dir: Path, plain: bool | None = None) -> int:
    """Print one row per run under `runs_dir`, oldest first; returns how many.

    `plain` (default: when the console is not a terminal) prints aligned text
    as wide as it needs: a rich table fits its width by cutting cells, and a
    script reading the output needs whole run ids.
    """
    summaries = list_runs(runs_dir)
    if not summaries:
        console.print(f"no runs in {escape(str(runs_dir))}: start one with "
                      "`kernelevo evolve TASK`, or point KERNELEVO_RUNS_DIR at the folder "
                      "that holds them")
        return 0
    rows = [_run_row(summary.run_id, summary.path, summary.problem) for summary in summaries]
    if not console.is_terminal if plain is None else plain:
        _print_plain(console, [[Text.from_markup(cell).plain for cell in row] for row in rows])
        return len(summaries)
    table, left_out = fitted_table(console, RUN_COLUMNS, rows, _RUN_PRIORITY, _LEFT_COLUMNS)
    console.print(table)
    if left_out:
        console.print(f"[dim]left out at this width: {', '.join(left_out)}; --json has all[/]")
    return len(summaries)


def _print_plain(console: Console, rows: list[list[str]]) -> None:
    """Columns padded to their widest cell, two spaces apart; never wrapped or cut."""
    lines = [list(RUN_COLUMNS)] + rows
    widths = [max(len(line[i]) for line in lines) for i in range(len(RUN_COLUMNS))]
    for line in lines:
        cells = [cell.ljust(width) if i < _LEFT_COLUMNS else cell.rjust(width)
                 for i, (cell, width) in enumerate(zip(line, widths))]
        console.print("  ".join(cells).rstrip(), markup=False, highlight=False, crop=False,
                      soft_wrap=True)


def _run_row(run_id: str, path: Path, problem: str) -> list[str]:
    unreadable = [run_id, escape(problem), "[red]unreadable[/]"] + [""] * 6
    if problem:
        return unreadable
    try:
        with RunStore.read(path) as store:
            info, totals, best = store.run_info(), store.totals(), store.briefs.best()
    except (StoreError, sqlite3.Error) as exc:  # deleted or corrupted since it was listed
        unreadable[1] = escape(str(exc))
        return unreadable
    total = sum(totals.candidates_by_status.values())
    evaluated = total - totals.candidates_by_status.get("unevaluated", 0)
    return [info.id, escape(info.task_name), status_now(info.status, path), _when(info.created_at),
            f"{evaluated}/{total}",
            # Both columns are the one best kernel's, never two different candidates.
            _speedup(best.speedup_vs_eager if best else None),
            _speedup(best.speedup_vs_compile if best else None),
            tokens_text(totals.tokens_in + totals.tokens_out, totals.estimated_tokens),
            _usd(totals.cost_usd)]


def migrate_run(runs_dir: Path, run: str) -> str:
    """Bring a run made by an older KernelEvo up to date (readers never do); says what changed."""
    with open_run(runs_dir, run, write=True) as store:
        added = store.upgraded
    if not added:
        return f"run {store.run_id} is up to date: nothing to migrate"
    return f"migrated run {store.run_id} in {store.path}: {'; '.join(added)}"


def tokens_text(tokens: int, estimated_tokens: int) -> str:
    """Tokens charged, with the part that is an estimate (not the server's count) named apart."""
    return f"{tokens:,}" + (f" ({estimated_tokens:,} est.)" if estimated_tokens else "")


def show_run(console: Console, runs_dir: Path, run: str) -> None:
    """Print a run's summary, spend, its best candidates and the best one's verdict."""
    with open_run(runs_dir, run) as store:
        # The ranking's counts and its first rows from indexes; only those rows in full.
        info, totals = store.run_info(), store.totals()
        ranking = store.briefs.ranking(TOP_CANDIDATES)
        top = [store.candidate(entry.id) for entry in ranking.kernels]
    status = status_now(info.status, Path(store.path).parent)
    console.print(f"[bold]run {info.id}[/]  task {escape(info.task_name)}  status {status}")
    if status != info.status:
        console.print(f"no process drives it (run.db says {info.status}: its driver was killed "
                      f"or its machine stopped); continue it with --resume {info.id}")
    finished = f", finished {_when(info.finished_at)}" if info.finished_at else ""
    console.print(f"created {_when(info.created_at)}{finished}")
    for section, text in _config_essentials(info.config).items():
        console.print(f"{section}: {text}")
    in_flight = (f" ({totals.llm_calls_in_flight} in flight, up to "
                 f"{_usd(totals.in_flight_cost_bound_usd)})" if totals.llm_calls_in_flight else "")
    console.print(f"tokens: {totals.tokens_in:,} in, {totals.tokens_out:,} out; "
                  f"cost {_usd(totals.cost_usd)}; LLM calls {totals.llm_calls}{in_flight}")
    if totals.estimated_tokens or totals.estimated_usd:
        console.print(f"  of which billed {totals.billed_tokens:,} tokens; estimated "
                      f"{totals.estimated_tokens:,} tokens, {_usd(totals.estimated_usd)} "
                      "(usage the server did not report, estimated from the text; calls cut "
                      "off after sending, charged their worst case; or usage a server "
                      "reported wrong)")
    by_status = ", ".join(f"{status} {count}"
                          for status, count in sorted(totals.candidates_by_status.items()))
    count = sum(totals.candidates_by_status.values())
    console.print(f"candidates: {count} ({by_status or 'none yet'})")
    _print_best(console, ranking, top)


def _print_best(console: Console, ranking: Ranking, ranked: list[StoredCandidate]) -> None:
    """The baseline on its own line, then the passing kernels and the best one's verdict."""
    never = "; the PyTorch reference, never the best" if ranking.baseline else ""
    console.print(f"baseline: {escape(ranking.baseline_text())}{never}")
    if ranking.best is None:
        console.print(ranking.no_best_message())
        return
    console.print(_top_table(ranked[:TOP_CANDIDATES], ranking.passing))
    if not ranking.timed:
        console.print("no timings (judged without a GPU): every passing kernel scores alike, "
                      "so the best is the first one judged")
    print_verdict(console, f"best {ranked[0].id}", _verdict(ranked[0]))


def _config_essentials(config: Mapping[str, Any]) -> dict[str, str]:
    """One line per config section: the settings that shape results, no secrets."""
    lines = {}
    try:
        evaluation = eval_config_from_run(config)
        lines["eval"] = (f"device {evaluation.device}, {evaluation.precision}, policy "
                         f"{evaluation.policy}, {evaluation.input_sets} input sets, baselines "
                         f"{', '.join(evaluation.timing.baselines) or 'none'}")
    except (ConfigError, TypeError) as exc:
        lines["eval"] = f"[red]unreadable[/] ({escape(str(exc))})"
    for section in ("search", "llm", "budget"):
        values = config.get(section) or {}
        # Scalars only, and never anything that could name a credential.
        shown = [f"{key} {value}" for key, value in sorted(values.items())
                 if isinstance(value, (str, int, float, bool)) and value != ""
                 and not any(word in key.lower() for word in ("key", "secret", "password"))]
        if shown:
            lines[section] = escape(", ".join(shown))
    return lines


def _verdict(stored: StoredCandidate) -> Verdict:
    """A ranked candidate's verdict: the ranking holds judged candidates only."""
    if stored.verdict is None:
        raise StoreError(f"candidate {stored.id} is ranked but has no verdict")
    return stored.verdict


def _top_table(top: list[StoredCandidate], passed: int) -> Table:
    table = Table(title=f"top {len(top)} of {passed} passing custom kernels",
                  header_style="bold")
    for column in ("candidate", "vs eager", "vs compile", "runtime", "origin", "backend",
                   "parents"):
        table.add_column(column)
    for stored in top:
        verdict = _verdict(stored)
        timing = verdict.timings.get("candidate")
        table.add_row(stored.id, _speedup(verdict.speedup_vs_eager),
                      _speedup(verdict.speedup_vs_compile),
                      f"{timing.median_ms:.4f} ms" if timing else "-",
                      stored.candidate.origin, stored.candidate.backend,
                      ", ".join(stored.candidate.parent_ids) or "-")
    return table


@dataclass(frozen=True)
class Wording:
    """How an error names a choice: the command line's flags, or the API's arguments."""

    force: str = "pass --force"
    best: str = "--best"
    candidate: str = "--candidate {id}"
    elsewhere: str = "give another file with -o"


CLI_WORDS = Wording()
API_WORDS = Wording(force="pass force=True", best="best=True", candidate="candidate={id!r}",
                    elsewhere="give another path")


def export_candidate(runs_dir: Path, run: str, output: Path, candidate_id: str | None,
                     best: bool, recheck: bool = True,
                     progress: Callable[[str], None] | None = None,
                     force: bool = False,
                     words: Wording = CLI_WORDS) -> tuple[Path, Verdict | None]:
    """Write a candidate as a standalone KernelBench file; with `recheck`, judge it afresh.

    An existing `output` is replaced only with `force`. Errors name the
    choices in `words`: the flags, or the API's arguments.
    """
    if not force:
        refuse_to_overwrite(Path(output), words)
    if best == (candidate_id is not None):
        raise ConfigError(f"say which candidate to export: {words.best}, or "
                          f"{words.candidate.format(id='ID')} (ids are listed by "
                          "`kernelevo show RUN`), not both")
    with open_run(runs_dir, run) as store:
        info = store.run_info()
        stored = (store.candidate(candidate_id) if candidate_id
                  else _best_or_refuse(store, words))
    text = standalone_source(info, stored)
    verdict = _recheck(info, stored, progress) if recheck else None
    _write_atomically(Path(output), text, replace=force, words=words)
    return Path(output), verdict


def _best_or_refuse(store: RunStore, words: Wording) -> StoredCandidate:
    ranking = store.briefs.ranking(1)
    if ranking.best is None:
        raise ConfigError(_no_best_to_export(store.run_id, ranking, words))
    return store.candidate(ranking.best.id)


def _no_best_to_export(run_id: str, ranking: Ranking, words: Wording = CLI_WORDS) -> str:
    message = f"run {run_id} has no best to export, {ranking.no_best_message()}"
    any_one = words.candidate.format(id="ID")
    if ranking.baseline is None:
        return (f"{message}. Export a candidate anyway with {any_one} "
                "(see `kernelevo show RUN`)")
    return (f"{message}; the baseline {ranking.baseline_text()} is the PyTorch reference, never "
            f"the best. Export it anyway with {words.candidate.format(id=ranking.baseline.id)},"
            f" or any candidate with {any_one} (see `kernelevo show RUN`)")


def _recheck(info: RunInfo, stored: StoredCandidate, progress: Callable[[str], None] | None):
    from kernelevo.evaluate.parent.judge import Judge  # here, so `runs` and `show` need no torch

    task = task_from_source(info.task_source, name=info.task_name)
    judge = Judge(task, eval_config_from_run(info.config), progress=progress)
    return judge.evaluate(Candidate(source=stored.candidate.source,
                                    backend=stored.candidate.backend, name=stored.id))


def standalone_source(info: RunInfo, stored: StoredCandidate) -> str:
    """The candidate's file, then the task's sizes and input functions, so it runs alone."""
    candidate = stored.candidate
    parents = ", ".join(candidate.parent_ids) or "none"
    header = [f"# KernelEvo export of run {info.id}, task {info.task_name}",
              f"# candidate {stored.id}: origin {candidate.origin}, backend {candidate.backend},"
              f" parents {parents}",
              f"# recorded verdict: {_verdict_summary(stored.verdict)}", ""]
    support = ["", "", SECTION_RULE, f"# From the task {info.task_name}: its sizes and inputs"
               " (the reference Model is left out).", SECTION_RULE, "",
               task_support_source(info.task_source, candidate.source)]
    if stored.verdict is not None and needs_guard(stored.verdict.flags):
        support.append(GUARD_SOURCE)
    # A candidate chosen by id is written as stored, even if it does not parse:
    # the user asked for it, often to see why it failed.
    return "\n".join(header) + candidate.source.rstrip("\n") + "\n" + "\n".join(support)


def task_support_source(task_source: str, candidate_source: str = "") -> str:
    """The task's int constants and input functions, with every module-level name they use."""
    tree = parse_source(task_source)
    binders: dict[str, ast.stmt] = {}
    for node in tree.body:
        for name in _bound_names(node):
            binders[name] = node
    wanted = list(TASK_ENTRY_POINTS) + list(find_constants(tree))
    chosen: set[int] = set()
    while wanted:
        binder = binders.get(wanted.pop())
        # The reference Model stays out: the export must stand on ModelNew alone.
        if binder is None or id(binder) in chosen or "Model" in _bound_names(binder):
            continue
        chosen.add(id(binder))
        wanted.extend(n.id for n in ast.walk(binder)
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    repeated = _imports_of(candidate_source)  # the candidate already imports these
    kept = [node for node in tree.body if id(node) in chosen and ast.unparse(node) not in repeated]
    lines, parts = task_source.splitlines(), []
    for before, node in zip([None, *kept], kept):
        parts.append(_gap(before, node) + _statement_text(lines, node))
    return "".join(parts) + "\n"


def _imports_of(source: str) -> set[str]:
    try:
        tree = parse_source(source)
    except SyntaxError:
        return set()
    return {ast.unparse(n) for n in tree.body if isinstance(n, _IMPORTS)}


def _gap(before: ast.stmt | None, after: ast.stmt) -> str:
    """PEP 8 spacing: two blank lines around definitions, one between kinds of statement."""
    if before is None:
        return ""
    if isinstance(before, _DEFINITIONS) or isinstance(after, _DEFINITIONS):
        return "\n\n\n"
    return "\n" if isinstance(before, _IMPORTS) == isinstance(after, _IMPORTS) else "\n\n"


def _bound_names(node: ast.stmt) -> list[str]:
    """Module-level names a statement defines; `from __future__` binds none that move."""
    if isinstance(node, ast.Import):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.module == "__future__":  # legal only at the top of a file
            return []
        return [alias.asname or alias.name for alias in node.names]
    if isinstance(node, _DEFINITIONS):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else (
        [node.target] if isinstance(node, ast.AnnAssign) else [])
    return [n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]


def _statement_text(lines: list[str], node: ast.stmt) -> str:
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno] + [d.lineno for d in decorators])
    return "\n".join(lines[first - 1:node.end_lineno])


def refuse_to_overwrite(output: Path, words: Wording = CLI_WORDS) -> None:
    """ConfigError when `output` is an existing file: overwriting it takes --force."""
    if output.exists() and not output.is_dir():
        raise ConfigError(f"{output} exists: {words.force} to overwrite it, or "
                          f"{words.elsewhere}")


def _write_atomically(output: Path, text: str, replace: bool = False,
                      words: Wording = CLI_WORDS) -> None:
    """Write through a temporary file in the same folder, so `output` is never half written.

    Without `replace`, a file that appeared at `output` meanwhile is kept: the
    temporary file is linked in, which fails if the name is taken.
    """
    if output.is_dir():
        raise ConfigError(f"{output} is a folder: give a file name such as {output / 'best.py'}")
    temporary = None
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=output.parent, prefix=f".{output.name}.",
                                         suffix=".tmp", delete=False) as handle:
            temporary = Path(handle.name)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.chmod(0o644)  # mkstemp makes 0600; an exported kernel is meant to be shared
        _move_into_place(temporary, output, replace)
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        if isinstance(exc, FileExistsError) and output.exists():
            refuse_to_overwrite(output, words)
        raise ConfigError(f"cannot write {output}: {exc}") from exc


def _move_into_place(temporary: Path, output: Path, replace: bool) -> None:
    if replace:
        os.replace(temporary, output)
        return
    try:
        os.link(temporary, output)  # atomic, and fails if the name is taken
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: check, then rename
        if output.exists():
            raise FileExistsError(output) from None
        os.replace(temporary, output)
        return
    temporary.unlink()


def _verdict_summary(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not evaluated"
    timing = verdict.timings.get("candidate")
    parts = [f"{verdict.status} ({verdict.reason})",
             verdict.speedup_vs_eager and f"{verdict.speedup_vs_eager:.2f}x vs eager",
             verdict.speedup_vs_compile and f"{verdict.speedup_vs_compile:.2f}x vs torch.compile",
             timing and f"{timing.median_ms:.4f} ms median"]
    return ", ".join(part for part in parts if part)


def _speedup(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def _usd(value: float) -> str:
    return f"${value:.4f}" if value < 1 else f"${value:.2f}"


def _when(timestamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else "-"
