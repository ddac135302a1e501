"""A child's own root: only what its plan names, read-only but for its scratch and caches.

Assembled on a tmpfs over /tmp in a new mount namespace, then made the root
with pivot_root (confine.py says what goes in and why): the system folders,
Python's files and the task's folder read-only, with the symlinks on the way
to them (a venv linked from under /tmp is still found); the scratch folder and the
build caches writable; an empty /tmp and home; a /dev of the basic devices
and the GPU's; a /proc of its own; stand-in accounts. Every bind is made
read-only or writable as it is made, so the machine is never writable
through one by mistake.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Protocol

from kernelevo.evaluate.sandbox import keeper
from kernelevo.evaluate.sandbox import namespaces
from kernelevo.evaluate.sandbox.namespaces import (MNT_DETACH, MS_BIND, MS_NODEV, MS_NOEXEC,
                                                   MS_NOSUID)

_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "sys")
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_STAGE = "/tmp"  # where the new root is assembled, on a tmpfs of its own


class RootPlan(Protocol):
    """What a root is built from: the fields of confine.Plan read here.

    Named as a protocol so this module need not import confine, which imports it.
    """

    @property
    def writable(self) -> tuple[str, ...]: ...
    @property
    def shared(self) -> tuple[str, ...]: ...
    @property
    def readable(self) -> tuple[str, ...]: ...
    @property
    def home(self) -> str: ...
    @property
    def share_shm(self) -> bool: ...
    @property
    def sandbox_id(self) -> int | None: ...
    @property
    def links(self) -> tuple[tuple[str, str], ...]: ...


def existing_paths(paths: list[str]) -> list[str]:
    """Absolute existing paths, resolved, without repeats, shallowest first.

    Never / itself, and nothing in /proc or /dev, which the new root makes its own.
    """
    found = {os.path.realpath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)}
    found = {p for p in found if p != "/" and not p.startswith(("/proc/", "/dev/"))
             and p not in ("/proc", "/dev")}
    return sorted(found, key=lambda p: (p.count(os.sep), p))


def symlinks_along(paths: list[str]) -> list[tuple[str, str]]:
    """(where, text) of every symlink met on the way to each path, without repeats.

    Each `where` is named through no other link (what comes before it is
    resolved), so it can be made in the new root where it is here.
    """
    found: dict[str, str] = {}
    for path in paths:
        here = "/"
        for part in Path(path).parts[1:]:
            step = os.path.join(here, part)
            if os.path.islink(step):
                found.setdefault(step, os.readlink(step))
                step = os.path.realpath(step)
            here = step
    return sorted(found.items(), key=lambda link: (link[0].count(os.sep), link[0]))


def enter_root(plan: RootPlan) -> list[str]:
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


def _assemble(plan: RootPlan) -> tuple[bool, list[str]]:
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
        problems = _bind_kept(kept) + _links(plan.links)
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


def _kept_paths(plan: RootPlan) -> list[str]:
    """Paths to bind into the new root: all writable ones, readable ones not already there."""
    system = ["/" + name for name in _SYSTEM]
    kept: list[str] = []
    for path in existing_paths(list(plan.writable) + list(plan.shared) + list(plan.readable)):
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


def _private_folders(plan: RootPlan) -> None:
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
        # gid: the group that sees every process; by default root's, which a
        # worker that keeps root's uid (a GPU job's) is in.
        namespaces.mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                         f"hidepid=2,gid={keeper.KEEPER_ID}")
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


def _links(links: tuple[tuple[str, str], ...]) -> list[str]:
    """The plan's symlinks, where no bind already shows them; those that could not be made."""
    problems = []
    for where, text in links:
        target = _STAGE + where
        if os.path.lexists(target):  # inside a bound folder: there as it is here
            continue
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(text, target)
        except OSError as exc:
            problems.append(f"{where}: {exc.strerror}")
    return problems


def _accounts(plan: RootPlan) -> None:
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


def _read_only_elsewhere(plan: RootPlan) -> list[str]:
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
