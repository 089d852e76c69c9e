"""Memory by kind of a process tree (`bot.sandbox.resources`): anonymous and file-backed pages apart, on real
processes that allocate and map real files."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bot.sandbox.resources import MemorySample, Peaks, PeakSampler, measure, process_memory, tree_memory

MB = 2**20

# Allocates `anon` MB, then (after freeing it) maps and reads a sparse file of `file` MB, then waits: two phases,
# so the anonymous and the file-backed peaks come from different moments.
_PHASES = """
import mmap, os, sys, time
anon_mb, file_mb, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
block = bytearray(anon_mb * 2**20)
open(os.path.join(folder, "anon"), "w").close()
time.sleep(1)
del block
path = os.path.join(folder, "weights.bin")
with open(path, "wb") as handle:
    handle.truncate(file_mb * 2**20)
with open(path, "rb") as handle:
    mapped = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)
    touched = sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))
    open(os.path.join(folder, "file"), "w").close()
    time.sleep(1)
"""


def _wait_for(path: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_anonymous_and_file_backed_memory_are_read_apart(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", _PHASES, "150", "250", str(tmp_path)])
    try:
        _wait_for(tmp_path / "anon")
        holding = process_memory(child.pid)
        assert holding.anon_bytes > 150 * MB > holding.file_bytes
        _wait_for(tmp_path / "file")
        mapping = process_memory(child.pid)
        assert mapping.file_bytes > 250 * MB > mapping.anon_bytes
        assert mapping.rss_bytes == mapping.anon_bytes + mapping.file_bytes + mapping.shmem_bytes
    finally:
        child.wait(timeout=30)
    assert process_memory(child.pid) == MemorySample()  # gone: nothing, not an error


def test_a_grandchild_counts_in_the_tree_of_its_grandparent(tmp_path):
    ready = tmp_path / "ready"
    grow = f"import time; block = bytearray(120 * 2**20); open({str(ready)!r}, 'w').close(); time.sleep(3)"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grow!r}])"]
    )
    try:
        _wait_for(ready)
        assert process_memory(parent.pid).anon_bytes < 60 * MB
        assert tree_memory(parent.pid).unreclaimable_bytes > 120 * MB
    finally:
        parent.wait(timeout=30)


def test_the_sampler_keeps_each_kind_of_peak_from_its_own_moment(tmp_path):
    """Anonymous first, then file-backed: the anonymous peak is not the anonymous part of the RSS peak."""
    child = subprocess.Popen([sys.executable, "-c", _PHASES, "200", "300", str(tmp_path)])
    seen: list[MemorySample] = []
    with PeakSampler(child.pid, interval_s=0.05, on_sample=seen.append) as sampler:
        child.wait(timeout=60)
    peaks = sampler.peaks
    assert peaks.anon_bytes > 200 * MB and peaks.file_bytes > 300 * MB
    assert peaks.rss_bytes < peaks.anon_bytes + peaks.file_bytes  # the two never coincided
    assert peaks.rss_bytes == max(sample.rss_bytes for sample in seen)
    assert sampler.peak_rss_bytes == peaks.rss_bytes


def test_swap_counts_as_anonymous_and_peaks_take_the_maximum():
    peaks = (
        Peaks()
        .with_sample(MemorySample(anon_bytes=5, file_bytes=1, swap_bytes=4))
        .with_sample(MemorySample(file_bytes=7))
    )
    assert peaks == Peaks(rss_bytes=7, anon_bytes=9, file_bytes=7, shmem_bytes=0)


def test_measure_records_the_anonymous_and_file_backed_peaks_of_a_stage(tmp_path):
    with measure(tmp_path, interval_s=0.05) as measured:
        subprocess.run([sys.executable, "-c", _PHASES, "100", "200", str(tmp_path)], check=True)
    result = measured.result
    assert result is not None
    assert result.peak_anon_bytes > 100 * MB and result.peak_file_bytes > 200 * MB
    assert result.peak_disk_bytes < 10 * MB  # the file is sparse
    figures = result.model_dump()
    assert figures["peak_anon_bytes"] == result.peak_anon_bytes and figures["peak_file_bytes"] == result.peak_file_bytes


def test_the_report_shows_anonymous_and_file_backed_memory_apart_and_reads_records_without_them():
    from bot.core.record import StageResources
    from bot.run.report import build_cost_note

    measured = StageResources.model_validate(
        {
            "seconds": 61.4,
            "peak_rss_bytes": 6_300_000_000,
            "peak_anon_bytes": 4_100_000_000,
            "peak_file_bytes": 2_600_000_000,
            "peak_disk_bytes": 9_000_000_000,
        }
    )
    assert build_cost_note(measured) == (
        "built in 61 s, peak 6.3 GB memory (4.1 GB anonymous, 2.6 GB file-backed) and 9.0 GB disk"
    )
    older = StageResources.model_validate({"seconds": 61.4, "peak_rss_bytes": 6_300_000_000, "peak_disk_bytes": 1})
    assert older.peak_anon_bytes is None
    assert build_cost_note(older) == "built in 61 s, peak 6.3 GB memory and 0.0 GB disk"
