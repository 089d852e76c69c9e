"""Memory limits the kernel enforces (`bench/memory_limit.py`) and the floor search on them (`bench/floor.py`), on
real processes in real memory cgroups: what the memory guard's anonymous-only rule rests on."""

from __future__ import annotations

import sys

import pytest

from bench.floor import find_floor
from bench.memory_limit import evict_page_cache, limit_method, run_limited

MB = 2**20
# Only where this process may create a memory cgroup itself (root, v1 or v2): a systemd-run scope needs a user
# manager that delegates the memory controller, which a test machine may not have.
pytestmark = pytest.mark.skipif(
    limit_method() not in ("cgroup v1", "cgroup v2"), reason=f"no memory cgroup to create here ({limit_method()})"
)


def _allocate(mb: int) -> list[str]:
    return [sys.executable, "-c", f"import time; block = bytearray({mb} * 2**20); time.sleep(0.3)"]


def test_a_child_over_its_limit_is_oom_killed_and_one_under_it_finishes(tmp_path):
    killed = run_limited(_allocate(300), 200 * MB, log=tmp_path / "log")
    assert not killed.finished and killed.oom_killed, killed.describe()
    assert killed.describe().startswith("limit 0.21 GB (cgroup ") and "OOM-killed" in killed.describe()
    fits = run_limited(_allocate(300), 500 * MB, log=tmp_path / "log")
    assert fits.finished and not fits.oom_killed and fits.peaks.anon_bytes > 300 * MB, fits.describe()


def test_a_mapped_file_larger_than_the_limit_is_read_through_without_a_kill(tmp_path):
    """File-backed pages are dropped and read again under the limit: the reader finishes, its RSS held down."""
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"\1" * (400 * MB))
    evict_page_cache([weights])
    read = [
        sys.executable,
        "-c",
        "import mmap, sys\n"
        f"with open({str(weights)!r}, 'rb') as handle:\n"
        "    mapped = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)\n"
        "    assert sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE)) == len(mapped) // mmap.PAGESIZE",
    ]
    run = run_limited(read, 150 * MB, log=tmp_path / "log")
    assert run.finished and not run.oom_killed, (run.describe(), (tmp_path / "log").read_text()[-500:])
    assert run.peaks.rss_bytes < 200 * MB  # never more than the limit resident: the rest was dropped


def _recorded_runs(tmp_path, mb: int):
    """`run(limit, timeout)` of an allocation of `mb` MiB for `find_floor`, and the list of limits it was run with."""
    limits: list[int | None] = []

    def run(limit, timeout):
        limits.append(limit)
        return run_limited(_allocate(mb), limit, log=tmp_path / "log", timeout_s=timeout)

    return run, limits


def test_the_floor_of_an_allocation_is_its_size_rounded_up_to_the_step(tmp_path):
    run, runs = _recorded_runs(tmp_path, 300)
    unlimited = run(None, None)
    floor = find_floor(run, unlimited, step_bytes=50 * MB, max_tries=8, report=lambda line: None)
    assert floor.floor_bytes is not None, [r.describe() for r in floor.runs]
    assert 300 * MB < floor.floor_bytes <= 450 * MB  # the interpreter's own pages on top of the block
    assert floor.below_bytes is not None and floor.floor_bytes - floor.below_bytes == 50 * MB
    assert floor.at_floor is not None and floor.at_floor.finished
    assert len(runs) <= 9


def test_no_tries_keeps_the_unlimited_peaks_and_runs_nothing_limited(tmp_path):
    """`--floor-tries 0`: a shape too large to bisect here still gets its stages' unlimited peaks."""
    run, runs = _recorded_runs(tmp_path, 100)
    unlimited = run(None, None)
    floor = find_floor(run, unlimited, step_bytes=50 * MB, max_tries=0, report=lambda line: None)
    assert runs == [None] and floor.runs == [] and floor.floor_bytes is None and floor.below_bytes is None
    assert floor.unlimited.peaks.anon_bytes > 100 * MB
