"""What a sandboxed child can see, write and leave behind, enforced by the kernel.

Applied in each child before any candidate (or task) code runs, layer by
layer where the OS allows it; every layer in force, and every one that could
not be applied with its reason, is named in the verdict's `isolation`:

- Its own root (a mount namespace and pivot_root): the system folders
  (/usr, /etc, /opt, ...), Python's own files and the task's folder read-only;
  the scratch folder and the build caches writable; an empty private /tmp
  and an empty home; a /dev with only the basic devices and the GPU's;
  nothing else of the machine: not the project's folder, not the cache
  folder holding the evaluation service's token, not other users' homes.
  /etc/passwd and /etc/group are stand-ins naming only root and the sandbox.
- An unprivileged user of its own (when the judge is root): it can read no
  root-only file, signal or trace no process of the judge's, and /proc
  (mounted with hidepid) shows it no other user's process. A judge that is
  not root keeps its own user, in a user namespace without privileges.
- A keeper process (keeper.py) that kills every process the job started.
- No secret in its environment (redact.py); the judge's forkserver starts
  without them too, so /proc/self/environ holds none.

KERNELEVO_CONFINE=0 (a debug switch, read at call time) turns all but the
network namespace off.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from kernelevo.evaluate import keeper, namespaces
from kernelevo.evaluate.namespaces import MNT_DETACH, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID

SWITCH = "KERNELEVO_CONFINE"
# The sandbox's user when the judge is root: unused by convention (65534,
# nobody, may own daemons of the machine, which the sandbox must not reach).
SANDBOX_ID = 65533
_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "sys")
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_CACHE_VARIABLES = ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR",
                    "CUDA_CACHE_PATH")
_STAGE = "/tmp"  # where the new root is assembled, on a tmpfs of its own
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


def plan_for(scratch: Path, environment: Mapping[str, str], task_folder: str = "",
             cuda: bool = False) -> Plan:
    """The plan for a child whose scratch folder is `scratch` and environment `environment`."""
    caches = [environment[name] for name in _CACHE_VARIABLES if environment.get(name)]
    for folder in caches:
        with contextlib.suppress(OSError):
            os.makedirs(folder, exist_ok=True)
    writable = _existing([str(scratch)] + caches)
    # CUDA's MPS clients talk to its server through pipes in this folder (a root's daemon's:
    # bound writable, never handed over).
    shared = _existing([environment.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")])
    home = os.path.realpath(os.path.expanduser("~"))
    readable = _python_paths() + [task_folder, environment.get("PYTHONPYCACHEPREFIX", "")]
    for variable in ("PATH", "LD_LIBRARY_PATH"):
        readable += environment.get(variable, "").split(os.pathsep)
    readable += [environment.get("CUDA_HOME", ""), environment.get("CUDA_PATH", "")]
    # A folder that holds the whole home would undo hiding it.
    readable = _outermost([p for p in _existing(readable)
                           if not (home + os.sep).startswith(p + os.sep)])
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
                home=home, share_shm=cuda, sandbox_id=sandbox_id, enabled=enabled)


def _python_paths() -> list[str]:
    """What the interpreter may still import from: its prefixes and libraries, loaded packages.

    Other entries of sys.path (the current folder, a script's) are left out:
    each package loaded from them brings its own folder, not its neighbours.
    """
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths = list(prefixes) + [os.path.dirname(sys.executable),
                              os.path.dirname(os.path.realpath(sys.executable))]
    paths += [entry for entry in sys.path if entry.endswith(("-packages", ".zip"))
              or any(entry.startswith(prefix + os.sep) for prefix in prefixes)]
    for name, module in list(sys.modules.items()):
        if "." in name or name.startswith("__"):  # __main__: the judge's own script
            continue
        origin = getattr(module, "__file__", None)
        if hasattr(module, "__path__"):  # a package: its folder(s), namespace packages too
            paths += list(getattr(module, "__path__", []))
        elif origin:
            paths.append(origin)
    return [p for p in paths if isinstance(p, str)]


def _existing(paths: list[str]) -> list[str]:
    """Absolute existing paths, resolved, without repeats, shallowest first.

    Never / itself, and nothing in /proc or /dev, which the new root makes its own.
    """
    found = {os.path.realpath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)}
    found = {p for p in found if p != "/" and not p.startswith(("/proc/", "/dev/"))
             and p not in ("/proc", "/dev")}
    return sorted(found, key=lambda p: (p.count(os.sep), p))


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
    layers.append("secrets out of the environment")
    return layers, keeper_pid is not None


def enter_root(plan: Plan) -> list[str]:
    """A mount namespace whose root holds only what the plan names; the layers it gives."""
    try:
        # Its own System V IPC too: nothing to share with the machine's segments.
        if os.geteuid() == 0:
            namespaces.unshare(namespaces.CLONE_NEWNS | namespaces.CLONE_NEWIPC)
        else:
            uid, gid = os.geteuid(), os.getegid()
            namespaces.unshare(namespaces.CLONE_NEWUSER | namespaces.CLONE_NEWNS
                               | namespaces.CLONE_NEWIPC)
            namespaces.write_id_maps(uid, gid)
        namespaces.mount(None, "/", None, namespaces.MS_REC | namespaces.MS_PRIVATE)
    except OSError as exc:
        return [f"filesystem shared ({exc.strerror})"]
    try:
        hidden, problems = _assemble(plan)
    except OSError as exc:  # nothing is lost: the machine's root is still this one's
        with contextlib.suppress(OSError):
            namespaces.umount(_STAGE, MNT_DETACH)
        return [f"filesystem shared ({exc})"]
    try:
        _pivot()
    except OSError as exc:
        problems.insert(0, str(exc))
    problems += _read_only_elsewhere(plan)
    _close_folders_outside()
    layers = ["own root: system and Python folders read-only, scratch and build caches "
              "writable, home and temporary folders empty, nothing else of the machine"]
    if problems:
        layers[0] += f" ({len(problems)} mounts not as planned: {problems[0]})"
    layers.append("other users' processes hidden" if hidden else "processes visible in /proc")
    return layers


def _assemble(plan: Plan) -> tuple[bool, list[str]]:
    """The new root, on a tmpfs over the stage: (processes hidden, binds that failed)."""
    # Opened before anything covers them (the stage covers /tmp); a bind from
    # a descriptor opened before the unshare would be refused.
    kept = [(path, os.open(path, os.O_PATH), path in plan.writable + plan.shared)
            for path in _kept_paths(plan)]
    try:
        namespaces.mount("tmpfs", _STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
        _system_folders()
        _private_folders(plan)
        _devices(plan.share_shm)
        hidden = _proc()
        problems = _bind_kept(kept)
        _accounts(plan)
    finally:
        for _, descriptor, _ in kept:
            os.close(descriptor)
    return hidden, problems


def _pivot() -> None:
    """Make the stage the root; the machine's root, detached, is out of reach."""
    os.mkdir(_STAGE + "/.old")
    namespaces.pivot_root(_STAGE, _STAGE + "/.old")
    os.chdir("/")
    namespaces.umount("/.old", MNT_DETACH)
    os.rmdir("/.old")


def _kept_paths(plan: Plan) -> list[str]:
    """Paths to bind into the new root: all writable ones, readable ones not already there."""
    system = ["/" + name for name in _SYSTEM]
    kept: list[str] = []
    for path in _existing(list(plan.writable) + list(plan.shared) + list(plan.readable)):
        inside = [p for p in system + kept if path == p or path.startswith(p + os.sep)]
        if path in plan.writable or path in plan.shared or not inside:
            kept.append(path)
    return kept


def _system_folders() -> None:
    for name in _SYSTEM:
        source, target = "/" + name, _STAGE + "/" + name
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
        elif os.path.isdir(source):
            os.mkdir(target)
            namespaces.bind(source, target, writable=False)


def _private_folders(plan: Plan) -> None:
    """An empty /tmp and an empty home, on tmpfs of their own (writable by the worker)."""
    owner = plan.sandbox_id if plan.sandbox_id is not None else os.geteuid()
    os.mkdir(_STAGE + "/tmp")
    namespaces.mount("tmpfs", _STAGE + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
                     "mode=1777,size=1g")
    if plan.home not in ("/", "/tmp") and not any(plan.home == "/" + n for n in _SYSTEM):
        os.makedirs(_STAGE + plan.home, exist_ok=True)
        namespaces.mount("tmpfs", _STAGE + plan.home, "tmpfs", MS_NOSUID | MS_NODEV,
                         f"mode=0700,size=256m,uid={owner},gid={owner}")


def _devices(share_shm: bool) -> None:
    """A /dev with the basic devices and the GPU's (/dev/nvidia*), no disk or memory device."""
    dev = _STAGE + "/dev"
    os.mkdir(dev)
    namespaces.mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m")
    names = list(_DEVICES) + sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    for name in names:
        source = "/dev/" + name
        if not os.path.exists(source):
            continue
        if os.path.isdir(source):
            os.mkdir(dev + "/" + name)
        else:
            open(dev + "/" + name, "w").close()
        namespaces.bind(source, dev + "/" + name, writable=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(dev + "/shm")
    if share_shm and os.path.isdir("/dev/shm"):
        namespaces.bind("/dev/shm", dev + "/shm", writable=True)
    else:
        namespaces.mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV,
                         "mode=1777,size=1g")


def _proc() -> bool:
    """A /proc that shows no other user's process where the kernel allows; whether it does."""
    target = _STAGE + "/proc"
    os.mkdir(target)
    try:
        namespaces.mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
        return True
    except OSError:  # a user namespace may not mount a proc of its own: the machine's, bound
        namespaces.mount("/proc", target, None, MS_BIND | namespaces.MS_REC)
        return False


def _bind_kept(kept: list[tuple[str, int, bool]]) -> list[str]:
    problems = []
    for path, descriptor, writable in kept:
        target = _STAGE + path
        try:
            if not os.path.lexists(target):  # the path itself may lie under the stage now
                if stat.S_ISDIR(os.fstat(descriptor).st_mode):
                    os.makedirs(target)
                else:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    open(target, "w").close()
            namespaces.bind(f"/proc/self/fd/{descriptor}", target, writable)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror}")
    return problems


