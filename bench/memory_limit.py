"""Run a command inside a memory limit the kernel enforces (`bench/floor.py` finds a stage's smallest one).

The memory guard and the sizing model use sampled figures; a cgroup is the machine itself saying no. A limit
counts every page the command's processes are charged for, page cache included, but the kernel drops clean
file-backed pages (mapped weights) to stay under it and reads them again when needed, so a stage runs on below its
peak RSS, only slower; it is killed only when its anonymous memory does not fit.

Three ways to set the limit, the first that the machine offers:
- cgroup v1 (``/sys/fs/cgroup/memory``): a child group of this process's own memory group, with
  ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes`` (memory + swap) both set to the limit;
- cgroup v2 (``/sys/fs/cgroup`` unified, as root): a group with ``memory.max`` and ``memory.swap.max = 0``;
- ``systemd-run --scope -p MemoryMax= -p MemorySwapMax=0`` (``--user`` when not root), as on GitHub's runners.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.sandbox.resources import Peaks, PeakSampler, parent_pid

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class LimitedRun:
    """One run of a command, with or without a memory limit.

    Attributes:
        limit_bytes: The limit it ran under (None: unlimited).
        seconds: Wall time until it ended (or was stopped at its time limit).
        returncode: Its exit status (negative: the signal that ended it).
        oom_killed: The kernel's OOM killer killed one of its processes (read from the cgroup where it can be).
        timed_out: Stopped at its time limit (too slow to count, whatever the limit).
        peaks: Its process tree's sampled RSS, anonymous and file-backed peaks.
        failcnt: How often the cgroup hit its limit (v1: memory.failcnt; v2: memory.events `max`), None if unknown.
        method: How the limit was set.
    """

    limit_bytes: int | None
    seconds: float
    returncode: int
    oom_killed: bool
    timed_out: bool
    peaks: Peaks
    failcnt: int | None = None
    method: str = "none"

    @property
    def finished(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        limit = "unlimited" if self.limit_bytes is None else f"limit {_gb(self.limit_bytes)} ({self.method})"
        if self.finished:
            outcome = "finished"
        elif self.timed_out:
            outcome = "too slow (stopped)"
        elif self.oom_killed:
            outcome = "OOM-killed"
        else:
            outcome = f"failed (exit {self.returncode})"
        hits = f", limit hit {self.failcnt} times" if self.failcnt else ""
        return (
            f"{limit}: {outcome} in {self.seconds:.1f} s, peak RSS {_gb(self.peaks.rss_bytes)}, anonymous "
            f"{_gb(self.peaks.anon_bytes)}, file-backed {_gb(self.peaks.file_bytes)}{hits}"
        )


class _Cgroup:
    """One memory limit for the processes started through `command`; `oom_kills` and `failcnt` read it after."""

    method = "none"

    def command(self, cmd: Sequence[str]) -> list[str]:
        return list(cmd)

    def oom_kills(self) -> int | None:
        return None

    def failcnt(self) -> int | None:
        return None

    def kill(self, pid: int) -> None:
        """Kill `pid` and every process below it (the bot starts its children in sessions of their own, so
        killing the session of `pid` would leave them running)."""
        for victim in [pid, *_descendants(pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)

    def remove(self) -> None:
        pass


class _DirectCgroup(_Cgroup):
    """A cgroup folder this process creates (as root); the command joins it from a shell before it execs."""

    def __init__(self, folder: Path, settings: dict[str, int], method: str):
        self.folder, self.method = folder, method
        folder.mkdir()
        for name, value in settings.items():  # in order: v1 wants memory.limit before memory.memsw.limit
            if (folder / name).exists():
                (folder / name).write_text(str(value))

    def command(self, cmd: Sequence[str]) -> list[str]:
        # The shell moves itself into the group, then becomes the command: nothing runs outside the limit.
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.folder), *cmd]

    def _counter(self, name: str, key: str) -> int | None:
        try:
            for line in (self.folder / name).read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
        except (OSError, ValueError):
            pass
        return None

    def oom_kills(self) -> int | None:
        return self._counter("memory.oom_control" if self.method == "cgroup v1" else "memory.events", "oom_kill")

    def failcnt(self) -> int | None:
        if self.method == "cgroup v1":
            with contextlib.suppress(OSError, ValueError):
                return int((self.folder / "memory.failcnt").read_text())
            return None
        return self._counter("memory.events", "max")

    def kill(self, pid: int) -> None:
        super().kill(pid)
        for _ in range(50):  # and whatever else joined the group (re-parented orphans)
            members = [int(line) for line in (self.folder / "cgroup.procs").read_text().split()]
            if not members:
                return
            for victim in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            time.sleep(0.1)

    def remove(self) -> None:
        # The group's processes are gone; its page cache is handed to the parent, so it can be removed.
        for _ in range(50):
            try:
                self.folder.rmdir()
                return
            except OSError:
                time.sleep(0.1)


class _SystemdScope(_Cgroup):
    """`systemd-run --scope`: systemd makes and removes the group; only the exit signal tells an OOM kill."""

    method = "systemd-run"

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes

    def command(self, cmd: Sequence[str]) -> list[str]:
        user = [] if os.geteuid() == 0 else ["--user"]
        return [
            "systemd-run",
            *user,
            "--scope",
            "--quiet",
            "-p",
            f"MemoryMax={self.limit_bytes}",
            "-p",
            "MemorySwapMax=0",
            "--",
            *cmd,
        ]


def limit_method() -> str:
    """How `memory_limit` will set a limit on this machine (or why it cannot)."""
    if _v1_parent() is not None:
        return "cgroup v1"
    if (CGROUP_ROOT / "cgroup.controllers").is_file() and os.geteuid() == 0:
        return "cgroup v2"
    if _which("systemd-run"):
        return "systemd-run"
    return "none: no writable memory cgroup and no systemd-run"


@contextlib.contextmanager
def memory_limit(limit_bytes: int | None) -> Iterator[_Cgroup]:
    """A memory limit of `limit_bytes` (memory + swap) for the commands `.command(cmd)` wraps; None: none.

    Raises:
        SystemExit: the machine offers no way to set one (`limit_method`).
    """
    if limit_bytes is None:
        yield _Cgroup()
        return
    name = f"dflash-bench-{uuid.uuid4().hex[:8]}"
    method = limit_method()
    group: _Cgroup
    if method == "cgroup v1":
        parent = _v1_parent()
        assert parent is not None
        group = _DirectCgroup(
            parent / name, {"memory.limit_in_bytes": limit_bytes, "memory.memsw.limit_in_bytes": limit_bytes}, method
        )
    elif method == "cgroup v2":
        group = _DirectCgroup(CGROUP_ROOT / name, {"memory.max": limit_bytes, "memory.swap.max": 0}, method)
    elif method == "systemd-run":
        group = _SystemdScope(limit_bytes)
    else:
        raise SystemExit(f"cannot limit memory here ({method})")
    try:
        yield group
    finally:
        group.remove()


def _v1_parent() -> Path | None:
    """This process's own v1 memory group (a child of it stays inside whatever limit it is under), if writable."""
    mount = CGROUP_ROOT / "memory"
    if not (mount / "memory.limit_in_bytes").is_file():
        return None
    own = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                own = path.lstrip("/")
    for folder in (mount / own, mount):
        if folder.is_dir() and os.access(folder, os.W_OK):
            return folder
    return None


