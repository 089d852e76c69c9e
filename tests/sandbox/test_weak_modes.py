"""Issue 29: the weaker sandbox modes hold the same lines. Hosted runners may lack user namespaces (no PID namespace)
and have Landlock below ABI 6 (no signal scope); these run real children through the same runner the build uses
(`run_logged` over `sandboxed`), in those modes forced: Landlock capped at ABI 5 without namespaces, and no OS layer
at all. A compromised child must not signal its sibling or the builder, and nothing it starts (an orphan that left
its session with `setsid()`) may escape the memory guard or outlive it to rewrite its output."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from bot.core.errors import Failure
from bot.sandbox import signals
from bot.sandbox.confinement import Confinement, confinement
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env
from bot.sandbox.landlock import abi_version
from tests.sandbox.test_isolation import _alive

# (layers, Landlock ABI cap): a hosted runner without user namespaces and with Landlock 5, and no OS layer at all.
MODES = {
    "landlock5-no-namespaces": (("landlock",), 5),
    "no-os-layer": ((), None),
}
SIBLING_SLEEP = "4.0293"  # a duration no other process sleeps, so the sibling is found among other tests' processes


def _mode(name: str) -> tuple[tuple[str, ...], int | None]:
    layers, abi = MODES[name]
    if "landlock" in layers and abi_version() < 1:
        pytest.skip("no Landlock in this kernel")
    refused = confinement(layers).refusal()
    if refused is not None:  # test_signal_paths.py checks that no child starts in it
        pytest.skip(f"this mode is refused here: {refused}")
    return layers, abi


def _unrefused_mode() -> str:
    """A mode without a PID namespace that this machine accepts (the weakest first)."""
    for name in reversed(MODES):
        layers, _ = MODES[name]
        if confinement(layers).refusal() is None and ("landlock" not in layers or abi_version() >= 1):
            return name
    pytest.skip("every mode without a PID namespace is refused here")


def _run(folder: Path, script: str, *args: str, mode: str, **kwargs) -> None:
    layers, abi = _mode(mode)
    run_logged(
        [*sandboxed("exec", writes=[folder], layers=layers, landlock_abi=abi), sys.executable, "-c", script, *args],
        log_path=folder.parent / f"{folder.name}.log",
        timeout_s=60,
        env=untrusted_env(home=folder / "home"),
        what=f"{folder.name} export",
        **kwargs,
    )


_INTRUDER = r"""
import json, os, signal, sys
sibling, builder, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
result = {}
for name, pid, sig in (("sibling", sibling, signal.SIGKILL), ("builder", builder, signal.SIGUSR1),
                       ("parent", os.getppid(), signal.SIGUSR1)):
    try:
        os.kill(pid, sig)
        result[name] = "sent"
    except OSError as error:
        result[name] = type(error).__name__
try:
    os.pidfd_open(sibling)
    result["pidfd"] = "opened"
except OSError as error:
    result["pidfd"] = type(error).__name__
os.kill(os.getpid(), 0)  # its own pid stays reachable
open(out, "w").write(json.dumps(result))
"""


@pytest.mark.parametrize("mode", list(MODES))
def test_a_child_without_a_pid_namespace_cannot_signal_its_sibling_nor_the_builder(tmp_path, mode):
    """The builder is this test process (SIGUSR1 is caught here, so a failure of the guard does not end the run)."""
    _mode(mode)  # skips here, not in the sibling's thread
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    sibling_folder, ended = tmp_path / "target", {}

    def sibling() -> None:
        try:
            _run(sibling_folder, f"import time; time.sleep({SIBLING_SLEEP})", mode=mode)
            ended["ok"] = True
        except Failure as error:
            ended["error"] = error.message

    thread = threading.Thread(target=sibling, daemon=True)
    thread.start()
    try:
        sibling_pid = _pid_running(f"time.sleep({SIBLING_SLEEP})")
        own = tmp_path / "draft"
        _run(own, _INTRUDER, str(sibling_pid), str(_builder_pid()), str(own / "result.json"), mode=mode)
        thread.join(30)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    result = json.loads((own / "result.json").read_text())
    assert result == dict.fromkeys(("sibling", "builder", "parent", "pidfd"), "PermissionError"), result
    assert received == []
    assert ended == {"ok": True}, ended  # the sibling ran to its end


def _builder_pid() -> int:
    return os.getpid()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _pids_running(needle: str) -> list[int]:
    return [
        int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and needle.encode() in _cmdline(int(e.name))
    ]


def _pid_running(needle: str, deadline_s: float = 20) -> int:
    """The innermost process running `needle`: the interpreter the sandbox child exec'd into (not the reaper or the
    sandbox child, whose command lines hold it too)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pid in _pids_running(needle):
            if not any(part in _cmdline(pid) for part in (b"bot/sandbox", b"bot.sandbox")):
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no process runs {needle!r}")


