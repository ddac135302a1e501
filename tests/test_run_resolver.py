"""One run resolver: every command and the API find a run by the same rules and words."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernelevo
from kernelevo.candidate import Candidate
from kernelevo.cli.app import app
from kernelevo.errors import ConfigError, KernelEvoError
from kernelevo.evaluate.verdict import verdict_for
from kernelevo.store.resolve import find_run
from kernelevo.store.run_store import RunStore

TASK = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n" \
       "        return x\n"
KERNEL = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
         "        return x\n"


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300", "NO_COLOR": "1"})


def said(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two runs of one task (a part of an id can match both) and one of another."""
    root = tmp_path / "runs"
    for run_id in ("20261201-100000-softmax-aaaa", "20261201-110000-softmax-bbbb",
                   "20261201-120000-gemm-cccc"):
        with RunStore.create(root, run_id.split("-")[2], TASK, {}, run_id=run_id) as store:
            seed = store.add_candidate(Candidate(KERNEL, "pytorch", origin="seed"))
            store.record_verdict(seed, verdict_for("passed", speedup_vs_eager=1.0))
    return root


def errors_everywhere(runs: Path, run: str, tmp_path: Path) -> set[str]:
    """The error each command and the API give for `run`, whitespace made single."""
    where = ("--runs-dir", str(runs))
    done = [cli("show", run, *where), cli("show", "--json", run, *where),
            cli("export", run, "--best", "--no-recheck", "-o", str(tmp_path / "x.py"), *where),
            cli("report", run, "-o", str(tmp_path / "r.html"), *where),
            cli("migrate", run, *where),
            cli("evolve", "--resume", run, "--runs-dir", str(runs))]
    for result in done:
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    messages = {said(result.output).removeprefix("error: ") for result in done}
    with pytest.raises(KernelEvoError) as raised:
        kernelevo.export(run, tmp_path / "api.py", runs_dir=runs, recheck=False)
    return messages | {said(str(raised.value))}


@pytest.mark.parametrize("run, words", [
    ("nothing-like-it", "no run 'nothing-like-it' in"),
    ("softmax", "'softmax' matches several runs: give one of 20261201-100000-softmax-aaaa, "
                "20261201-110000-softmax-bbbb"),
    ("  ", "the run given is empty"),
])
def test_every_command_and_the_api_refuse_a_run_in_the_same_words(runs, tmp_path, run, words):
    (message,) = errors_everywhere(runs, run, tmp_path)
    assert words in message


def test_a_run_is_found_by_its_folder_its_database_its_id_or_a_unique_part(runs):
    database = runs / "20261201-120000-gemm-cccc" / "run.db"
    for given in (str(database), str(database.parent), "20261201-120000-gemm-cccc", "gemm"):
        assert find_run(runs, given) == database
    with pytest.raises(KernelEvoError, match="no run database at"):
        find_run(runs, str(runs))  # a folder, but not a run's


def test_the_api_names_its_own_arguments_and_the_cli_its_flags(runs, tmp_path):
    taken = tmp_path / "taken.py"
    taken.write_text("# someone's file\n")
    with pytest.raises(ConfigError) as raised:
        kernelevo.export("gemm", taken, runs_dir=runs, recheck=False)
    assert "force=True" in str(raised.value) and "--force" not in str(raised.value)
    with pytest.raises(ConfigError) as no_best:  # only the PyTorch seed: no best to export
        kernelevo.export("gemm", tmp_path / "new.py", runs_dir=runs, recheck=False)
    assert "candidate='c0001'" in str(no_best.value) and "--candidate" not in str(no_best.value)
    flagged = cli("export", "gemm", "--best", "--no-recheck", "-o", str(taken),
                  "--runs-dir", str(runs))
    assert "pass --force" in said(flagged.output) and "force=True" not in flagged.output
    assert taken.read_text() == "# someone's file\n"
