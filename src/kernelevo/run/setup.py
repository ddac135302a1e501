"""Building an evolve run from flags and a config file: store, judges, budget, model pool."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import random
import re
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kernelevo.config_file as config_file
from kernelevo.budget import Budget
from kernelevo.candidate import Candidate, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.config_file import Effective, RunConfig
from kernelevo.errors import ConfigError, MemoryStoreError
from kernelevo.llm.openai_compat import ClientConfig
from kernelevo.logs import get_logger
from kernelevo.memory.recall import Recall
from kernelevo.memory.run_memory import RECALL_EVENT, RunMemory
from kernelevo.memory.settings import MemoryConfig
from kernelevo.run.resume import Given, Overrides, changed_settings, refuse, split_given
from kernelevo.search.config import SearchConfig
from kernelevo.store.resolve import open_run
from kernelevo.store.run_store import RunStore
from kernelevo.task import Task, task_from_source

log = get_logger(__name__)

DEFAULT_RUNS_DIR = "runs"
DEFAULT_KEY_VARIABLE = "OPENAI_API_KEY"
SEED_ROLE = "starting candidate (--seed)"  # how errors name a --seed file
# The [llm] keys that tune each model's client: ClientConfig's fields but where and who.
CLIENT_SETTINGS = tuple(f.name for f in dataclasses.fields(ClientConfig)
                        if f.name not in ("base_url", "model", "api_key_env"))


@dataclass(frozen=True)
class EvolveOptions:
    """What run_evolve needs: a new run's settings, or the run to resume and what may change.

    `llm` and `budget` are the run config's [llm] and [budget] sections as
    stored (config_file.llm_settings, budget_limits).
    """

    runs_dir: Path
    eval: EvalConfig
    search: SearchConfig
    llm: dict[str, Any]
    budget: dict[str, Any]
    resume: str | None = None  # a run id or folder
    gpus: str | None = None  # as --gpus writes them: "all" or "0,1"
    overrides: Overrides = field(default_factory=dict)  # resume: settings to apply
    fixed: list[Given] = field(default_factory=list)  # resume: settings that must match
    seeds: list[Path] = field(default_factory=list)
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # not stored with the run


def evolve_options(effective: Effective, *, runs_dir: str | os.PathLike[str] = DEFAULT_RUNS_DIR,
                   resume: str | None = None, gpus: str | None = None,
                   seeds: list[Path] | None = None) -> EvolveOptions:
    """What run_evolve needs, from the effective settings (defaults, file, then flags).

    On resume, the settings the file or the flags give are split as
    run_resume.py says: `overrides` to apply, `fixed` that must match the run's.
    """
    # [memory] is not a run setting: a resume may give any (it recalls from the run's event).
    run_settings = dataclasses.replace(
        effective, values={k: v for k, v in effective.values.items() if k != "memory"},
        sources={k: v for k, v in effective.sources.items() if k != "memory"})
    overrides, fixed = split_given(run_settings) if resume else ({}, [])
    return EvolveOptions(Path(runs_dir), config_file.eval_config(effective),
                         config_file.search_config(effective),
                         config_file.llm_settings(effective),
                         config_file.budget_limits(effective), resume=resume, gpus=gpus,
                         overrides=overrides, fixed=fixed,
                         seeds=[Path(seed) for seed in seeds or []],
                         memory=config_file.memory_config(effective))


def evolve_overrides(backend: str | None = None, islands: int | None = None,
                     llm_in_flight: int | None = None,
                     models: list[str] | dict[str, float] | None = None,
                     base_url: str | None = None, api_key_env: str | None = None,
                     tokens: str | int | None = None, usd: str | float | None = None,
                     time_limit: str | float | None = None,
                     candidates: int | None = None, cluster: str | None = None,
                     cluster_slots: int | None = None,
                     no_memory: bool = False) -> dict[str, dict[str, Any]]:
    """evolve's flags (or API arguments) as overrides by table; None leaves the file's value."""
    if models:
        models = dict(models) if isinstance(models, dict) else parse_models(models)
    return {"search": {"backend": backend, "islands": islands, "llm_in_flight": llm_in_flight,
                       "cluster": cluster, "cluster_slots": cluster_slots},
            "llm": {"models": models or None, "base_url": base_url, "api_key_env": api_key_env,
                    "in_flight": llm_in_flight},
            "budget": {"tokens": tokens, "usd": usd, "time": time_limit,
                       "candidates": candidates},
            "memory": {"enabled": False if no_memory else None}}


def open_memory(config: MemoryConfig, task: Task, precision: str, backend: str,
                store: RunStore | None) -> tuple[RunMemory | None, Recall | None]:
    """The run's memory and what it recalls: recalled now for a new run, read back from
    its `memory_recalled` event on resume; (None, None) when off or not openable (logged)."""
    try:
        memory = RunMemory.open(config, task.name, task.source, precision, backend)
        if memory is None:
            return None, None
        if store is None:
            return memory, memory.recall()
    except MemoryStoreError as exc:
        log.warning("memory: %s; this run neither recalls nor records", exc)
        return None, None
    recalled = store.events(RECALL_EVENT)
    return memory, Recall.from_payload(recalled[-1].payload) if recalled else None


def reference_seed(task: Task) -> Candidate:
    """The task's own Model, renamed ModelNew: the PyTorch starting point of every run."""
    source = re.sub(r"\bModel\b", "ModelNew", task.source)
    return Candidate(source=source, backend="pytorch", name="reference", origin="seed")


