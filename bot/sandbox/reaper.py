"""`python -m bot.sandbox.reaper CMD ARGS...`: the root of one child's process tree (issue 29).

`bot.sandbox.isolation.run_logged` starts every child through this small process. It makes itself a child subreaper
(`prctl(PR_SET_CHILD_SUBREAPER)`), so a process the child leaves behind, even one that called `setsid()` to leave
its session, is re-parented to it instead of to init: it stays in the tree the memory guard sums and kills. It starts
CMD in a process group of its own (a signal to the child's group never reaches the reaper), reaps whatever it adopts,
and when CMD ends it SIGKILLs every process still below it and waits until none is left, then ends as CMD did (its
exit code, or killed by the same signal): when the builder's wait returns, nothing of the child runs any more, so
nothing can change its output after it is hashed. Without a PID namespace a child could still signal the reaper,
unless the signal guard (`bot.sandbox.signals`) or Landlock's signal scope stops it, as `bot.sandbox.child` arranges.

Where this process may create a cgroup v2 folder below its own (root, or a delegated subtree), CMD runs in a cgroup
of its own (`child_cgroup`): a process cannot leave it by re-parenting or `setsid()`, and the whole cgroup is killed
(`cgroup.kill`) when CMD ends, and again by the builder if the reaper itself was killed (`kill_cgroup`). Elsewhere
(an unprivileged runner without delegation) the subreaper alone holds the tree.

It imports only the standard library: it runs outside the sandbox, before and after the child.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 200
CGROUP_PREFIX = "dflash-child-"


def cgroup_folder() -> Path | None:
    """This process's cgroup v2 folder (the unified hierarchy's mount point joined with the `0::` path of
    `/proc/self/cgroup`), None where there is no unified hierarchy."""
    try:
        own = next(line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except (OSError, StopIteration):
        return None
    for mount in mounts:
        fields, _, rest = mount.partition(" - ")
        parts = fields.split()
        if rest.split()[:1] == ["cgroup2"] and len(parts) > 4 and own.startswith(parts[3]):
            return Path(parts[4]) / own[len(parts[3]) :].lstrip("/")
    return None


def child_cgroup(name: str) -> Path | None:
    """The cgroup named `name` (`cgroup_name()`, chosen by the builder and passed to the reaper as `--cgroup=NAME`)
    below this process's own; None without a unified hierarchy. The name is not the reaper's pid: two builders in
    PID namespaces of their own share a cgroup, and their reapers' pids there can be equal."""
    folder = cgroup_folder()
    return folder / name if folder is not None else None


def cgroup_name() -> str:
    """A child cgroup name no other builder picks (the builder's host-visible pid would not do either: builders may
    run in PID namespaces of their own)."""
    return f"{CGROUP_PREFIX}{secrets.token_hex(8)}"


def kill_cgroup(cgroup: Path | None, *, reap: bool = False, wait_s: float = 5.0) -> None:
    """SIGKILL every process of `cgroup` (`cgroup.kill`, Linux 5.14+; else one by one), wait until it is empty,
    and remove it. Nothing happens when it does not exist. With `reap`, this process is the reaper and reaps them
    (never in the builder: it would take its other children's exit status)."""
    if cgroup is None or not cgroup.is_dir():
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            members = [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            members = []
        if not members or time.monotonic() > deadline:
            break
        try:
            (cgroup / "cgroup.kill").write_text("1")
        except OSError:
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if reap:
            _reap_all()
        time.sleep(0.01)
    with contextlib.suppress(OSError):
        cgroup.rmdir()


def _make_cgroup(name: str | None) -> Path | None:
    cgroup = child_cgroup(name) if name else None
    if cgroup is None:
        return None
    try:
        cgroup.mkdir()
    except OSError:
        return None
    return cgroup


def descendants(root: int) -> list[int]:
    """The live processes below `root`, from `/proc` (parents first)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 1:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, stack = [], list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def kill_below(root: int, *, reap: bool) -> None:
    """SIGKILL every process below `root` until none is left (a process that forks meanwhile is caught in the next
    round: its orphans come to the subreaper). With `reap`, `root` is this process and reaps them too."""
    for _ in range(KILL_ROUNDS):
        found = descendants(root)
        if reap:
            _reap_all()
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if reap:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(-1, 0)


def _reap_all() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _subreaper() -> bool:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def main(argv: list[str]) -> int:
    name = argv[0].removeprefix("--cgroup=") if argv and argv[0].startswith("--cgroup=") else None
    if name is not None:
        argv = argv[1:]
    if not argv:
        print("reaper: no command", file=sys.stderr)
        return 2
    if not _subreaper():
        print("reaper: prctl(PR_SET_CHILD_SUBREAPER) refused: orphans leave the tree", file=sys.stderr)
    cgroup = _make_cgroup(name)

    def enter_cgroup() -> None:  # in the forked child, before exec (this process has one thread: safe)
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text("0")

    try:
        try:
            child = subprocess.Popen(argv, process_group=0, restore_signals=True, preexec_fn=enter_cgroup)
        except subprocess.SubprocessError:  # the cgroup refused it (no delegation): the subreaper alone holds
            kill_cgroup(cgroup)
            cgroup = None
            child = subprocess.Popen(argv, process_group=0, restore_signals=True)
    except OSError as exc:
        kill_cgroup(cgroup)
        print(f"reaper: cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    status = 0
    while True:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child.pid:
            status = os.waitstatus_to_exitcode(raw)
            break
    kill_cgroup(cgroup, reap=True)
    kill_below(os.getpid(), reap=True)
    if status < 0:  # end the way CMD ended, so the builder reads the signal as it would from CMD itself
        sys.stdout.flush()
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        return 128 - status
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
