"""Linux Landlock through ctypes: an unprivileged process confines itself (and every process it starts).

After `restrict(reads, writes)`, the kernel refuses this process any file access outside the granted
hierarchies, every TCP bind/connect (ABI 4+), signals to processes outside the sandbox (ABI 6+), and (ABI 1+)
ptrace-style access to processes outside it, which is what `/proc/<pid>/environ`, `mem` and `fd` need. No
package to install: the kernel has it since 5.13 (Ubuntu and Debian kernels enable it), and `abi_version()`
says 0 where it does not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterable
from pathlib import Path

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_WRITE_RIGHTS_V1 = (1 << 13) - 1 & ~(EXECUTE | READ_FILE | READ_DIR)  # remove/make of every kind, write
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR
SIGNAL_SCOPE_ABI = 6  # the first ABI that refuses signals to processes outside the sandbox
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | _TRUNCATE | _IOCTL_DEV  # what a rule on a file (not a dir) may hold


class LandlockError(OSError):
    """The kernel refused to build or apply the ruleset."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is not built in or not enabled."""
    if os.uname().sysname != "Linux" or os.uname().machine not in ("x86_64", "aarch64"):
        return 0
    version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _fs_rights(abi: int) -> int:
    rights = READ_RIGHTS | WRITE_FILE | _WRITE_RIGHTS_V1
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def restrict(reads: Iterable[Path], writes: Iterable[Path], *, max_abi: int | None = None) -> int:
    """Confine this process: read/execute under `reads`, full access under `writes`, nothing else.

    Paths that do not exist are left out. Returns the ABI version applied: the kernel's, or `max_abi` when lower
    (what an older kernel gives: the tests of the weaker modes use it, e.g. 5, without signal scoping).

    Raises:
        LandlockError: Landlock is unavailable or the kernel refused a step.
    """
    abi = min(abi_version(), max_abi) if max_abi is not None else abi_version()
    if abi < 1:
        raise LandlockError("Landlock is not available in this kernel")
    libc = _libc()
    handled = _fs_rights(abi)
    attr = _RulesetAttr(
        handled_access_fs=handled,
        handled_access_net=3 if abi >= 4 else 0,  # BIND_TCP | CONNECT_TCP, with no rule: denied
        scoped=(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= SIGNAL_SCOPE_ABI else 0,
    )
    size = ctypes.sizeof(_RulesetAttr) if abi >= SIGNAL_SCOPE_ABI else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise LandlockError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for paths, rights in ((reads, READ_RIGHTS), (writes, handled)):
            for path in paths:
                _add_rule(libc, int(ruleset), Path(path), rights & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not path.is_dir():
            rights &= _FILE_RIGHTS
        attr = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if (
            libc.syscall(
                _SYS_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.byref(attr),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise LandlockError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
