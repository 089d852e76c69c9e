"""The trust boundary for the processes that touch untrusted checkpoints (docs/design.md §3).

Exports and GenAI runs happen in child processes that get an environment without any Hub token, run offline,
have a wall-clock limit and, optionally, a memory budget, and have their whole process group killed when they
overrun either: a build that outgrows its runner class ends as a named failure, not as the kernel's OOM kill that
takes the runner (and the report) down with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from bot.core import log
from bot.core.errors import Failure, InfrastructureFailure, RunnerFault, Stage, runner_fault_in
from bot.core.settings import SANDBOX_LAYERS
from bot.sandbox import reaper
from bot.sandbox.confinement import NAMESPACE_PREFIX, confinement, scrubbed_env
from bot.sandbox.resources import MemorySample, Peaks, PeakSampler, session_members


def untrusted_env(base: Mapping[str, str] | None = None, *, home: Path | None = None) -> dict[str, str]:
    """Environment for a process that loads checkpoint files: no secrets, offline, no telemetry
    (`bot.sandbox.confinement.scrubbed_env`, the one scrubber).

    With `home`, everything the child's libraries write goes inside it: HF cache, HOME (OpenVINO's telemetry state
    lives in $HOME/intel), TMPDIR and the XDG folders.
    """
    offline = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_XET": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if home is not None:
        # A private HF cache: nothing from the user's cache (or a token file in it) is visible.
        offline |= {
            "HF_HOME": str(home),
            "HOME": str(home / "home"),
            "TMPDIR": str(home / "tmp"),
            "XDG_CACHE_HOME": str(home / "home" / ".cache"),
            "XDG_CONFIG_HOME": str(home / "home" / ".config"),
            "XDG_DATA_HOME": str(home / "home" / ".local" / "share"),
        }
    return scrubbed_env(base, variables=offline)


def sandboxed(
    tool: str,
    python: str | None = None,
    *,
    reads: Sequence[Path] = (),
    writes: Sequence[Path] = (),
    layers: Sequence[str] = SANDBOX_LAYERS,
    landlock_abi: int | None = None,
) -> list[str]:
    """Command running `tool` (optimum-cli, validate or exec) behind `bot.sandbox.child`, confined by the OS.

    Args:
        tool: what the sandbox runs after its checks.
        python: the interpreter of the job's toolchain profile (None: this one).
        reads: input folders the child may read (the checkpoint working copies, IR folders).
        writes: folders it may write (its output and its HOME/TMPDIR/HF_HOME, see `untrusted_env`).
        layers: the OS confinement layers allowed (`Settings.sandbox_layers`; all by default): the namespaces
            are chosen here, Landlock is told to the child (`--no-landlock` when left out).
        landlock_abi: the highest Landlock ABI the child may use (None: the kernel's); the tests of an older
            kernel's mode set it (5: no signal scope, so the child's seccomp signal guard holds instead).

    Returns:
        The command prefix: in fresh user, PID, mount and network namespaces when the machine and `layers` allow
        them (`confinement()`), then `bot.sandbox.child`, which applies Landlock (when `layers` has it) to `reads`
        and `writes` before loading.
    """
    folders = [arg for path in reads for arg in ("--read", str(path))]
    folders += [arg for path in writes for arg in ("--write", str(path))]
    landlock = [] if "landlock" in layers else ["--no-landlock"]
    if landlock_abi is not None:
        landlock += ["--landlock-abi", str(landlock_abi)]
    return [*sandbox_prefix(python, layers), *landlock, *folders, tool]


def sandbox_prefix(python: str | None = None, layers: Sequence[str] = SANDBOX_LAYERS) -> list[str]:
    """What every `sandboxed` command starts with: the namespace wrapper when the machine and `layers` allow one,
    then `python -m bot.sandbox.child`.

    Raises:
        InfrastructureFailure: a child could signal or trace processes outside its own tree in this mode
            (`Confinement.refusal`, naming why and what to change): the runner's fault, never the source's.
    """
    state = confinement(layers)
    refused = state.refusal()
    if refused is not None:
        raise InfrastructureFailure(refused, stage=Stage.SANDBOX)
    _announce(state.describe())
    wrapper = list(NAMESPACE_PREFIX) if state.namespaces else []
    return [*wrapper, python or sys.executable, "-m", "bot.sandbox.child"]


_announced: set[str] = set()


def _announce(line: str) -> None:
    """Log what confines the children once per process (and again only if it changes)."""
    if line not in _announced:
        _announced.add(line)
        log.step("%s", line)


_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
_stopping = threading.Event()


def stop_all_children() -> None:
    """Kill every running child process group and refuse new ones (on SIGTERM: threads waiting on an exporter
    return at once, so the scratch folders can be removed before the bot exits)."""
    _stopping.set()
    with _children_lock:
        children = list(_children)
    for child in children:
        _kill_group(child)


@contextlib.contextmanager
def tracked(process: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Count a process started elsewhere (the token-free builder) among the children SIGTERM kills; it is killed
    too when the caller unwinds with an exception."""
    with _children_lock:
        _children.add(process)
    try:
        yield process
    except BaseException:
        _kill_group(process)
        raise
    finally:
        with _children_lock:
            _children.discard(process)