def _accounts(plan: Plan) -> None:
    """Stand-ins for /etc/passwd and /etc/group: root and the sandbox's user only."""
    if not os.path.isfile(_STAGE + "/etc/passwd"):
        return
    uid = plan.sandbox_id if plan.sandbox_id is not None else os.geteuid()
    os.mkdir(_STAGE + "/.accounts")
    nologin = "/usr/sbin/nologin"
    files = {"passwd": f"root:x:0:0:root:/root:{nologin}\n"
                       f"sandbox:x:{uid}:{uid}:kernelevo sandbox:{plan.home}:{nologin}\n",
             "group": f"root:x:0:\nsandbox:x:{uid}:\n"}
    for name, text in files.items():
        Path(_STAGE + "/.accounts/" + name).write_text(text)
        if os.path.isfile(_STAGE + "/etc/" + name):
            namespaces.bind(_STAGE + "/.accounts/" + name, _STAGE + "/etc/" + name, False)


def _read_only_elsewhere(plan: Plan) -> list[str]:
    """Every mount but the writable ones and /proc read-only (a bind's submounts too)."""
    writable = set(plan.writable + plan.shared) | {"/tmp", plan.home, "/dev/shm"}
    problems = []
    for point in dict.fromkeys(namespaces.mount_points()):
        if point in writable or point == "/proc" or point.startswith("/proc/"):
            continue
        try:
            namespaces.remount(point, writable=False)
        except OSError as exc:
            problems.append(f"{point}: {exc.strerror}")
    return problems


def _close_folders_outside() -> None:
    """Close inherited folder descriptors: through one, `..` would reach the old root."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            if stat.S_ISDIR(os.fstat(int(name)).st_mode):
                os.close(int(name))


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


def unshare_network() -> str:
    """Move this process into an empty network namespace; how the network ended up."""
    try:
        namespaces.unshare(namespaces.CLONE_NEWNET)
    except OSError as exc:
        return f"shared (unshare: {exc.strerror})"
    return "off"