def user_seeds(paths: list[Path], backend: str) -> list[Candidate]:
    seeds = []
    for path in paths:
        loaded = load_candidate(path, role=SEED_ROLE)
        if loaded.backend not in (backend, "pytorch"):
            raise ConfigError(f"starting candidate {path} is {loaded.backend}, but the run's "
                              f"backend is {backend}: pass --backend {loaded.backend}")
        seeds.append(dataclasses.replace(loaded, origin="seed"))
    return seeds


def run_config(eval_config: EvalConfig, search: SearchConfig, llm: dict[str, Any],
               budget: dict[str, Any]) -> dict[str, Any]:
    """A new run's settings in their stored form (config_file.RunConfig)."""
    return RunConfig(eval_config, search, llm, budget).to_dict()


def configs_from_run(config: dict[str, Any]) -> tuple[EvalConfig, SearchConfig]:
    """The EvalConfig and SearchConfig a stored run was started with."""
    stored = RunConfig.from_stored(config)
    return stored.eval, stored.search


def make_budget(limits: dict[str, Any], store: RunStore | None) -> Budget:
    """A budget; on resume it starts from what the run already spent."""
    budget = Budget(tokens=limits["tokens"], usd=limits["usd"],
                    candidates=limits["candidates"], wall_s=limits["wall_s"])
    if store is not None:
        store.settle_interrupted_llm_calls()
        totals = store.totals()
        produced = store.briefs.proposed_count()
        budget.restore(totals.tokens_in + totals.tokens_out, totals.cost_usd, produced,
                       store.briefs.longest_elapsed_s())
    return budget


def make_judges(task: Task, eval_config: EvalConfig, gpus: str | None,
                search: SearchConfig | None = None) -> list[Any]:
    """One judge per GPU (or one on the CPU), each confining its children to its GPU;
    with a cluster, one per job the cluster's workers can run at once."""
    if search is not None and search.cluster:
        return cluster_judges(task, eval_config, search, gpus)
    import torch

    from kernelevo.evaluate.parent.judge import Judge

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    indexes = select_gpus("all" if gpus is None else gpus, count)
    if eval_config.device == "cpu" or not count:
        log.info("one judge on the CPU (device %s, GPUs visible: %d)", eval_config.device, count)
        return [Judge(task, eval_config, standby=True)]
    lanes = search.lanes if search is not None else 1
    log.info("%d judge(s) per GPU: %s of %d", lanes, indexes, count)
    return [Judge(task, eval_config, gpu_index=i, standby=True)
            for i in indexes for _ in range(lanes)]


class JudgesStarting:
    """make_judges on a thread of its own once `begin` is called: a resumed search sends
    its first LLM requests while torch loads and the judges start, instead of after."""

    def __init__(self, make: Callable[[], list[Any]]) -> None:
        self._make = make
        self.future: Future[list[Any]] = Future()
        self._thread: threading.Thread | None = None

    def begin(self) -> Future[list[Any]]:
        """Start making the judges (once); the future holds them or the error that stopped them."""
        if self._thread is None:
            # Running from now: a waiter that is cancelled cannot cancel it, so the
            # judges it makes are always there to close.
            self.future.set_running_or_notify_cancel()
            self._thread = threading.Thread(target=self._run, name="judges-start",
                                            daemon=True)
            self._thread.start()
        return self.future

    def _run(self) -> None:
        try:
            self.future.set_result(self._make())
        except BaseException as exc:  # handed to the search, which ends the run with it
            self.future.set_exception(exc)

    def made(self) -> list[Any]:
        """The judges, waited for while they are being made; none if never begun or failed."""
        if self._thread is None or self.future.exception() is not None:
            return []
        return self.future.result()


