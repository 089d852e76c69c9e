"""Each build stage under a memory limit, and each stage's floor: the smallest limit at which it finishes within
`SLOWDOWN` × its unlimited time (`bench/scale.py --memory-limit` and `--floor`).

A shape's work folder is prepared stage by stage, each stage in a child process of its own
(``bench/stages.py``), unlimited: that run writes the output the next stage reads, and its time is the one a
limited run is compared with (same invocation, same machine load). A stage under test then runs again, into a
folder of its own that is removed after, inside a memory cgroup (`bench.memory_limit`). Before every run the
page cache of the stage's inputs is dropped, so each run reads them from disk and its group is charged for them.
"""

from __future__ import annotations

import itertools
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.memory_limit import LimitedRun, evict_page_cache, run_limited
from bench.stages import END_TO_END, STAGES, canonical_output

STAGES_SCRIPT = Path(__file__).resolve().parent / "stages.py"
FLOOR_STAGES = ("draft export", "target export", "inspect", "quality", "validate", "bundle")  # a build's own stages
SLOWDOWN = 1.5  # a stage fits a limit when it finishes within this many times its unlimited time
STEP_BYTES = 250_000_000  # the floor's resolution
MAX_TRIES = 8  # limited runs per floor, at most
LIMITED_TIMEOUT = 10  # a single --memory-limit run is stopped after this many times its unlimited time


@dataclass
class Floor:
    """The smallest limit (on a `STEP_BYTES` grid) at which a stage finished within `SLOWDOWN` × its unlimited
    time, and every run that found it."""

    unlimited: LimitedRun
    runs: list[LimitedRun] = field(default_factory=list)
    floor_bytes: int | None = None  # None: no limit tried fits (or the tries ran out before one did)
    below_bytes: int | None = None  # the largest limit known not to fit

    @property
    def at_floor(self) -> LimitedRun | None:
        return next((run for run in self.runs if run.limit_bytes == self.floor_bytes), None)


