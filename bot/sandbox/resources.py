"""What a build stage really uses: wall time, peak memory of its process tree, peak disk under its work folder.

The sizing model (`bot.plan.sizing`, constants from docs/scale.md) is fitted on these figures, and the memory guard of
`bot.sandbox.isolation` uses the same process-tree sums. Memory is read from ``/proc/<pid>/status`` for a process and
all its descendants (Linux, as the runners are) and kept by kind, because only one kind can kill a build: anonymous
memory (RssAnon, plus VmSwap once swapped out) cannot be dropped, while file-backed pages (RssFile: mapped safetensors
and IR weights) are dropped by the kernel under pressure and read again. The resident set size (RSS) is their sum with
RssShmem; shared pages count once per process, as ``/usr/bin/time`` sees them. Disk is the space allocated to the
files under a folder, each hard-linked file counted once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.core.record import StageResources

SAMPLE_INTERVAL_S = 0.2
# The lines of /proc/<pid>/status this module reads, in kB, and the `MemorySample` field each one adds to.
_STATUS_FIELDS = {
    b"RssAnon:": "anon_bytes",
    b"RssFile:": "file_bytes",
    b"RssShmem:": "shmem_bytes",
    b"VmSwap:": "swap_bytes",
}


@dataclass(frozen=True)
class MemorySample:
    """Memory of a process tree at one moment, by kind (each summed over its processes).

    Attributes:
        anon_bytes: Resident anonymous memory (RssAnon): heaps, compiled models, tensors; the kernel cannot drop it.
        file_bytes: Resident file-backed pages (RssFile): mapped weights the kernel may drop and read again.
        shmem_bytes: Resident shared memory (RssShmem: tmpfs, shared anonymous mappings).
        swap_bytes: Anonymous memory swapped out (VmSwap).
    """

    anon_bytes: int = 0
    file_bytes: int = 0
    shmem_bytes: int = 0
    swap_bytes: int = 0

    @property
    def rss_bytes(self) -> int:
        """The resident set size (VmRSS), as earlier figures and ``/usr/bin/time`` give it."""
        return self.anon_bytes + self.file_bytes + self.shmem_bytes

    @property
    def unreclaimable_bytes(self) -> int:
        """Anonymous memory, resident or swapped: what a memory budget (and the OOM killer) must hold."""
        return self.anon_bytes + self.swap_bytes

    def __add__(self, other: MemorySample) -> MemorySample:
        return MemorySample(
            self.anon_bytes + other.anon_bytes,
            self.file_bytes + other.file_bytes,
            self.shmem_bytes + other.shmem_bytes,
            self.swap_bytes + other.swap_bytes,
        )


@dataclass(frozen=True)
class Peaks:
    """The highest sample of each kind of memory over a run; each may come from a different moment.

    Attributes:
        rss_bytes: Highest resident set size.
        anon_bytes: Highest anonymous memory, resident plus swapped (`MemorySample.unreclaimable_bytes`).
        file_bytes: Highest resident file-backed memory.
        shmem_bytes: Highest resident shared memory.
    """

    rss_bytes: int = 0
    anon_bytes: int = 0
    file_bytes: int = 0
    shmem_bytes: int = 0

    def with_sample(self, memory: MemorySample) -> Peaks:
        return Peaks(
            max(self.rss_bytes, memory.rss_bytes),
            max(self.anon_bytes, memory.unreclaimable_bytes),
            max(self.file_bytes, memory.file_bytes),
            max(self.shmem_bytes, memory.shmem_bytes),
        )


def tree_memory(root_pid: int, *, include_root: bool = True) -> MemorySample:
    """Memory of `root_pid`, all its descendants and every other process of the session it leads (zero once it
    has exited): a child started in a session of its own (`bot.sandbox.isolation`) that leaves an orphan behind,
    re-parented out of its tree, still has it counted; one that left the session too is counted when `root_pid`
    is its subreaper (`bot.sandbox.reaper`), which adopts it. Without `include_root`, `root_pid`'s own memory
    (the reaper's) is left out."""
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
    total, stack, seen = MemorySample(), [root_pid, *in_session], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if include_root or pid != root_pid:
            total += process_memory(pid)
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
    """A background thread that keeps the peak memory of a process tree, of each kind (`Peaks`), and, optionally,
    of disk under a folder.

    `on_sample(memory)` runs after each sample with that sample's `MemorySample` (the memory guard kills the tree from
    there).
    """

    def __init__(
        self,
        pid: int,
        *,
        disk: Path | None = None,
        interval_s: float = SAMPLE_INTERVAL_S,
        on_sample: Callable[[MemorySample], None] | None = None,
        include_root: bool = True,
    ):
        self.pid = pid
        self.include_root = include_root
        self.disk = disk
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.peaks = Peaks()
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

    @property
    def peak_rss_bytes(self) -> int:
        return self.peaks.rss_bytes

    def sample(self) -> None:
        memory = tree_memory(self.pid, include_root=self.include_root)
        self.peaks = self.peaks.with_sample(memory)
        if self.disk is not None:
            self.peak_disk_bytes = max(self.peak_disk_bytes, disk_used(self.disk))
        if self.on_sample is not None:
            self.on_sample(memory)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


class Measurement:
    """Filled in when the `measure` block ends: the stage's cost as the build record keeps it (`result`), and every
    memory peak sampled (`peaks`, shared memory too, which the record leaves out)."""

    _result: StageResources | None = None
    peaks: Peaks = Peaks()

    @property
    def result(self) -> StageResources:
        if self._result is None:
            raise RuntimeError("a measurement is read once its `measure` block has ended")
        return self._result


@contextmanager
def measure(
    work: Path, *, output: Path | None = None, pid: int | None = None, interval_s: float = SAMPLE_INTERVAL_S
) -> Iterator[Measurement]:
    """Measure a block: ``with measure(work, output=ir) as m: ...`` then ``m.result`` is a `StageResources`
    (`bot.core.record`, the build record's own type) and ``m.peaks`` every memory peak.

    Args:
        work: Folder whose disk use is sampled (the build's scratch folder).
        output: Folder whose size is the stage's output (measured once, at the end).
        pid: Root of the process tree to sample (default: this process, so child processes count too).
        interval_s: Sampling period; a peak shorter than this can be missed.
    """
    holder = Measurement()
    started = time.monotonic()
    with PeakSampler(pid or os.getpid(), disk=work, interval_s=interval_s) as sampler:
        yield holder
    holder.peaks = sampler.peaks
    holder._result = stage_resources(
        time.monotonic() - started,
        sampler.peaks,
        peak_disk_bytes=sampler.peak_disk_bytes,
        output_bytes=disk_used(output) if output is not None else None,
    )


def stage_resources(
    seconds: float, peaks: Peaks, *, peak_disk_bytes: int | None = None, output_bytes: int | None = None
) -> StageResources:
    """A stage's cost as the build record keeps it, from its wall time and its process tree's memory peaks.

    Args:
        seconds: Wall time of the stage.
        peaks: Memory peaks of its process tree (shared memory is sampled, not recorded).
        peak_disk_bytes: Highest sampled disk use under the work folder (None: not sampled).
        output_bytes: Disk use of the stage's output folder when it ended (None: it has none).
    """
    return StageResources(
        seconds=seconds,
        peak_rss_bytes=peaks.rss_bytes,
        peak_anon_bytes=peaks.anon_bytes,
        peak_file_bytes=peaks.file_bytes,
        peak_disk_bytes=peak_disk_bytes,
        output_bytes=output_bytes,
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


def process_memory(pid: int) -> MemorySample:
    """One process's memory by kind, from ``/proc/<pid>/status`` (zero once it is gone, and for kernel threads)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            status = handle.read()
    except OSError:
        return MemorySample()
    kilobytes = {}
    for line in status.splitlines():
        name, _, rest = line.partition(b"\t")
        field = _STATUS_FIELDS.get(name)
        if field is not None:
            try:
                kilobytes[field] = int(rest.split()[0]) * 1024
            except (IndexError, ValueError):
                continue
    return MemorySample(**kilobytes)