def start_judges(task: Task, eval_config: EvalConfig, gpus: str | None,
                 search: SearchConfig | None = None) -> JudgesStarting:
    """make_judges, begun later in the background (JudgesStarting)."""
    return JudgesStarting(lambda: make_judges(task, eval_config, gpus, search))


def judges_made(judges: list[Any] | JudgesStarting) -> list[Any]:
    """The judges a run has: the list, or those made in the background (waited for)."""
    return judges.made() if isinstance(judges, JudgesStarting) else judges


# The GPU a prompt names when none is visible (what the kernels are written for).
DEFAULT_GPU_NAME = "NVIDIA H200"


def gpu_name() -> str:
    """The first visible GPU's name, torch.cuda.get_device_name(0)'s, or DEFAULT_GPU_NAME.

    Asked of the CUDA driver, so a resumed run's first prompt waits for no
    torch import (1.5-2.5 s, 260 MB); where the driver cannot say, torch does.
    """
    if not sys.platform.startswith("linux"):
        return _torch_gpu_name()
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:  # no CUDA driver: torch sees no GPU either
        return DEFAULT_GPU_NAME
    count, device = ctypes.c_int(0), ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return DEFAULT_GPU_NAME  # a driver without a usable GPU: torch's is_available() is False
    if count.value < 1:
        return DEFAULT_GPU_NAME
    if (driver.cuDeviceGet(ctypes.byref(device), 0) != 0
            or driver.cuDeviceGetName(name, len(name), device) != 0):
        return _torch_gpu_name()
    return name.value.decode(errors="replace")


def _torch_gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else DEFAULT_GPU_NAME


def cluster_judges(task: Task, eval_config: EvalConfig, search: SearchConfig,
                   gpus: str | None) -> list[Any]:
    """Judges sending jobs to the Dask scheduler at `search.cluster`, one per worker slot."""
    if gpus is not None:
        raise ConfigError(f"--cluster {search.cluster} and --gpus {gpus}: a cluster judges on "
                          "its workers' GPUs, one worker per GPU (docs/cluster.md); leave out "
                          "--gpus")
    from kernelevo.evaluate.remote.cluster import ClusterJudge, connect

    connection = connect(search.cluster, search.cluster_timeout_s, eval_config.device,
                         search.cluster_slots)
    log.info("judging on the cluster at %s: %d job(s) at once", search.cluster,
             connection.slots)
    return [ClusterJudge(connection, task, eval_config) for _ in range(connection.slots)]


def close_judges(judges: list[Any] | JudgesStarting) -> None:
    """Let judges that hold a connection (a cluster's client) close it."""
    for judge in judges_made(judges):
        close = getattr(judge, "close", None)
        if close is not None:
            close()


def select_gpus(gpus: str, visible: int) -> list[int]:
    """The GPU indexes `--gpus` names ('all' or a list like 0,1), each one a visible GPU."""
    if gpus.strip() == "all":
        return list(range(visible))
    if not gpus.strip():
        raise ConfigError(f"--gpus {gpus!r} names no GPU: write 'all' or GPU indexes like "
                          "0,1, or leave out --gpus")
    where = (f"this machine shows {visible} GPU(s), 0 to {visible - 1}" if visible else
             "no GPU is visible here; leave out --gpus to judge on the CPU")
    try:
        indexes = [int(part) for part in gpus.split(",")]
    except ValueError:
        raise ConfigError(f"--gpus {gpus}: write 'all' or GPU indexes like 0,1 "
                          f"({where})") from None
    missing = sorted({i for i in indexes if not 0 <= i < visible})
    if missing:
        raise ConfigError(f"--gpus {gpus}: no visible GPU has index "
                          f"{', '.join(map(str, missing))} ({where}; CUDA_VISIBLE_DEVICES "
                          f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'is not set')})")
    if len(set(indexes)) != len(indexes):
        raise ConfigError(f"--gpus {gpus}: a GPU is named twice; name each once")
    return indexes


