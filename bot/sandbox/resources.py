"""What a build stage really uses: wall time, peak memory of its process tree, peak disk under its work folder.

The sizing model (`bot.plan.sizing`, constants from docs/scale.md) is fitted on these figures, and the memory guard of
`bot.sandbox.isolation` uses the same process-tree sum. Memory is the resident set size (RSS) summed over a process and
all its descendants, read from ``/proc`` (Linux, as the runners are); shared pages count once per process, as
``/usr/bin/time`` and the kernel's OOM accounting see them. Disk is the space allocated to the files under a
folder, each hard-linked file counted once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SAMPLE_INTERVAL_S = 0.2


@dataclass(frozen=True)
class StageResources:
    """What one stage used.

    Attributes:
        seconds: Wall time of the stage.
        peak_rss_bytes: Highest sampled RSS of the measured process tree.
        peak_disk_bytes: Highest sampled disk use under the work folder (everything there, not just this stage's).
        output_bytes: Disk use of the stage's output folder when it ended (0 when it has none).
    """

    seconds: float
    peak_rss_bytes: int
    peak_disk_bytes: int
    output_bytes: int

    def as_dict(self) -> dict:
        return {
            "seconds": round(self.seconds, 2),
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_disk_bytes": self.peak_disk_bytes,
            "output_bytes": self.output_bytes,
        }


def tree_rss(root_pid: int) -> int:
    """RSS bytes of `root_pid`, all its descendants and every other process of the session it leads (0 once it
    has exited): a child started in a session of its own (`bot.sandbox.isolation`) that leaves an orphan behind,
    re-parented out of its tree, still has it counted."""
    children: dict[int, list[int]] = {}
    in_session: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        ids = _stat_ids(int(entry.name))
        if ids is not None:
            children.setdefault(ids[0], []).append(int(entry.name))
            if ids[2] == root_pid:
                in_session.append(int(entry.name))
    total, stack, seen = 0, [root_pid, *in_session], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _rss(pid)
        stack.extend(children.get(pid, ()))
    return total


def session_members(session: int) -> list[int]:
    """The live processes whose session is `session` (a child's leftovers, wherever they were re-parented)."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            ids = _stat_ids(int(entry.name))
            if ids is not None and ids[2] == session:
                members.append(int(entry.name))
    return members


def disk_used(folder: Path) -> int:
    """Bytes allocated to the files under `folder` (hard links once, symlinks not followed; 0 if missing)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(folder)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we looked
            key = (info.st_dev, info.st_ino)
            if key not in seen:
                seen.add(key)
                total += info.st_blocks * 512
    return total


class PeakSampler:
    """A background thread that keeps the peak RSS of a process tree and, optionally, of disk under a folder.

    `on_sample(rss)` runs after each sample (the memory guard kills the tree from there).
    """

    def __init__(self, pid: int, *, disk: Path | None = None, interval_s: float = SAMPLE_INTERVAL_S, on_sample=None):
        self.pid = pid
        self.disk = disk
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.peak_rss_bytes = 0
        self.peak_disk_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"peak-sampler-{pid}", daemon=True)

    def __enter__(self) -> PeakSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> None:
        rss = tree_rss(self.pid)
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        if self.disk is not None:
            self.peak_disk_bytes = max(self.peak_disk_bytes, disk_used(self.disk))
        if self.on_sample is not None:
            self.on_sample(rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


class _Measurement:
    """Filled in when the `measure` block ends."""

    result: StageResources | None = None


@contextmanager
def measure(
    work: Path, *, output: Path | None = None, pid: int | None = None, interval_s: float = SAMPLE_INTERVAL_S
) -> Iterator[_Measurement]:
    """Measure a block: ``with measure(work, output=ir) as m: ...`` then ``m.result`` is a `StageResources`.

    Args:
        work: Folder whose disk use is sampled (the build's scratch folder).
        output: Folder whose size is the stage's output (measured once, at the end).
        pid: Root of the process tree to sample (default: this process, so child processes count too).
        interval_s: Sampling period; a peak shorter than this can be missed.
    """
    holder = _Measurement()
    started = time.monotonic()
    with PeakSampler(pid or os.getpid(), disk=work, interval_s=interval_s) as sampler:
        yield holder
    holder.result = StageResources(
        seconds=time.monotonic() - started,
        peak_rss_bytes=sampler.peak_rss_bytes,
        peak_disk_bytes=sampler.peak_disk_bytes,
        output_bytes=disk_used(output) if output is not None else 0,
    )


def parent_pid(pid: int) -> int | None:
    ids = _stat_ids(pid)
    return ids[0] if ids is not None else None


def _stat_ids(pid: int) -> tuple[int, int, int] | None:
    """(parent, process group, session) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 4 or fields[0] == b"Z":
        return None
    return int(fields[1]), int(fields[2]), int(fields[3])


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0
