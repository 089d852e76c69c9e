"""Issue 41: in every sandbox mode it accepts, a child signals or traces no process but its own descendants, by any
path (a real child through the build's runner, each weak mode forced as in `test_weak_modes.py`); a mode in which it
still could is refused, naming why. Before: with Landlock ABI 5 and no PID namespace, the seccomp filter stopped
`kill` and `ptrace` but a child still sent SIGUSR1 to the builder through `F_SETOWN` + `F_SETSIG` (SIGIO), could
`prlimit` any process of its user (RLIMIT_CPU of one second: the kernel kills it), open a `perf_event` with `sigtrap`
on it, and join its reaper's process group to `kill(0)` it; with Landlock's signal scope (ABI 6+) the last three
still held; without Landlock it opened its sibling's `/proc/<pid>/mem`."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from bot.core.errors import InfrastructureFailure
from bot.sandbox import confinement as confinement_module
from bot.sandbox.confinement import Confinement, confinement, traces_outside
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env
from bot.sandbox.landlock import abi_version
from tests.sandbox.test_weak_modes import SIBLING_SLEEP, _pid_running

# (layers, Landlock ABI cap): no PID namespace in any of them.
MODES = {
    "landlock5-no-namespaces": (("landlock",), 5),
    "landlock-no-namespaces": (("landlock",), None),  # the kernel's ABI (6+ here: the signal scope)
    "no-os-layer": ((), None),
}
PATHS = (
    "kill_sibling",
    "kill_builder",
    "kill_parent",
    "pidfd_sibling",
    "sigio_builder",
    "setown_ex_builder",
    "prlimit_sibling",
    "perf_sibling",
    "join_parent_group",
    "ptrace_sibling",
    "mem_sibling",
)

# Every path a process of the same user (here: root) has to signal or trace another, tried on the sibling child,
# the builder (this test process, which counts the SIGUSR1 it gets) and the child's parent (its reaper), plus how
# many processes of the machine it may `prlimit`; and a signal to its own process group, which must stay possible.
_PROBE = r"""
import ctypes, fcntl, json, os, resource, signal, struct, sys, time
sibling, builder, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
result = {}

def attempt(name, fn):
    try:
        fn()
        result[name] = "done"
    except OSError as error:
        result[name] = type(error).__name__

def syscall(number, *args):
    if libc.syscall(number, *args) < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