def find_floor(
    run: Callable[[int | None, float | None], LimitedRun],
    unlimited: LimitedRun,
    *,
    step_bytes: int = STEP_BYTES,
    max_tries: int = MAX_TRIES,
    slowdown: float = SLOWDOWN,
    report: Callable[[str], None] = print,
) -> Floor:
    """Bisect the smallest limit on a `step_bytes` grid at which `run(limit, timeout)` finishes within `slowdown`
    × the `unlimited` run's time (a run is stopped at that time: a thrashing one costs no more than that).

    The search starts between the sampled anonymous peak (rounded down: below it the stage cannot fit, unless the
    per-process sum counted shared pages twice, which a first try there checks) and the RSS peak (rounded up:
    there it fits with room for the page cache, else the limit is raised two steps at a time).
    """
    floor = Floor(unlimited)
    if not unlimited.finished or max_tries < 1:  # no tries: the unlimited run's peaks alone
        return floor
    budget_s = slowdown * unlimited.seconds

    def fits(limit: int) -> bool:
        attempt = run(limit, budget_s)
        floor.runs.append(attempt)
        report(f"    {attempt.describe()}")
        return attempt.finished and attempt.seconds <= budget_s

    low = max(step_bytes, unlimited.peaks.anon_bytes // step_bytes * step_bytes)
    high = -(-unlimited.peaks.rss_bytes // step_bytes) * step_bytes + step_bytes
    if fits(low):  # the tree's anonymous pages were counted more than once: search below
        high, low = low, 0
    else:
        fitted = False
        while len(floor.runs) < max_tries and not (fitted := fits(high)):
            low, high = high, high + 2 * step_bytes
        if not fitted:
            floor.below_bytes = low
            return floor
    while high - low > step_bytes and len(floor.runs) < max_tries:
        middle = (low + high) // 2 // step_bytes * step_bytes
        if middle <= low:
            break
        if fits(middle):
            high = middle
        else:
            low = middle
    floor.floor_bytes, floor.below_bytes = high, low or None
    return floor


class StageRunner:
    """Runs the stages of one shape in child processes, on one work folder under `root`."""

    def __init__(self, shape: str, root: Path, *, recipe_validation: bool = False):
        self.shape, self.root, self.recipe_validation = shape, root, recipe_validation
        self.work = root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self._counter = itertools.count()

    def prepare(self, stage: str) -> LimitedRun:
        """Run `stage` unlimited into its usual place (the next stages read it there).

        Raises:
            SystemExit: it failed (its log is named).
        """
        run = self._run(stage, None, None, canonical=True)
        if not run.finished:
            raise SystemExit(
                f"{self.shape}: the {stage} stage failed unlimited ({run.describe()}); see the logs in "
                f"{self.root / 'logs'}"
            )
        return run

    def trial(self, stage: str) -> Callable[[int | None, float | None], LimitedRun]:
        """`run(limit, timeout)` for `stage`: a rerun into a folder of its own, removed after."""
        return lambda limit, timeout: self._run(stage, limit, timeout, canonical=False)

    def _run(self, stage: str, limit: int | None, timeout: float | None, *, canonical: bool) -> LimitedRun:
        number = next(self._counter)
        slug = stage.replace(" ", "-")
        trial = self.root / "trials" / f"{slug}-{number}"
        out = (canonical_output(stage, self.work) or self.work / slug) if canonical else trial / "out"
        scratch = self.work if canonical else trial
        inputs = [self.work / name for name in ("download", "src", "ir")]
        evict_page_cache([folder for folder in inputs if folder.exists()])
        cmd = [
            sys.executable,
            str(STAGES_SCRIPT),
            stage,
            "--shape",
            self.shape,
            "--work",
            str(self.work),
            "--out",
            str(out),
            "--scratch",
            str(scratch),
        ]
        if self.recipe_validation:
            cmd.append("--recipe-validation")
        try:
            return run_limited(cmd, limit, log=self.root / "logs" / f"{number:02d}-{slug}.log", timeout_s=timeout)
        finally:
            if not canonical:
                shutil.rmtree(trial, ignore_errors=True)


def limit_stages(
    shape: str,
    stages: list[str],
    root: Path,
    *,
    limit_bytes: int | None = None,
    floor: bool = False,
    step_bytes: int = STEP_BYTES,
    max_tries: int = MAX_TRIES,
    slowdown: float = SLOWDOWN,
    recipe_validation: bool = False,
    checkpoint: Path | None = None,
    limited_only: bool = False,
) -> list[dict]:
    """For each of `stages` of `shape`: its unlimited run, then one run under `limit_bytes` or its floor.

    Args:
        stages: names from `STAGES`, or `END_TO_END` (``dflash-bot build`` on the checkpoint as a whole).
        root: an empty folder for the work folder, the trials and the logs (disk: about 2.5 × the checkpoint).
        limit_bytes: the limit of the single limited run (ignored with `floor`).
        floor: bisect each stage's floor instead (`find_floor`).
        checkpoint: a `make-tiny --shape` folder of this shape to use as the download (linked, never removed).
        limited_only: run `END_TO_END` under `limit_bytes` only, without the unlimited run it is compared with
            (a shape this machine cannot build unlimited without risking everything else on it).

    Returns:
        One row per stage (`row_markdown` formats it).
    """
    runner = StageRunner(shape, root, recipe_validation=recipe_validation)
    last = max((STAGES.index(stage) for stage in stages if stage in STAGES), default=0)
    order = [*STAGES[: last + 1], *([END_TO_END] if END_TO_END in stages else [])]
    if checkpoint is not None:
        (runner.work / "download").symlink_to(checkpoint.resolve(), target_is_directory=True)
        order.remove("download")
    rows = []
    for stage in order:
        print(f"  {stage}:", flush=True)
        if limited_only and stage == END_TO_END and limit_bytes is not None:
            rows.append(_limited_only_row(shape, stage, runner, limit_bytes))
            continue
        unlimited = runner.prepare(stage)
        print(f"    {unlimited.describe()}", flush=True)
        if stage not in stages:
            continue
        row = {
            "shape": shape,
            "stage": stage,
            "seconds": round(unlimited.seconds, 1),
            "peak_rss_bytes": unlimited.peaks.rss_bytes,
            "peak_anon_bytes": unlimited.peaks.anon_bytes,
            "peak_file_bytes": unlimited.peaks.file_bytes,
        }
        if floor:
            found = find_floor(
                runner.trial(stage),
                unlimited,
                step_bytes=step_bytes,
                max_tries=max_tries,
                slowdown=slowdown,
                report=lambda line: print(line, flush=True),
            )
            at_floor = found.at_floor
            row |= {
                "floor_bytes": found.floor_bytes,
                "below_bytes": found.below_bytes,
                "tries": len(found.runs),
                "floor_seconds": round(at_floor.seconds, 1) if at_floor else None,
                "slowdown": slowdown,
                "step_bytes": step_bytes,
                "method": found.runs[0].method if found.runs else None,
            }
        else:
            limited = runner.trial(stage)(limit_bytes, LIMITED_TIMEOUT * unlimited.seconds)
            print(f"    {limited.describe()}", flush=True)
            row |= {
                "limit_bytes": limit_bytes,
                "finished": limited.finished,
                "oom_killed": limited.oom_killed,
                "timed_out": limited.timed_out,
                "limited_seconds": round(limited.seconds, 1),
                "ratio": round(limited.seconds / unlimited.seconds, 2),
                "failcnt": limited.failcnt,
                "method": limited.method,
            }
        rows.append(row)
    return rows


def _limited_only_row(shape: str, stage: str, runner: StageRunner, limit_bytes: int) -> dict:
    """One run under `limit_bytes` with no unlimited run beside it: its own time and peaks, no slowdown."""
    limited = runner.trial(stage)(limit_bytes, None)
    print(f"    {limited.describe()}", flush=True)
    return {
        "shape": shape,
        "stage": stage,
        "seconds": None,
        "peak_rss_bytes": limited.peaks.rss_bytes,
        "peak_anon_bytes": limited.peaks.anon_bytes,
        "peak_file_bytes": limited.peaks.file_bytes,
        "limit_bytes": limit_bytes,
        "finished": limited.finished,
        "oom_killed": limited.oom_killed,
        "timed_out": limited.timed_out,
        "limited_seconds": round(limited.seconds, 1),
        "ratio": None,
        "failcnt": limited.failcnt,
        "method": limited.method,
    }


def markdown(rows: list[dict]) -> str:
    """The rows as a table for docs/scale.md (floors, or single limited runs)."""

    def gb(n: int | None) -> str:
        return "-" if n is None else f"{n / 1e9:.2f}"

    def seconds(n: float | None) -> str:
        return "-" if n is None else f"{n:.1f}"

    head = "| shape | stage | seconds | peak RSS GB | anonymous GB | file-backed GB |"
    if rows and "floor_bytes" in rows[0]:
        lines = [
            head + " floor GB | failed at GB | seconds at floor | slowdown at floor | tries |",
            "|---" * 11 + "|",
        ]
    else:
        lines = [head + " limit GB | outcome | seconds | slowdown |", "|---" * 10 + "|"]
    for row in rows:
        cells = (
            f"| {row['shape']} | {row['stage']} | {seconds(row['seconds'])} | {gb(row['peak_rss_bytes'])} | "
            f"{gb(row['peak_anon_bytes'])} | {gb(row['peak_file_bytes'])} |"
        )
        if "floor_bytes" in row:
            at_floor = row["floor_seconds"]
            if row["floor_bytes"] is None:
                if row["below_bytes"]:
                    floor = f"> {gb(row['below_bytes'])}"
                else:
                    floor = "not tried" if row["tries"] == 0 else "not found"
                lines.append(f"{cells} {floor} | {gb(row['below_bytes'])} | - | - | {row['tries']} |")
            else:
                lines.append(
                    f"{cells} {gb(row['floor_bytes'])} | {gb(row['below_bytes'])} | {at_floor:.1f} | "
                    f"{at_floor / row['seconds']:.2f} | {row['tries']} |"
                )
        else:
            outcome = (
                "finished"
                if row["finished"]
                else "too slow"
                if row["timed_out"]
                else "OOM-killed"
                if row["oom_killed"]
                else "failed"
            )
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
            lines.append(f"{cells} {gb(row['limit_bytes'])} | {outcome} | {row['limited_seconds']:.1f} | {ratio} |")
    return "\n".join(lines) + "\n"