def evict_page_cache(folders: Sequence[Path]) -> None:
    """Write out and drop the cached pages of every file under `folders` (the stage's inputs).

    The page cache is charged to the group that first read a page: pages the stage before left cached would be
    free for the stage under test, and warm for one run and not another. Evicted before every run, each run reads
    its inputs from disk and is charged for them.
    """
    for folder in folders:
        for path in [folder] if folder.is_file() else folder.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            with contextlib.suppress(OSError):
                descriptor = os.open(path, os.O_RDONLY)
                try:
                    os.fdatasync(descriptor)
                    os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(descriptor)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            parent = parent_pid(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def _which(program: str) -> bool:
    return any((Path(folder) / program).is_file() for folder in os.environ.get("PATH", "").split(os.pathsep) if folder)


def run_limited(
    cmd: Sequence[str],
    limit_bytes: int | None,
    *,
    log: Path,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
) -> LimitedRun:
    """Run `cmd` under `limit_bytes` (None: no limit), sampling its process tree; output goes to `log`.

    A run past `timeout_s` is killed (its whole session) and counts as too slow.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with memory_limit(limit_bytes) as group, log.open("ab") as output:
        kills_before = group.oom_kills()
        started = time.monotonic()
        process = subprocess.Popen(
            group.command(cmd), stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        timed_out = False
        with PeakSampler(process.pid) as sampler:
            try:
                returncode = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                group.kill(process.pid)
                returncode = process.wait()
        seconds = time.monotonic() - started
        kills_after = group.oom_kills()
        if kills_before is not None and kills_after is not None:
            oom_killed = kills_after > kills_before
        else:  # systemd-run: a SIGKILL nobody here sent is the OOM killer's
            oom_killed = not timed_out and returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)
        return LimitedRun(
            limit_bytes, seconds, returncode, oom_killed, timed_out, sampler.peaks, group.failcnt(), group.method
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"