def run_logged(
    cmd: Sequence[str],
    *,
    log_path: Path,
    timeout_s: float,
    env: Mapping[str, str],
    what: str,
    cwd: Path | None = None,
    memory_budget_bytes: int | None = None,
) -> Peaks:
    """Run `cmd`, stdout and stderr into `log_path`, within `timeout_s` and `memory_budget_bytes`.

    The child runs below a subreaper of its own (`bot.sandbox.reaper`): a process it leaves behind, even one that
    left its session with `setsid()`, stays in its tree. The memory of that whole tree (and of the child's session)
    is sampled while it runs (`bot.sandbox.resources.PeakSampler`), and every process of it is killed before this
    returns: nothing the child started can change its output once the caller hashes it.

    Args:
        memory_budget_bytes: when the tree's anonymous memory plus swap goes over this, its process group is killed
            (None: no limit). File-backed pages (mapped weights) do not count: the kernel drops and re-reads them
            under pressure, so they slow a build down but never make it run out of memory.

    Returns:
        The peaks of the child's process tree: RSS, anonymous (plus swap) and file-backed, in bytes.

    Raises:
        Failure: non-zero exit (with the last meaningful log line, and the signal and its sender when a signal
            ended it: `exit_cause`), timeout, or the memory budget exceeded (naming `what`, the anonymous and
            file-backed memory when it crossed, and the budget); the process group is killed in the last two cases.
            The time and memory limits are the recipe's, which the status memory fingerprints: a source over them
            fails the same way again until the recipe changes, so this failure is remembered as the source's.
        InfrastructureFailure: the bot is stopping (SIGTERM), so the child was not started or was killed; or its
            log shows the runner's disk was full (`disk_full_line`, `runner` DISK_FULL), whatever its last line.
    """
    if _stopping.is_set():
        raise InfrastructureFailure(f"{what} not started: the bot is stopping")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    oom_kills = kernel_oom_kills()
    cgroup = reaper.cgroup_name()
    process = _start([*REAPER, f"--cgroup={cgroup}", *cmd], log_path=log_path, env=env, cwd=cwd)
    _cgroups[process.pid] = cgroup
    with _children_lock:
        _children.add(process)
    over_budget = threading.Event()
    crossing: list[MemorySample] = []  # the sample that went over the budget

    def guard(memory: MemorySample) -> None:
        if (
            memory_budget_bytes is not None
            and memory.unreclaimable_bytes > memory_budget_bytes
            and not over_budget.is_set()
        ):
            crossing.append(memory)
            over_budget.set()
            _kill_group(process, wait=False)

    try:
        # The sampler counts everything below the reaper (orphans are re-parented to it, whatever their session)
        # and the child's session: a process it left behind counts against its budget, and is killed with it.
        # A line every `log.PROGRESS_INTERVAL_S` while it runs, with its log's name (two drafts' exports may run at
        # once) and last line: a long export or measurement is never silent for minutes.
        with (
            log.heartbeat(what, lambda: f"{log_path.name}: {last_line(log_path)}"),
            PeakSampler(process.pid, on_sample=guard, include_root=False) as sampler,
        ):
            code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise Failure(f"{what} timed out after {timeout_s:.0f}s (log: {log_path.name})") from None
    except BaseException:  # KeyboardInterrupt or SystemExit from SIGTERM: no orphaned exporter
        _kill_group(process)
        raise
    finally:
        _kill_group(process)  # nothing the child started outlives it (the reaper did so already when it ended)
        kill_session(process.pid)
        with _children_lock:
            _children.discard(process)
    if over_budget.is_set():
        raise Failure(over_budget_message(what, crossing[0], memory_budget_bytes or 0, log_path))
    if _stopping.is_set():
        raise InfrastructureFailure(f"{what} stopped: the bot is stopping (SIGTERM), so its child was killed")
    if code != 0:
        raise _exit_failure(what, code, log_path, oom_kills, sampler.peaks)
    return sampler.peaks


def _exit_failure(what: str, code: int, log_path: Path, oom_kills: int | None, peaks: Peaks) -> Failure:
    """The failure of a child that exited non-zero: the runner's when its log shows a full disk."""
    cause = exit_cause(_signal_through_unshare(code, log_path), oom_kills, peaks)
    message = f"{what} failed ({cause}): {last_error_line(log_path)}"
    full = disk_full_line(log_path)
    if full is not None:  # the runner's disk, wherever the child's last line hid it (issue 41)
        return InfrastructureFailure(f"{message}; its log: {full}", runner=RunnerFault.DISK_FULL)
    return Failure(message)


def disk_full_line(log_path: Path) -> str | None:
    """The last line of a child's log (its last 64 kB) where the operating system said the disk is full (ENOSPC,
    EDQUOT), cut to 200 characters; None when none does. A library that catches the `OSError` and raises its own
    error (a chained traceback, a writer's "file write failed") leaves it above the last line, and a full disk is
    the runner's, never the source's."""
    for line in reversed(_log_tail(log_path, 64 * 1024).splitlines()):
        if runner_fault_in(line) is RunnerFault.DISK_FULL:
            return line.strip()[:200]
    return None


