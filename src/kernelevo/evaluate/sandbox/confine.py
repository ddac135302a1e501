"""What a sandboxed child can see, write and leave behind, enforced by the kernel.

Applied in each child before any candidate (or task) code runs, layer by
layer where the OS allows it; every layer in force, and every one that could
not be applied with its reason, is named in the verdict's `isolation`:

- Its own root (new_root.py): the system folders, Python's own files
  (wherever they live, /tmp too, and through the symlinks the judge names
  them by), the folders on the judge's PYTHONPATH and the task's folder
  read-only; the scratch folder and the build caches writable; an empty
  private /tmp and home; a /dev with only the basic devices and the GPU's;
  nothing else of the machine: not the project's folder (unless PYTHONPATH
  names it), not the cache folder holding the evaluation service's token,
  not other users' homes. /etc/passwd and /etc/group are stand-ins.
- Another user than the judge's processes: on a judge that is root and has
  no GPU, an unprivileged user of its own; otherwise the judge's uid in a
  user namespace, without privileges over the machine's mounts or processes
  (CUDA IPC maps memory only between processes of one user). /proc, mounted
  with hidepid, shows it only what it may trace.
- Landlock's scope: it signals and traces only processes it started.
- A keeper process (keeper.py) that kills every process the job started.
- An allow-list of the judge's environment (environment.py), without any
  secret; the judge's forkserver starts with it too, so /proc/self/environ
  holds nothing else.

KERNELEVO_CONFINE=0 (a debug switch, read at call time) turns all but the
network namespace off.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from kernelevo.evaluate.sandbox import keeper
from kernelevo.evaluate.sandbox import namespaces
from kernelevo.evaluate.sandbox.new_root import enter_root, existing_paths, symlinks_along

SWITCH = "KERNELEVO_CONFINE"
# The sandbox's user when the judge is root: unused by convention (65534,
# nobody, may own daemons of the machine, which the sandbox must not reach).
SANDBOX_ID = 65533
_CACHE_VARIABLES = ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR",
                    "CUDA_CACHE_PATH")
_given: set[str] = set()  # folders already handed to the sandbox's user by this process


@dataclass(frozen=True)
class Plan:
    """What a child's root holds; made by the judge, applied in the child."""

    writable: tuple[str, ...]  # the scratch folder and the build caches: the worker's own
    shared: tuple[str, ...]  # bound writable as they are (CUDA MPS's pipes)
    readable: tuple[str, ...]  # Python's files, the task's folder, tools on PATH
    home: str  # an empty private folder in its place
    share_shm: bool  # the machine's /dev/shm: CUDA IPC keeps reference counts there
    sandbox_id: int | None  # the user the worker becomes; None: it keeps the judge's
    enabled: bool = True
    # (where, text) of each symlink on the way to a path above: Python names
    # its files through them (a venv or checkout reached by a link), so the
    # new root has them too, pointing where they point here.
    links: tuple[tuple[str, str], ...] = ()