def make_pool(llm: dict[str, Any], budget: Budget) -> Any:
    """The model pool, or None when no model is configured (the tuner runs alone)."""
    if not llm.get("models"):
        return None
    from kernelevo.evaluate.sandbox.redact import hide_variable
    from kernelevo.llm.openai_compat import BASE_URL_ENV, check_base_url
    from kernelevo.llm.pool import ModelPool
    from kernelevo.llm.pricing import PriceTable

    # Without one, the client reads OPENAI_BASE_URL at each call, like the official client.
    if not llm.get("base_url") and not os.environ.get(BASE_URL_ENV):
        raise ConfigError(f"a model was given without --base-url and {BASE_URL_ENV} is not "
                          "set: give the endpoint, e.g. https://openrouter.ai/api/v1 or "
                          "http://localhost:8000/v1")
    if not llm.get("base_url"):
        try:
            check_base_url(os.environ[BASE_URL_ENV])
        except ConfigError as exc:
            raise ConfigError(f"{BASE_URL_ENV}: {exc}") from None
    _check_key_variable(llm.get("api_key_env", DEFAULT_KEY_VARIABLE))
    models = llm["models"]
    log.info("models %s at %s", models, llm.get("base_url") or f"${BASE_URL_ENV}")
    tuning = {key: llm[key] for key in CLIENT_SETTINGS if key in llm}
    base = ClientConfig(base_url=llm.get("base_url") or "", model=next(iter(models)),
                        api_key_env=llm.get("api_key_env", DEFAULT_KEY_VARIABLE), **tuning)
    hide_variable(base.api_key_env)  # out of every candidate's environment, whatever its name
    prices = PriceTable.with_overrides(llm.get("prices"))
    unpriced = [model for model in models if not prices.lookup(model).known]
    if budget.limits.usd is not None and unpriced:
        raise ConfigError(
            f"a dollar budget of {budget.limits.usd:g} USD is set but the price of "
            f"{', '.join(map(repr, unpriced))} is unknown: add it under [llm.prices] in the "
            f"config (e.g. {json.dumps(unpriced[0])} = [input, output] in USD per million "
            "tokens), or drop --usd")
    return ModelPool.from_models(base, models, prices=prices,
                                 max_in_flight=int(llm.get("in_flight", 8)), budget=budget,
                                 seed=random.randrange(1 << 30))


def _check_key_variable(name: str) -> None:
    """A key variable the user named must be set; the default may be unset (a local server
    needs no key, and the client then sends none)."""
    if name != DEFAULT_KEY_VARIABLE and not os.environ.get(name):
        raise ConfigError(f"the key's environment variable {name} (--api-key-env, [llm] "
                          f"api_key_env) is not set, or empty: export {name}=YOUR_KEY, or "
                          "leave api_key_env out for a server that needs no key")


def parse_models(values: list[str]) -> dict[str, float]:
    """`name` or `name=weight` entries into {name: weight}."""
    models: dict[str, float] = {}
    for value in values:
        name, equals, weight = value.partition("=")
        if not name.strip():
            raise ConfigError(f"--model {value!r} names no model: write NAME or NAME=WEIGHT, "
                              "e.g. --model gpt-4o")
        if equals and not weight.strip():
            raise ConfigError(f"--model {value!r} gives no weight after '=': write NAME "
                              f"(weight 1) or NAME=WEIGHT, e.g. --model {name}=2")
        try:
            models[name] = float(weight) if equals else 1.0
        except ValueError:
            raise ConfigError(f"--model {value}: the weight {weight!r} is no number: write "
                              f"NAME or NAME=WEIGHT, e.g. --model {name}=2") from None
    return models


def open_to_resume(runs_dir: Path, resume: str) -> tuple[RunStore, Task, dict[str, Any]]:
    """A stored run to write to (an older file migrated), its task and its settings."""
    store = open_run(runs_dir, resume, write=True)
    info = store.run_info()
    return store, task_from_source(info.task_source, name=info.task_name), info.config


def refuse_changes(store: RunStore, task: Task | None, options: EvolveOptions) -> None:
    """ResumeConflict if the task, seeds or settings given differ from the resumed run's."""
    info = store.run_info()
    eval_config, search = configs_from_run(info.config)
    problems = changed_settings(options.fixed, {**config_file.by_table("eval", eval_config),
                                                "search": search})
    if task is not None and task.source != info.task_source:
        problems.append(f"TASK {task.name} (not the run's task, {info.task_name})")
    # Each seed given is looked up by its hash: no other candidate is read.
    problems += [f"--seed {path} (not one of the run's starting candidates)"
                 for path in options.seeds
                 if not store.briefs.is_seed(load_candidate(path, role=SEED_ROLE))]
    refuse(info.id, problems)