def over_budget_message(what: str, memory: MemorySample, budget_bytes: int, log_path: Path) -> str:
    """The guard's failure: the stage, the memory that crossed (anonymous and file-backed) and the budget."""
    anon = memory.unreclaimable_bytes
    swapped = f", {_gb(memory.swap_bytes)} of it swapped" if memory.swap_bytes else ""
    return (
        f"{what} stopped: its processes held {_gb(anon)} of anonymous memory ({anon} bytes{swapped}; "
        f"{_gb(memory.file_bytes)} file-backed besides, which does not count), over the budget of "
        f"{_gb(budget_bytes)} ({budget_bytes} bytes); build it on a runner class with more memory "
        f"(log: {log_path.name})"
    )


def exit_cause(code: int, oom_kills_before: int | None, peaks: Peaks) -> str:
    """Why a child ended with `code`, naming the killer when a signal ended it. The bot's own kills (memory guard,
    time limit, shutdown) are reported before this is asked, so a signal here came from elsewhere.

    `oom_kills_before` is `kernel_oom_kills()` from when the child started: a rise means the kernel's OOM killer
    killed a process meanwhile.
    """
    # A signal ends the child (-n), or `unshare` and shells pass it on as 128 + n.
    signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    if signum is None:
        return f"exit {code}"
    name = signal.Signals(signum).name if signum in _SIGNALS else f"signal {signum}"
    peaked = f"{_gb(peaks.anon_bytes)} anonymous, {_gb(peaks.rss_bytes)} resident"
    oom_kills = kernel_oom_kills()
    if oom_kills is not None and oom_kills_before is not None and oom_kills > oom_kills_before:
        return (
            f"exit {code}: killed by {name} from the kernel's OOM killer, the machine ran out of memory "
            f"(its processes peaked at {peaked})"
        )
    if signum in _CRASHES:
        return f"exit {code}: it crashed ({name})"
    return (
        f"exit {code}: killed by {name} from outside the bot (not its memory guard, time limit or shutdown, nor "
        f"the kernel's OOM killer; its processes peaked at {peaked})"
    )


_SIGNALS = {int(s) for s in signal.Signals}
_CRASHES = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}


def _signal_through_unshare(code: int, log_path: Path) -> int:
    """`unshare --fork` passes a child's fatal signal on by killing itself with it, except SIGKILL, which it
    cannot reset (util-linux then exits 1 saying "sigprocmask unblock failed"): that is the child's SIGKILL."""
    if code == 1 and _UNSHARE_SIGKILL in _log_tail(log_path):
        return -signal.SIGKILL
    return code


_UNSHARE_SIGKILL = "unshare: sigprocmask unblock failed"


def _log_tail(log_path: Path, size: int = 4096) -> str:
    try:
        with log_path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - size))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def last_line(log_path: Path, limit: int = 160) -> str:
    """What a running child says it is doing: the last line of its log with text on it (`no output yet` before
    one), cut to `limit` characters; a progress bar's carriage returns count as line ends."""
    for line in reversed(_log_tail(log_path).replace("\r", "\n").splitlines()):
        if line.strip():
            text = line.strip()
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return "no output yet"


def kernel_oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed since boot (`/proc/vmstat`), None where unknown."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def kill_session(session: int) -> None:
    """SIGKILL every process left in the child's session (its process group and any group it made since)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, signal.SIGKILL)
    for pid in session_members(session):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _start(cmd: Sequence[str], *, log_path: Path, env: Mapping[str, str], cwd: Path | None) -> subprocess.Popen:
    """Start `cmd` as a fresh process with its output in `log_path`, in a session and process group of its own
    (never forked from a process that has loaded anything: each child imports its libraries itself)."""
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            list(cmd), stdout=log_file, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd, start_new_session=True
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


# Every child starts below its own subreaper (a file of the standard library only, run in isolated mode).
REAPER = (sys.executable, "-I", str(Path(reaper.__file__).resolve()))
_cgroups: dict[int, str] = {}  # a running child's reaper pid -> the name of the cgroup it was given


def _kill_group(process: subprocess.Popen, *, wait: bool = True) -> None:
    """SIGKILL everything below `process` (until nothing is left: orphans come back to its reaper), then its
    process group."""
    if process.poll() is None:
        reaper.kill_below(process.pid, reap=False)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    # its cgroup, where it made one: what it held survives it when the reaper itself was killed
    if (cgroup := _cgroups.get(process.pid)) is not None:
        reaper.kill_cgroup(reaper.child_cgroup(cgroup))
    if wait:
        process.wait()


_NOISE = re.compile(r"^\s*(warnings\.warn|File \"|\^|~|$)")


def last_error_line(log_path: Path, limit: int = 400) -> str:
    """The line that says what went wrong: the last exception line of a traceback, else the last line."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line.strip()):
            return line.strip()[:limit]
    for line in reversed(lines):
        if not _NOISE.match(line):
            return line.strip()[:limit]
    return "(empty log)"