def plan_for(scratch: Path, environment: Mapping[str, str], task_folder: str = "",
             cuda: bool = False) -> Plan:
    """The plan for a child whose scratch folder is `scratch` and environment `environment`."""
    caches = [environment[name] for name in _CACHE_VARIABLES if environment.get(name)]
    for folder in caches:
        with contextlib.suppress(OSError):
            os.makedirs(folder, exist_ok=True)
    writable = existing_paths([str(scratch)] + caches)
    # CUDA's MPS clients talk to its server through pipes in this folder (a root's daemon's:
    # bound writable, never handed over).
    shared = existing_paths([environment.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")])
    home = os.path.realpath(os.path.expanduser("~"))
    readable = _python_paths() + [task_folder, environment.get("PYTHONPYCACHEPREFIX", "")]
    # The judge's import path as its user set it: a package it has not
    # imported yet (the forkserver's, a candidate's) may come from there.
    readable += environment.get("PYTHONPATH", "").split(os.pathsep)
    for variable in ("PATH", "LD_LIBRARY_PATH"):
        readable += environment.get(variable, "").split(os.pathsep)
    readable += [environment.get("CUDA_HOME", ""), environment.get("CUDA_PATH", "")]
    named = [str(scratch)] + caches + readable  # as the judge names them, links unresolved
    # A folder that holds the whole home would undo hiding it.
    readable = _outermost([p for p in existing_paths(readable)
                           if not (home + os.sep).startswith(p + os.sep)])
    kept = writable + shared + readable
    links = symlinks_along([p for p in named if p and os.path.isabs(p) and os.path.exists(p)
                            and _inside(os.path.realpath(p), kept)])
    enabled = os.environ.get(SWITCH, "1") != "0"
    # CUDA IPC hands outputs between the judge and a GPU child, and the driver
    # maps memory only between processes of one user (an H200 refused it,
    # "mapping of buffer object failed"): a GPU child keeps root's uid and
    # gives up its privileges in a user namespace instead (drop_privileges).
    # Every job of a judge that has a GPU does so, its CPU-only builds too:
    # they share the build caches, which one user must own.
    sandbox_id = None
    if enabled and os.geteuid() == 0:
        sandbox_id = None if cuda or _has_gpu() else _hand_over(writable)
        if sandbox_id is None:
            _take_back(writable)
    return Plan(writable=tuple(writable), shared=tuple(shared), readable=tuple(readable),
                home=home, share_shm=cuda, sandbox_id=sandbox_id, enabled=enabled,
                links=tuple(links))


def _python_paths() -> list[str]:
    """What the interpreter may still import from: its prefixes and libraries, loaded packages.

    Other entries of sys.path (the current folder, a script's) are left out
    unless PYTHONPATH names them (plan_for): each package loaded from them
    brings its own folder, not its neighbours.
    """
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths = list(prefixes) + [os.path.dirname(sys.executable),
                              os.path.dirname(os.path.realpath(sys.executable))]
    paths += [entry for entry in sys.path if entry.endswith(("-packages", ".zip"))
              or any(entry.startswith(prefix + os.sep) for prefix in prefixes)]
    # a copy in one step: another thread's import may add modules while this runs
    for name, module in sys.modules.copy().items():
        if "." in name or name.startswith("__"):  # __main__: the judge's own script
            continue
        origin = getattr(module, "__file__", None)
        if hasattr(module, "__path__"):  # a package: its folder(s), namespace packages too
            paths += list(getattr(module, "__path__", []))
        elif origin:
            paths.append(origin)
    return [p for p in paths if isinstance(p, str)]


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == folder or path.startswith(folder + os.sep) for folder in folders)


def _outermost(paths: list[str]) -> list[str]:
    """Paths (shallowest first) not inside another of them."""
    kept: list[str] = []
    for path in paths:
        if not any(path.startswith(outer + os.sep) for outer in kept):
            kept.append(path)
    return kept


def _hand_over(folders: list[str]) -> int | None:
    """Give the writable folders to the sandbox's user (once per folder); its id, or None."""
    try:
        for folder in folders:
            if folder in _given and os.stat(folder).st_uid == SANDBOX_ID:
                continue
            os.chown(folder, SANDBOX_ID, SANDBOX_ID)
            for root, dirs, files in os.walk(folder):
                for name in dirs + files:
                    os.lchown(os.path.join(root, name), SANDBOX_ID, SANDBOX_ID)
            _given.add(folder)
    except OSError:
        return None  # e.g. a cache on a filesystem that refuses chown: the worker stays root
    return SANDBOX_ID


def _has_gpu() -> bool:
    if "torch" not in sys.modules:  # a process that never loaded torch (the probe): no import
        return any(name[len("nvidia"):].isdigit() for name in os.listdir("/dev")
                   if name.startswith("nvidia"))
    import torch

    return torch.cuda.is_available()


def _take_back(folders: list[str]) -> None:
    """Give folders handed to the sandbox's user back to root, for children that keep root's uid."""
    for folder in folders:
        with contextlib.suppress(OSError):
            if os.stat(folder).st_uid != SANDBOX_ID:
                continue
            os.chown(folder, 0, 0)
            for root, dirs, files in os.walk(folder):
                for name in dirs + files:
                    os.lchown(os.path.join(root, name), 0, 0)
        _given.discard(folder)


def confine(plan: Plan) -> tuple[list[str], bool]:
    """Apply the plan in this child; returns in the worker: (layers, whether a keeper holds it)."""
    if not plan.enabled:
        return [f"confinement off ({SWITCH}=0)"], False
    layers = enter_root(plan)
    process_layer, keeper_pid = keeper.split()
    layers.append(process_layer)
    layers.append(drop_privileges(plan))
    layers.append(_scope_signals())
    with contextlib.suppress(OSError):
        # Orphans of the worker's own children come to it, where the guards see
        # them as its children (a detached process is a spawned process too);
        # should it stop being their reaper, the keeper still is.
        namespaces.prctl(namespaces.PR_SET_CHILD_SUBREAPER, 1)
    if keeper_pid is not None:
        with contextlib.suppress(OSError):
            namespaces.prctl(namespaces.PR_SET_PDEATHSIG, 9)  # after the change of user
        if os.getppid() != keeper_pid:
            os._exit(1)  # the keeper is already gone
    layers.append("an allow-listed environment, no secrets")
    return layers, keeper_pid is not None


def drop_privileges(plan: Plan) -> str:
    """The worker gives up root (to the sandbox's user) or, not root, every capability."""
    if plan.sandbox_id is not None and os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setresgid(plan.sandbox_id, plan.sandbox_id, plan.sandbox_id)
            os.setresuid(plan.sandbox_id, plan.sandbox_id, plan.sandbox_id)
            namespaces.prctl(namespaces.PR_SET_NO_NEW_PRIVS, 1)
            # Changing user made this process undumpable, which hides its own
            # /proc/self from it; the judge's processes are root's, out of reach anyway.
            namespaces.prctl(namespaces.PR_SET_DUMPABLE, 1)
        except OSError as exc:
            return f"runs as root ({exc.strerror})"
        return f"runs as an unprivileged user (uid {plan.sandbox_id})"
    uid, gid = os.geteuid(), os.getegid()
    try:
        namespaces.unshare(namespaces.CLONE_NEWUSER)
        namespaces.write_id_maps(uid, gid)
        namespaces.prctl(namespaces.PR_SET_NO_NEW_PRIVS, 1)
    except OSError as exc:
        return f"keeps its privileges ({exc.strerror})"
    return f"runs as uid {uid} without privileges (user namespace)"


def _scope_signals() -> str:
    """The worker may signal and trace only what it started itself (Landlock).

    Without it a worker that keeps root's uid (a GPU job's) could kill any
    root process of the machine by its number, and workers of one user one
    another.
    """
    try:
        namespaces.scope_signals()
    except OSError as exc:
        return f"signals reach beyond the job ({exc.strerror})"
    return "signals and traces only within the job (Landlock)"


def unshare_network() -> str:
    """Move this process into an empty network namespace; how the network ended up."""
    try:
        namespaces.unshare(namespaces.CLONE_NEWNET)
    except OSError as exc:
        return f"shared (unshare: {exc.strerror})"
    return "off"
