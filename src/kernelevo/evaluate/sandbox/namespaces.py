"""The Linux calls a sandboxed child confines itself with (through libc; standard library only).

Each raises OSError with the errno, so a caller can name the reason a layer
is absent. Nothing here decides what to confine: confine.py does.
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Iterator

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_KEEPCAPS = 1, 4, 8
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 36, 38
CAP_KILL = 5
_CAPABILITY_VERSION_3 = 0x20080522

# statvfs flags -> the mount flags a bind remount must repeat (a user
# namespace refuses a remount that would drop a locked one).
_KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
               (os.ST_NOATIME, 1024), (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21))
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# The same numbers on every architecture (added after the tables were unified).
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_RESTRICT_SELF = 444, 446
_LANDLOCK_SCOPE_SIGNAL = 1 << 1
_LANDLOCK_SCOPES_ABI = 6  # the first Landlock ABI with scopes (Linux 6.12)

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                ctypes.c_ulong, ctypes.c_char_p]
        _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                                ctypes.c_ulong]
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def unshare(flags: int) -> None:
    _check(_lib().unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    _check(_lib().mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)),
           f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_lib().umount2(_bytes(target), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(38, f"pivot_root: no system call number for {os.uname().machine}")
    _check(_lib().syscall(number, _bytes(new_root), _bytes(put_old)), "pivot_root")


def prctl(option: int, value: int) -> None:
    _check(_lib().prctl(option, value, 0, 0, 0), f"prctl {option}")


def scope_signals() -> None:
    """Landlock: this process and its children signal and trace only processes of their own.

    Needs no_new_privs (or CAP_SYS_ADMIN); raises OSError where the kernel
    has no Landlock, or one without scopes.
    """
    lib = _lib()
    lib.syscall.restype = ctypes.c_long

    class Attributes(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    version = lib.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                          ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
    if version < 0:
        _check(-1, "landlock")
    if version < _LANDLOCK_SCOPES_ABI:
        raise OSError(38, f"landlock: ABI {version} has no scopes ({_LANDLOCK_SCOPES_ABI} needed)")
    attributes = Attributes(0, 0, _LANDLOCK_SCOPE_SIGNAL)
    ruleset = lib.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attributes),
                          ctypes.c_size_t(ctypes.sizeof(attributes)), ctypes.c_uint32(0))
    if ruleset < 0:
        _check(-1, "landlock_create_ruleset")
    try:
        _check(lib.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset),
                           ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def undumpable() -> None:
    """Put this process out of reach of a worker that keeps its uid (a GPU job's keeps root's).

    An undumpable process's /proc entries (environment, memory) and ptrace
    need CAP_SYS_PTRACE, which a worker in a user namespace lacks; under
    /proc's hidepid it does not even see the process.
    """
    try:
        prctl(PR_SET_DUMPABLE, 0)
    except OSError:
        pass  # without prctl there is no such worker either: confinement is Linux's


def keep_only_capabilities(*numbers: int) -> None:
    """Make `numbers` the only capabilities left, effective and permitted (capset)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    mask = sum(1 << n for n in numbers)
    data = (Data * 2)(Data(mask & 0xFFFFFFFF, mask & 0xFFFFFFFF, 0),
                      Data(mask >> 32, mask >> 32, 0))
    _check(_lib().capset(ctypes.byref(Header(_CAPABILITY_VERSION_3, 0)), data), "capset")


def bind(source: str, target: str, writable: bool, recursive: bool = True) -> None:
    """Bind `source` on `target`, then make that mount read-only or writable."""
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    remount(target, writable)


def remount(target: str, writable: bool) -> None:
    """Change one mount's read-only flag, keeping its other flags."""
    flags = MS_REMOUNT | MS_BIND | (0 if writable else MS_RDONLY)
    mount(None, target, None, flags | kept_flags(target))


def kept_flags(path: str) -> int:
    status = os.statvfs(path)
    return sum(ms for st, ms in _KEPT_FLAGS if status.f_flag & st)


def write_id_maps(uid: int, gid: int) -> None:
    """Map this process's own ids into the user namespace it has just entered."""
    with open("/proc/self/setgroups", "w") as handle:
        handle.write("deny")
    with open("/proc/self/uid_map", "w") as handle:
        handle.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as handle:
        handle.write(f"{gid} {gid} 1")


def mount_points() -> Iterator[str]:
    """Every mount point this process sees, outermost first (/proc/self/mountinfo)."""
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) > 4:
                yield re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