def sigio(owner, ex):
    read, write = os.pipe()
    if ex:
        fcntl.fcntl(read, 15, struct.pack("ii", 1, owner))  # F_SETOWN_EX, F_OWNER_PID
    else:
        fcntl.fcntl(read, fcntl.F_SETOWN, owner)
    fcntl.fcntl(read, 10, signal.SIGUSR1)  # F_SETSIG
    fcntl.fcntl(read, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
    os.write(write, b"x")

def perf(pid):
    attr = (ctypes.c_uint64 * 16)()
    ctypes.memmove(ctypes.addressof(attr), struct.pack("II", 1, 128), 8)  # PERF_TYPE_SOFTWARE, size
    attr[1] = 9  # PERF_COUNT_SW_DUMMY
    fd = libc.syscall(298, ctypes.byref(attr), pid, -1, -1, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "perf_event_open")
    os.close(fd)

def same_limit(pid):
    resource.prlimit(pid, resource.RLIMIT_CORE, resource.prlimit(pid, resource.RLIMIT_CORE))

def paths(target, parent):
    return {
        "kill_sibling": lambda: os.kill(target, signal.SIGCONT),
        "kill_builder": lambda: os.kill(builder, signal.SIGUSR1),
        "kill_parent": lambda: os.kill(parent, signal.SIGCONT),
        "pidfd_sibling": lambda: os.close(os.pidfd_open(target)),
        "sigio_builder": lambda: sigio(builder, False),
        "setown_ex_builder": lambda: sigio(builder, True),
        "prlimit_sibling": lambda: same_limit(target),
        "perf_sibling": lambda: perf(target),
        "join_parent_group": lambda: os.setpgid(0, os.getpgid(parent)),
        "ptrace_sibling": lambda: syscall(101, 0x4206, target, 0, 0),  # PTRACE_SEIZE
        "mem_sibling": lambda: os.close(os.open(f"/proc/{target}/mem", os.O_RDWR)),
    }

for name, fn in paths(sibling, os.getppid()).items():
    attempt(name, fn)
me = os.getpid()
others = [pid for pid in json.load(open(sys.argv[4])) if pid != me]  # the machine's pids, listed by the test
reach = 0
for pid in others:
    try:
        same_limit(pid)
        reach += 1
    except OSError:
        pass
result["prlimit_reach"] = reach
# Its own process group (itself and what it starts) stays in reach: the guard is no blanket ban.
attempt("own_group", lambda: os.killpg(0, signal.SIGCONT))
time.sleep(0.2)  # a SIGIO in flight lands before the builder counts
open(out, "w").write(json.dumps(result))
"""


def _mode(name: str) -> tuple[tuple[str, ...], int | None]:
    layers, abi = MODES[name]
    if "landlock" in layers and abi_version() < 1:
        pytest.skip("no Landlock in this kernel")
    return layers, abi


def _run(folder: Path, script: str, *args: str, mode: str, sandbox: bool = True) -> None:
    layers, abi = _mode(mode)
    prefix = sandboxed("exec", writes=[folder], layers=layers, landlock_abi=abi) if sandbox else []
    folder.mkdir(parents=True, exist_ok=True)
    run_logged(
        [*prefix, sys.executable, "-c", script, *args],
        log_path=folder.parent / f"{folder.name}.log",
        timeout_s=60,
        env=untrusted_env(home=folder / "home"),
        what=f"{folder.name} export",
    )


def _probe(tmp_path: Path, mode: str, *, sandbox: bool = True) -> tuple[dict, list[int]]:
    """The probe's findings beside a sleeping sibling child, and the SIGUSR1s this process (the builder) got."""
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    sibling = threading.Thread(
        target=_run, args=(tmp_path / "target", f"import time; time.sleep({SIBLING_SLEEP})"), daemon=True,
        kwargs={"mode": mode, "sandbox": sandbox},
    )  # fmt: skip
    sibling.start()
    try:
        sibling_pid = _pid_running(f"time.sleep({SIBLING_SLEEP})")
        own = tmp_path / "draft"
        own.mkdir()
        pids = own / "pids.json"  # every process of the machine (Landlock closes /proc to the probe)
        pids.write_text(json.dumps([int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]))
        args = (str(sibling_pid), str(os.getpid()), str(own / "result.json"), str(pids))
        _run(own, _PROBE, *args, mode=mode, sandbox=sandbox)
        sibling.join(30)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    return json.loads((tmp_path / "draft" / "result.json").read_text()), received


def _refusal(mode: str) -> str | None:
    layers, _ = _mode(mode)
    return confinement(layers).refusal()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_child_reaches_no_process_but_its_own_or_the_mode_is_refused(tmp_path, mode):
    refused = _refusal(mode)
    if refused is not None:
        with pytest.raises(InfrastructureFailure) as caught:
            _run(tmp_path / "draft", "open('ran', 'w')", mode=mode)
        assert caught.value.message == refused and "refused" in refused, caught.value.message
        assert not (tmp_path / "draft" / "ran").exists() and not (tmp_path / "draft.log").exists()  # no child ran
        return
    result, received = _probe(tmp_path, mode)
    assert {name: result[name] for name in PATHS} == dict.fromkeys(PATHS, "PermissionError"), result
    assert received == [], received  # no SIGUSR1 reached the builder by any path
    assert result["prlimit_reach"] == 0, result
    assert result["own_group"] == "done", result


def test_unconfined_the_probe_reaches_every_path(tmp_path):
    """Control: the same probe with no sandbox at all signals the builder by `kill` and SIGIO, and reaches the
    sibling by every path, and every process of the machine by `prlimit`: the probe is not blind."""
    result, received = _probe(tmp_path, "no-os-layer", sandbox=False)
    reached = {name for name in PATHS if result[name] == "done"}
    assert {"kill_builder", "sigio_builder", "prlimit_sibling", "join_parent_group", "mem_sibling"} <= reached, result
    assert len(received) >= 2 and result["prlimit_reach"] > 1, (received, result)


def test_a_mode_without_seccomp_or_pid_namespace_is_refused_naming_why(monkeypatch):
    """A kernel without seccomp filters and no PID namespace: refused (before: its exports ran one after the other,
    and each could still signal the builder)."""
    monkeypatch.setattr(confinement_module.signals, "available", lambda: False)
    for abi in (0, 5, 7):
        reason = Confinement(namespaces=False, landlock_abi=abi, detail="").refusal()
        assert reason is not None and "no PID namespace and no seccomp filter" in reason and "sandbox-host" in reason
    assert Confinement(namespaces=True, landlock_abi=0, detail="").refusal() is None
    with pytest.raises(InfrastructureFailure, match="refused: no PID namespace and no seccomp"):
        sandboxed("exec", writes=[Path("/nonexistent")], layers=("landlock",))


def test_without_landlock_or_namespaces_the_mode_is_refused_exactly_where_a_child_could_trace(monkeypatch):
    """The rule follows the machine: refused where a process can open its parent's memory (root here, or Yama 0)."""
    state = Confinement(namespaces=False, landlock_abi=0, detail="")
    assert (state.refusal() is not None) is traces_outside()
    monkeypatch.setattr(confinement_module, "traces_outside", lambda: False)  # a runner user under Yama 1
    assert state.refusal() is None