# The child writes GOOD and ends at once; a grandchild that left the session (setsid) and whose parent ended
# rewrites the output a moment later, when the builder hashes it.
_LEAVER = r"""
import os, sys, time
out, ready = sys.argv[1], sys.argv[2]
open(out, "w").write("GOOD")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(ready, "w").write(str(os.getpid()))
        time.sleep(1.0)
        open(out, "w").write("TAMPERED")
        os._exit(0)
    os._exit(0)
while not os.path.exists(ready):
    time.sleep(0.01)
"""


@pytest.mark.parametrize("mode", list(MODES))
def test_a_setsid_grandchild_is_killed_before_the_output_is_read(tmp_path, mode):
    own = tmp_path / "target"
    out, ready = own / "openvino_model.bin", own / "orphan.pid"
    _run(own, _LEAVER, str(out), str(ready), mode=mode)
    validated = out.read_text()
    time.sleep(1.5)  # past the moment the orphan meant to rewrite it
    assert (validated, out.read_text()) == ("GOOD", "GOOD")
    assert not _alive(int(ready.read_text()))


# The child's helper forks an orphan that leaves the session and grows; the helper ends, so the orphan is re-parented
# away from the child (to init, before issue 29), while the child itself lives on.
_GROWER = r"""
import os, sys, time
pid_file = sys.argv[1]
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        open(pid_file, "w").write(str(os.getpid()))
        blocks = []
        for _ in range(8):
            blocks.append(bytearray(50 * 2**20)); time.sleep(0.1)
        time.sleep(30)
    os._exit(0)
time.sleep(5)
"""


@pytest.mark.parametrize("mode", list(MODES))
def test_a_setsid_orphan_counts_against_the_budget_of_the_child_that_left_it(tmp_path, mode):
    own = tmp_path / "draft"
    pid_file = own / "orphan.pid"
    with pytest.raises(Failure, match=r"over the budget of 0\.31 GB"):
        _run(own, _GROWER, str(pid_file), mode=mode, memory_budget_bytes=300 * 2**20)
    time.sleep(0.3)
    assert not _alive(int(pid_file.read_text()))


def test_without_a_signal_guard_the_exports_run_one_after_the_other(monkeypatch, own_logger, capsys):
    from bot.builder.group import exports_side_by_side
    from bot.core import log

    log.setup()

    landlock5 = Confinement(namespaces=False, landlock_abi=5, detail="")
    assert exports_side_by_side(Confinement(namespaces=True, landlock_abi=0, detail=""))
    assert exports_side_by_side(Confinement(namespaces=False, landlock_abi=6, detail=""))
    assert exports_side_by_side(landlock5) is signals.available()
    monkeypatch.setattr(signals, "available", lambda: False)  # a kernel without seccomp filters
    assert landlock5.signal_guard() is None
    assert not exports_side_by_side(landlock5)
    assert "exports run one after the other: nothing here keeps a child from signalling its sibling" in (
        capsys.readouterr().err
    )


def _cgroups_here() -> bool:
    """Whether this process may make a cgroup v2 folder below its own (root, or a delegated subtree)."""
    from bot.sandbox.reaper import cgroup_folder

    folder = cgroup_folder()
    if folder is None:
        return False
    probe = folder / f"dflash-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    probe.rmdir()
    return True


_HOLDER = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(30)
time.sleep(30)
"""


@pytest.mark.skipif(not _cgroups_here(), reason="no cgroup v2 folder this process may create (no delegation)")
def test_in_its_cgroup_an_orphan_dies_even_when_the_reaper_itself_is_killed(tmp_path):
    """The subreaper holds the tree while it lives; the child's cgroup holds it when something killed the reaper."""
    own, caught = tmp_path / "draft", {}
    pid_file = own / "orphan.pid"
    mode = _unrefused_mode()

    def run() -> None:
        try:
            _run(own, _HOLDER, str(pid_file), mode=mode)
        except Failure as error:
            caught["message"] = error.message

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    orphan = int(pid_file.read_text())
    reaper_pid = next(pid for pid in _pids_running(str(pid_file)) if b"reaper.py" in _cmdline(pid))
    os.kill(reaper_pid, signal.SIGKILL)
    thread.join(30)
    assert "killed by SIGKILL from outside the bot" in caught["message"], caught
    time.sleep(0.2)
    assert not _alive(orphan)


def test_a_child_killed_by_sigkill_ends_its_reaper_by_sigkill_too(tmp_path):
    """The reaper ends as its child did, so the builder reads "killed by SIGKILL" (a runner's fault, retried), not
    an exit 1 with an OSError: SIGKILL has no handler to reset before the reaper kills itself with it."""
    import subprocess

    from bot.sandbox import reaper

    done = subprocess.run(
        [sys.executable, reaper.__file__, sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "OSError" not in done.stderr
