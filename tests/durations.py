"""Write tests/durations.txt from a real run of the fast loop (`pytest -m "not slow"`, what `make test-fast` runs).

Run: `make durations` (or `.venv/bin/python tests/durations.py`).

The file keeps the run's wall time, its pytest summary and its slowest tests, so a test that makes the fast loop slow
is seen in review: mark it `slow` (tests/conftest.py says how) or make it faster. The whole suite (`make test`)
prints its own slowest tests at the end of every run.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "durations.txt"
SLOWEST = 40
FAST_LOOP = ["-m", "not slow"]


def main() -> int:
    extra = sys.argv[1:]  # more pytest options, e.g. --junitxml=FILE for every test's time
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        *FAST_LOOP,
        f"--durations={SLOWEST}",
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    load = os.getloadavg()[0]  # the wall time means little on a machine others share: say how busy it was
    started = time.monotonic()
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
        assert run.stdout is not None
        lines = []
        for line in run.stdout:
            sys.stdout.write(line)
            lines.append(line.rstrip("\n"))
    wall_s = time.monotonic() - started
    summary = next((line.strip("= ") for line in reversed(lines) if line.strip()), "(no summary)")
    busy = f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores"
    TARGET.write_text("\n".join(_report(lines, summary, wall_s, busy)) + "\n", encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}: {summary}, {wall_s:.0f} s wall")
    return run.returncode


def _report(lines: list[str], summary: str, wall_s: float, busy: str) -> list[str]:
    """The header (when, which commit, the summary, the wall time) and the slowest-durations table of one run."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    start = next((i for i, line in enumerate(lines) if "slowest" in line and "durations" in line), len(lines))
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("="):
            break
        if line and not line.startswith("("):
            table.append(line)
    return [
        '# The fast loop\'s slowest tests: `pytest -m "not slow"` (`make test-fast`), written by `make durations`',
        f"# (tests/durations.py) on {dt.date.today().isoformat()} at {head.stdout.strip() or 'an unknown commit'}.",
        f"# {summary}; wall time {wall_s:.0f} s ({wall_s / 60:.1f} min), {busy}.",
        "# The fast loop must stay under 8 minutes on two quiet cores.",
        "",
        *table,
    ]


if __name__ == "__main__":
    sys.exit(main())
