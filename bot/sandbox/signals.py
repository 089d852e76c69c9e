"""A seccomp filter that keeps a child from signalling or tracing any process but its own (issues 29 and 41).

Where a child has no PID namespace of its own (no user namespaces on this machine), nothing else stops a compromised
export from SIGKILLing its sibling or the builder: they run as the same user, and Landlock (below ABI 6 not at all;
from ABI 6 only `kill` and SIGIO) leaves the indirect ways open. `guard()` installs, in the child itself and before
anything loads, a classic BPF filter (no library needed, Linux 3.5+) that makes these calls fail with EPERM unless they
aim at the process itself or its own process group: `kill`, `tkill`, `tgkill`, `rt_sigqueueinfo`,
`rt_tgsigqueueinfo`, `pidfd_open`, `prlimit64` (an RLIMIT_CPU of one second makes the kernel kill the target),
`perf_event_open` (an event with `sigtrap` signals the task it watches), `fcntl(F_SETOWN)` (SIGIO, or any signal
`F_SETSIG` picks, sent by the kernel to the owner) and `setpgid` into another group (then `kill(0)` reaches its
members); and always: `pidfd_send_signal` (a pidfd can be opened through `/proc/<pid>`), `ptrace`,
`process_vm_readv`/`writev`, `process_madvise`, `pidfd_getfd`, `fcntl(F_SETOWN_EX)` and the socket ioctls
`FIOSETOWN`/`SIOCSPGRP` (their owner is behind a pointer the filter cannot read). Signal 0 (is it alive?) stays
allowed. The filter is inherited by every process the child starts and cannot be removed; a process it forks can
still signal the child that started it (whose pid the filter names) and its group, not its own pid.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 38, 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_GET_ACTION_AVAIL = 2
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_LD_W_ABS, _JEQ_K, _JGE_K, _JA, _RET_K = 0x20, 0x15, 0x35, 0x05, 0x06
_X32_SYSCALL_BIT = 0x40000000
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {
    "x86_64": {
        "kill": 62,
        "tkill": 200,
        "tgkill": 234,
        "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "seccomp": 317,
        "fcntl": 72,
        "ioctl": 16,
        "setpgid": 109,
        "prlimit64": 302,
        "perf_event_open": 298,
    },
    "aarch64": {
        "kill": 129,
        "tkill": 130,
        "tgkill": 131,
        "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "seccomp": 277,
        "fcntl": 25,
        "ioctl": 29,
        "setpgid": 154,
        "prlimit64": 261,
        "perf_event_open": 241,
    },
}
# the same number on every arch
_COMMON = {"pidfd_send_signal": 424, "pidfd_open": 434, "pidfd_getfd": 438, "process_madvise": 440}
_ALWAYS_DENIED = (
    "pidfd_send_signal",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "process_madvise",
)
# (call, the argument naming its target): allowed only when that names this process or its own group
# (`_names_itself`); `kill` also with signal 0.
_PID_ARG = (
    ("kill", 0),
    ("tkill", 0),
    ("tgkill", 0),
    ("rt_sigqueueinfo", 0),
    ("rt_tgsigqueueinfo", 0),
    ("pidfd_open", 0),
    ("prlimit64", 0),
    ("perf_event_open", 1),
    ("setpgid", 1),
)
_F_SETOWN, _F_SETOWN_EX = 8, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902


class SignalGuardError(OSError):
    """The kernel refused the filter."""


def _machine() -> str | None:
    machine = os.uname().machine
    return machine if os.uname().sysname == "Linux" and machine in _ARCH else None


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def available() -> bool:
    """Whether this kernel takes seccomp filters (asked without installing one)."""
    machine = _machine()
    if machine is None:
        return False
    action = ctypes.c_uint32(_RET_ERRNO)
    libc = _libc()
    return libc.syscall(_SYSCALLS[machine]["seccomp"], _SECCOMP_GET_ACTION_AVAIL, 0, ctypes.byref(action)) == 0


def _program(machine: str, own: int) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) for a process whose pid is `own`."""
    numbers = {**_SYSCALLS[machine], **_COMMON}
    # Labels resolved below: "allow", "deny", "kill", and one check per call that names its target.
    code: list[tuple[int, object, object, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 0, "kill", _ARCH[machine]),
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        code.append((_JGE_K, "deny", 0, _X32_SYSCALL_BIT))  # the x32 ABI's numbers: not ours
    code += [(_JEQ_K, "deny", 0, numbers[name]) for name in _ALWAYS_DENIED]
    code += [(_JEQ_K, f"check-{name}", 0, numbers[name]) for name, _ in _PID_ARG]
    code.append((_JEQ_K, "check-fcntl", 0, numbers["fcntl"]))
    code.append((_JEQ_K, "check-ioctl", 0, numbers["ioctl"]))
    code.append((_JA, 0, 0, "allow"))  # type: ignore[arg-type]
    labels: dict[str, int] = {}
    for name, arg in _PID_ARG:
        labels[f"check-{name}"] = len(code)
        code += _names_itself(arg, own)
        if name == "kill":
            code.append((_LD_W_ABS, 0, 0, _arg(1)))  # the signal
            code.append((_JEQ_K, "allow", 0, 0))  # signal 0 only asks whether a process exists
        code.append((_JA, 0, 0, "deny"))  # type: ignore[arg-type]
    labels["check-fcntl"] = len(code)
    code.append((_LD_W_ABS, 0, 0, _arg(1)))  # the command
    code.append((_JEQ_K, "deny", 0, _F_SETOWN_EX))
    code.append((_JEQ_K, 0, "allow", _F_SETOWN))
    code += _names_itself(2, own)  # F_SETOWN's owner: a pid, or a group as its negative
    code.append((_JA, 0, 0, "deny"))  # type: ignore[arg-type]
    labels["check-ioctl"] = len(code)
    code.append((_LD_W_ABS, 0, 0, _arg(1)))
    code += [(_JEQ_K, "deny", 0, _FIOSETOWN), (_JEQ_K, "deny", 0, _SIOCSPGRP), (_JA, 0, 0, "allow")]  # type: ignore[list-item]
    labels["allow"] = len(code)  # classic BPF jumps forward only: the returns come last
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    labels["deny"] = len(code)
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    labels["kill"] = len(code)
    code.append((_RET_K, 0, 0, _RET_KILL_PROCESS))
    resolved = []
    for index, (op, jt, jf, k) in enumerate(code):
        if op == _JA:
            resolved.append((op, 0, 0, _offset(labels, index, k)))
        else:
            resolved.append((op, _offset(labels, index, jt), _offset(labels, index, jf), int(k)))
    return resolved


def _arg(index: int) -> int:
    """Where the low 32 bits of a call's argument lie in `seccomp_data` (a pid_t or a command: the kernel reads no
    more; both architectures are little-endian)."""
    return 16 + 8 * index


def _names_itself(arg: int, own: int) -> list[tuple[int, object, object, int]]:
    """Jump to "allow" when argument `arg` is this process (`own`), 0 (the caller itself, or its own process group for
    `kill`) or `-own` (its own group, for `kill` and `F_SETOWN`); fall through otherwise. Both group forms are
    invalid arguments to the other calls, so allowing them there opens nothing."""
    return [
        (_LD_W_ABS, 0, 0, _arg(arg)),
        (_JEQ_K, "allow", 0, own & 0xFFFFFFFF),
        (_JEQ_K, "allow", 0, 0),
        (_JEQ_K, "allow", 0, -own & 0xFFFFFFFF),
    ]


def _offset(labels: dict[str, int], index: int, target: object) -> int:
    """A jump from instruction `index` to a label (forward only), or a literal offset."""
    return labels[target] - index - 1 if isinstance(target, str) else int(target)  # type: ignore[call-overload]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def guard() -> None:
    """Install the filter in this process (and so every process it starts from now on).

    Raises:
        SignalGuardError: no seccomp here, or the kernel refused the filter.
    """
    machine = _machine()
    if machine is None:
        raise SignalGuardError(f"no seccomp filter for {os.uname().sysname} {os.uname().machine}")
    program = _program(machine, os.getpid())
    raw = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    fprog = _SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SignalGuardError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SignalGuardError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) refused the filter")
