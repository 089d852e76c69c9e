"""How much memory, disk and time a build needs, from a model fitted on measured builds (docs/scale.md).

Each stage's peak is a straight line in the bytes it reads, ``a × bytes + b``, fitted by `bench/scale.py` on
random-weight checkpoints of real shapes; the constants live in the recipe (`bot.core.runners.SizingModel`), the
Qwen3 lines at the top and each target family measured at its own width beside them (`SizingModel.for_family`).
The bytes are what the export loads: a pre-quantised target's file bytes dequantised
(`bot.discover.checkpoints.export_load_bytes`). Seconds are lines too, measured on the benchmark's cores and
scaled to a class's (`estimate_seconds`); a class takes a build only when every estimate with the recipe's
`runners.headroom` fits it, time included (`RunnerClass.max_seconds`, less the download's deadline).
Memory is the anonymous peak (plus swap): the pages the kernel cannot drop, so what a runner class must hold and
what the memory guard (`bot.sandbox.isolation`) compares with its budget. The file-backed working set (mapped
checkpoints and IR weights) is estimated beside it and reported: the kernel rereads those pages under pressure, so a
runner short of room for them builds slower, not never. A build runs: download → export draft and target → inspect →
quality → validate → bundle. Its peak memory is the largest of

* the exports: the sum of both when they run side by side, the larger one when they run one after the other;
* inspect and validate, which load the int4 IRs (a fraction of the bf16 bytes);
* the quality step, which loads the original target (an f32 copy for small targets, else the mapped checkpoint)
  and its int4 IR.

Every stage is a fresh process of its own (`bot.sandbox.isolation`): nothing else is resident beside them.

The exports run side by side only when both fit the runner class's memory together (`estimate_build`). Disk holds
the downloaded sources, both IRs, and the bundle (a copy of the IRs); when that does not fit, the sources are
removed once both IRs are written (`BuildEstimate.remove_sources`), which `bot.builder.group` must then do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bot.core.recipe import Recipe
from bot.core.runners import (
    BASE_FAMILY,
    BUILD_JOB_SECONDS,
    SIZED_STAGES,
    LineKind,
    RunnerClass,
    RunnerSettings,
    SizedStage,
    SizingModel,
)
from bot.discover.candidates import Candidate
from bot.discover.checkpoints import export_load_bytes

# The reference runs in f32 when its f32 weights fit this many bytes (about 1.5B parameters), else in the
# checkpoint's dtype: a 4B target in f32 (16 GB) would not fit the 16 GB runner class.
DEFAULT_MAX_F32_BYTES = 6 * 10**9


def runs_in_f32(weight_bytes: int, element_bytes: int, max_f32_bytes: int = DEFAULT_MAX_F32_BYTES) -> bool:
    """Whether the original is loaded in f32: its weights (`element_bytes` each on disk) fit `max_f32_bytes` as f32."""
    return weight_bytes * 4 / element_bytes <= max_f32_bytes


def f32_copy_bytes(target_bytes: int, max_f32_bytes: int = DEFAULT_MAX_F32_BYTES) -> int:
    """Anonymous memory the quality step (`bot.builder.quality`) holds for the original's f32 copy, for a target of
    `target_bytes` of 2-byte weights (what sizing reads; the step itself applies `runs_in_f32` to the checkpoint's
    dtype): 2 × its bytes, or nothing when the original runs in its own dtype from the mapped checkpoint (pages the
    kernel can drop). Known, not fitted: the fitted quality line covers the rest."""
    return 2 * target_bytes if runs_in_f32(target_bytes, 2, max_f32_bytes) else 0


@dataclass(frozen=True)
class BuildEstimate:
    """The planned schedule of one build and its estimated peaks on a runner class.

    Attributes:
        peak_memory_bytes: Estimated anonymous peak (plus swap) of the build's processes for the chosen schedule:
            what must fit the runner class's memory.
        peak_disk_bytes: Estimated peak disk use of the work folder and bundle.
        parallel_exports: Whether the draft and target exports run side by side.
        remove_sources: Whether the downloaded source weights must be removed once both IRs are written.
        peak_file_bytes: Estimated file-backed working set of the stage that maps the most (mapped weights): room
            for it keeps the build fast; it never decides whether a build fits.
        seconds: Estimated wall seconds of the build's stages on the class it was estimated for (0: not timed).
        download_s: The most its download may take (the recipe's `hub.download_deadline_s`), counted against the
            class's time limit beside `seconds`.
    """

    peak_memory_bytes: int
    peak_disk_bytes: int
    parallel_exports: bool
    remove_sources: bool
    peak_file_bytes: int = 0
    seconds: int = 0
    download_s: int = 0

    def fits(self, runner: RunnerClass, headroom: float = 0.0) -> bool:
        """Whether `runner` takes every estimate with `headroom` (a share) to spare."""
        return not self.short_of(runner, headroom)

    def short_of(self, runner: RunnerClass, headroom: float = 0.0) -> list[str]:
        """What `runner` lacks for this build with `headroom` to spare: "memory", "disk", "time" (empty: it fits)."""
        spare = 1 + headroom
        short = []
        if self.peak_memory_bytes * spare > runner.max_memory_bytes:
            short.append("memory")
        if self.peak_disk_bytes * spare > runner.max_disk_bytes:
            short.append("disk")
        if runner.max_seconds is not None and self.seconds * spare + self.download_s > runner.max_seconds:
            short.append("time")
        return short

    def describe(self) -> str:
        schedule = "exports in parallel" if self.parallel_exports else "exports one after the other"
        removal = ", source weights removed after export" if self.remove_sources else ""
        time = f", about {minutes(self.seconds)} of stages" if self.seconds else ""
        return (
            f"memory {gb(self.peak_memory_bytes)}, disk {gb(self.peak_disk_bytes)}{time} ({schedule}{removal}; "
            f"+{gb(self.peak_file_bytes)} file-backed)"
        )


@dataclass(frozen=True)
class BuildTime:
    """What a build's time depends on beyond its bytes and its class, from the recipe.

    Attributes:
        download_s: `hub.download_deadline_s`: a download that takes longer fails, so it bounds the download's share.
        timing_budget_s: `validation.timing_budget_s`: the speed timer adds pairs until it is spent (per validation,
            on top of the fitted line, which the benchmark measured with one short pair).
        validation_timeout_s: `validation.timeout_s`: no validation runs longer.
        formats: draft weight formats validated per draft (`export.draft_weight_formats`).
    """

    download_s: int = 0
    timing_budget_s: float = 0.0
    validation_timeout_s: float | None = None
    formats: int = 1

    @classmethod
    def of(cls, recipe: Recipe) -> BuildTime:
        return cls(
            download_s=int(recipe.hub.download_deadline_s),
            timing_budget_s=recipe.validation.timing_budget_s,
            validation_timeout_s=recipe.validation.timeout_s,
            formats=len(recipe.export.draft_weight_formats),
        )


@dataclass(frozen=True)
class StagePeaks:
    """The model's per-stage figures for one pair (the terms `estimate_build` combines): each sized stage's
    anonymous peak (`memory`) and file-backed working set (`file`), keyed by `runners.SIZED_STAGES` (0: the stage
    does not run), and disk.

    Attributes:
        draft_export_scratch, target_export_scratch: Disk an export holds beyond its final IR while it runs:
            optimum-cli writes the floating-point IR to a temporary folder before compressing it into the output.
    """

    memory: Mapping[str, int]
    file: Mapping[str, int]
    draft_ir_bytes: int
    target_ir_bytes: int
    draft_export_scratch: int
    target_export_scratch: int

    def largest(self, kind: LineKind, stages: Iterable[str]) -> int:
        figures = self.memory if kind == "memory" else self.file
        return max(figures[stage] for stage in stages)

    def total(self, kind: LineKind, stages: Iterable[str]) -> int:
        figures = self.memory if kind == "memory" else self.file
        return sum(figures[stage] for stage in stages)


EXPORTS: tuple[SizedStage, ...] = ("draft_export", "target_export")
AFTER_EXPORT: tuple[SizedStage, ...] = ("validate", "inspect", "quality")  # each a process of its own, one at a time


def stage_peaks(
    draft_bytes: int,
    target_bytes: int,
    model: SizingModel,
    *,
    target_reused: bool = False,
    draft_model: SizingModel | None = None,
) -> StagePeaks:
    """Evaluate every fitted line of `model` (the target family's) for a draft and a target of these sizes (a reused
    target is downloaded as its int4 IR, never exported: `bot.plan.reuse`); the draft's export and IR by
    `draft_model`'s lines (default: `model`'s), a DFlash draft being a Qwen3 trunk whatever its target."""
    drafts = draft_model or model
    reads: dict[SizedStage, int] = {
        "draft_export": draft_bytes,
        "target_export": target_bytes,
        "validate": draft_bytes + target_bytes,
        "inspect": target_bytes,
        "quality": target_bytes,
    }
    # A reused target brings its quality figures with it: no target export and no quality step (bot.plan.reuse).
    skipped = {"target_export", "quality"} if target_reused else set()
    runs = {stage: lines for stage, lines in model.stages.items() if stage not in skipped}
    runs["draft_export"] = drafts.stages["draft_export"]
    memory: dict[str, int] = {
        stage: runs[stage].memory.at(reads[stage]) if stage in runs else 0 for stage in SIZED_STAGES
    }
    file: dict[str, int] = {stage: runs[stage].file.at(reads[stage]) if stage in runs else 0 for stage in SIZED_STAGES}
    if "quality" in runs:
        memory["quality"] += f32_copy_bytes(target_bytes)
    return StagePeaks(
        memory=memory,
        file=file,
        draft_ir_bytes=drafts.ir_bytes.at(draft_bytes),
        target_ir_bytes=model.ir_bytes.at(target_bytes),
        draft_export_scratch=drafts.export_scratch_disk.at(draft_bytes),
        target_export_scratch=0 if target_reused else model.export_scratch_disk.at(target_bytes),
    )


def estimate_schedule(
    draft_bytes: int,
    target_bytes: int,
    model: SizingModel,
    *,
    parallel_exports: bool,
    remove_sources: bool,
    target_reused: bool = False,
    draft_model: SizingModel | None = None,
) -> BuildEstimate:
    """Peak memory and disk of one build for a given schedule (what `estimate_build` chooses between).

    Args:
        draft_bytes, target_bytes: bytes the exports load of the draft and of the target (bf16 weights).
        model: the fitted sizing constants (the target family's lines).
        parallel_exports: the draft and target exports run side by side.
        remove_sources: the downloaded sources are removed once both IRs are written.
        target_reused: the target's published int4 IR is downloaded instead of its weights (no target export).
        draft_model: the lines the draft is sized by (default: `model`).
    """
    peaks = stage_peaks(draft_bytes, target_bytes, model, target_reused=target_reused, draft_model=draft_model)
    exports = peaks.total if parallel_exports else peaks.largest  # side by side: both at once
    peak_memory = max(exports("memory", EXPORTS), peaks.largest("memory", AFTER_EXPORT))
    peak_file = max(exports("file", EXPORTS), peaks.largest("file", AFTER_EXPORT))
    sources = draft_bytes + (0 if target_reused else target_bytes)  # a reused target IR is counted in `irs`
    irs = peaks.draft_ir_bytes + peaks.target_ir_bytes
    if parallel_exports:  # both exports' temporary IRs at once
        scratch = peaks.draft_export_scratch + peaks.target_export_scratch
    else:
        scratch = max(peaks.draft_export_scratch, peaks.target_export_scratch)
    exporting = sources + irs + scratch  # an upper bound: every IR written while a temporary one is still there
    bundling = (0 if remove_sources else sources) + 2 * irs  # the bundle copies the IRs
    return BuildEstimate(
        peak_memory_bytes=peak_memory,
        peak_disk_bytes=max(exporting, bundling),
        parallel_exports=parallel_exports,
        remove_sources=remove_sources,
        peak_file_bytes=peak_file,
    )


@dataclass(frozen=True)
class Pair:
    """What sizing needs of one build: the bytes its exports load, the target's family and the group's drafts.

    Attributes:
        draft_bytes: every draft of the group together (`bot.discover.checkpoints.export_load_bytes` of each).
        target_bytes: the target as the export loads it.
        family: the target's model_type: whose lines size it (`SizingModel.for_family`).
        drafts: how many drafts the group builds (each is exported and validated on its own).
        target_reused: the target's published int4 IR is downloaded instead of exported (`bot.plan.reuse`).
    """

    draft_bytes: int
    target_bytes: int
    family: str = BASE_FAMILY
    drafts: int = 1
    target_reused: bool = False


def pair_of(candidates: Sequence[Candidate], *, target_reused: bool = False) -> Pair:
    """One build runner's pair: every draft of the group and their target once, each by the bytes its export loads
    (a pre-quantised target dequantised: `bot.discover.checkpoints.export_load_bytes`)."""
    first = candidates[0]
    return Pair(
        draft_bytes=sum(candidate.draft_bytes for candidate in candidates),
        target_bytes=export_load_bytes(first.target_quantization, first.target_bytes),
        family=first.target_model_type,
        drafts=len(candidates),
        target_reused=target_reused,
    )


def estimate_seconds(pair: Pair, runner: RunnerClass, model: SizingModel, time: BuildTime, *, parallel: bool) -> int:
    """Wall seconds of the build's stages on `runner`: each fitted seconds line (measured on `model.cores` cores)
    scaled by `model.cores / runner.cores` (every stage spreads over all cores), plus each validation's timing
    budget (wall time, not scaled; each validation capped by its timeout). The download is not in it (its deadline
    is `BuildEstimate.download_s`), nor the bundle and the copy (seconds at every measured size)."""
    lines, _ = model.for_family(pair.family)
    scale = model.cores / runner.cores

    def at(owner: SizingModel, stage: SizedStage, n_bytes: int) -> float:
        line = owner.stages[stage].seconds
        return 0.0 if line is None else line.at(n_bytes) * scale

    per_draft = pair.draft_bytes // max(1, pair.drafts)
    draft_line = model.stages["draft_export"].seconds
    draft_export = at(model, "draft_export", pair.draft_bytes)
    if draft_line is not None:  # each export starts its own process: the fixed part once per draft
        draft_export += (pair.drafts - 1) * draft_line.b * scale
    target_export = 0.0 if pair.target_reused else at(lines, "target_export", pair.target_bytes)
    exports = max(draft_export, target_export) if parallel else draft_export + target_export
    one_validation = at(lines, "validate", per_draft + pair.target_bytes) + time.timing_budget_s
    if time.validation_timeout_s is not None:
        one_validation = min(one_validation, time.validation_timeout_s)
    validations = one_validation * pair.drafts * time.formats
    quality = 0.0 if pair.target_reused else at(lines, "quality", pair.target_bytes)
    return round(exports + at(lines, "inspect", pair.target_bytes) + quality + validations)


def estimate_build(
    draft_bytes: int,
    target_bytes: int,
    runner: RunnerClass,
    model: SizingModel,
    *,
    target_reused: bool = False,
    family: str = BASE_FAMILY,
    drafts: int = 1,
    time: BuildTime | None = None,
    headroom: float = 0.0,
) -> BuildEstimate:
    """The schedule a build will use on `runner`, and its peak memory and disk and its seconds.

    Exports run side by side only when both fit the runner's memory together and their temporary IRs its disk;
    sources are removed after export only when keeping them would not fit its disk (each with `headroom` to spare).

    Args:
        draft_bytes, target_bytes: bytes the exports load of the draft(s) and of the target (bf16 weights).
        runner: the runner class the build would run on.
        model: the fitted sizing constants (the recipe's `runners.sizing`); the target is sized by its family's.
        target_reused: the target's published int4 IR is downloaded instead of exported (`bot.plan.reuse`).
        family: the target's model_type.
        drafts: how many drafts `draft_bytes` holds.
        time: the recipe's time terms (default: none beyond the fitted lines).
        headroom: the share each estimate must leave spare on `runner`.

    Returns:
        The estimate; it may exceed the runner's limits (`BuildEstimate.fits` says), `choose_runner` picks a class.
    """
    time = time or BuildTime()
    pair = Pair(draft_bytes, target_bytes, family, drafts, target_reused)
    lines, _ = model.for_family(family)
    spare = 1 + headroom

    def schedule(parallel_exports: bool, remove_sources: bool) -> BuildEstimate:
        return estimate_schedule(
            draft_bytes,
            target_bytes,
            lines,
            parallel_exports=parallel_exports,
            remove_sources=remove_sources,
            target_reused=target_reused,
            draft_model=model,
        )

    def fits_disk(estimate: BuildEstimate) -> bool:
        return estimate.peak_disk_bytes * spare <= runner.max_disk_bytes

    # Side by side, both exports' temporary IRs are on disk at once: only when memory and disk both take that.
    parallel = schedule(True, False)
    in_parallel = parallel.peak_memory_bytes * spare <= runner.max_memory_bytes and (
        fits_disk(parallel) or fits_disk(schedule(True, True))
    )
    kept = schedule(in_parallel, False)
    chosen = kept if fits_disk(kept) else schedule(in_parallel, True)
    seconds = estimate_seconds(pair, runner, model, time, parallel=in_parallel)
    return replace(chosen, seconds=seconds, download_s=time.download_s)


def choose_runner(
    pair: Pair, runners: RunnerSettings, time: BuildTime | None = None
) -> tuple[RunnerClass | None, BuildEstimate, str]:
    """The smallest runner class (by memory) whose memory, disk and time limit take the build's estimates with the
    recipe's headroom to spare.

    Args:
        pair: the build's bytes, target family and drafts.
        runners: the recipe's runner classes, sizing constants and headroom.
        time: the recipe's time terms (`BuildTime.of`).

    Returns:
        (class, estimate on it, reason). When no class fits: (None, the estimate on the largest class, a reason
        that states the estimates, what the largest class lacks and the class to add).
    """
    time = time or BuildTime()
    estimate = None
    for runner in runners.classes:
        estimate = estimate_for(pair, runner, runners, time)
        if estimate.fits(runner, runners.headroom):
            return runner, estimate, f"runner class '{runner.name}': {estimate.describe()}{lines_note(pair, runners)}"
    assert estimate is not None  # classes has at least one entry
    return None, estimate, no_class_reason(pair, runners, estimate)


def estimate_for(pair: Pair, runner: RunnerClass, runners: RunnerSettings, time: BuildTime) -> BuildEstimate:
    """`estimate_build` of `pair` on `runner` with the recipe's sizing and headroom."""
    return estimate_build(
        pair.draft_bytes,
        pair.target_bytes,
        runner,
        runners.sizing,
        target_reused=pair.target_reused,
        family=pair.family,
        drafts=pair.drafts,
        time=time,
        headroom=runners.headroom,
    )


def lines_note(pair: Pair, runners: RunnerSettings) -> str:
    """Nothing when the target's family has lines of its own, else a note naming the family whose lines stood in."""
    if runners.sizing.for_family(pair.family)[1]:
        return ""
    stand_in = runners.sizing.measured_family(pair.family)
    return f" (sized by the {stand_in} lines: none measured for {pair.family} targets, docs/scale.md)"


def no_class_reason(pair: Pair, runners: RunnerSettings, needed: BuildEstimate) -> str:
    """Why no class takes the build, and the class that would: its memory and disk (the estimates with the
    headroom, in whole GB) and the cores it needs to finish inside the build job's time limit."""
    largest = runners.classes[-1]
    spare = 1 + runners.headroom
    memory, disk = round_up(int(needed.peak_memory_bytes * spare)), round_up(int(needed.peak_disk_bytes * spare))
    short = needed.short_of(largest, runners.headroom)
    cores = cores_needed(needed, largest, runners.headroom)
    time_note = ""
    if "time" in short and cores is None:
        limit = largest.max_seconds or BUILD_JOB_SECONDS
        time_note = (
            f"; no number of cores finishes its stages inside the job's {minutes(limit)} after the download's "
            f"{minutes(needed.download_s)}: raise the class's max_seconds with the build job's timeout-minutes"
        )
    return (
        f"estimated peak memory {gb(needed.peak_memory_bytes)}, disk {gb(needed.peak_disk_bytes)} and about "
        f"{minutes(needed.seconds)} of stages on {largest.cores} cores "
        f"({needed.describe().split('(', 1)[1].split(';')[0]}) do not fit the largest runner class "
        f"'{largest.name}' ({gb(largest.max_memory_bytes)} memory, {gb(largest.max_disk_bytes)} disk, {largest.cores} "
        f"cores; short of {', '.join(short)} with {runners.headroom:.0%} headroom){time_note}: add a class to the "
        f"recipe's runners.classes with max_memory_bytes >= {memory} and max_disk_bytes >= {disk}, e.g. {{name: "
        f"large, max_memory_bytes: {memory}, max_disk_bytes: {disk}, cores: {cores or largest.cores}, runs_on: "
        f"[self-hosted, linux, x64, dflash-large]}}{lines_note(pair, runners)}"
    )


def cores_needed(estimate: BuildEstimate, runner: RunnerClass, headroom: float) -> int | None:
    """The fewest cores (at least `runner.cores`) on which the build's stages finish inside the job's time limit
    with `headroom`, the download's deadline counted; None when no number of cores does (the validations' timing
    budget alone is past it)."""
    limit = (runner.max_seconds or BUILD_JOB_SECONDS) - estimate.download_s
    if limit <= 0:
        return None
    core_seconds = estimate.seconds * runner.cores * (1 + headroom)  # what the stages take on one core's share
    cores = max(runner.cores, -(-int(core_seconds) // int(limit)))
    return cores if cores <= MAX_CORES else None


MAX_CORES = 192  # the largest Linux runner GitHub offers has 96; beyond twice that, time is not a matter of cores


def local_runner(
    work: Path,
    *,
    meminfo: Path = Path("/proc/meminfo"),
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> RunnerClass:
    """This machine as a runner class, for builds outside the Actions fan-out (`run`, `build`): the memory it has
    available now, or its memory cgroup's limit when that is less (a container, `systemd-run -p MemoryMax=`: the
    kernel enforces that one, whatever /proc/meminfo says), and the free disk under `work`."""
    available = next(
        int(line.split()[1]) * 1024 for line in meminfo.read_text().splitlines() if line.startswith("MemAvailable:")
    )
    limit = cgroup_memory_limit(proc_cgroup, cgroup_root)
    work.mkdir(parents=True, exist_ok=True)
    return RunnerClass(
        name="local",
        max_memory_bytes=min(available, limit) if limit else available,
        max_disk_bytes=shutil.disk_usage(work).free,
        runs_on="local",
        cores=os.cpu_count() or 1,
        max_seconds=None,  # no job around it: a build here takes the time it takes
    )


def cgroup_memory_limit(proc_cgroup: Path, cgroup_root: Path) -> int | None:
    """The smallest memory limit on this process's memory cgroup and its ancestors (v1 `memory.limit_in_bytes`,
    v2 `memory.max`); None when there is none or it cannot be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            mount, name = cgroup_root / "memory", "memory.limit_in_bytes"
        elif controllers == "":
            mount, name = cgroup_root, "memory.max"
        else:
            continue
        folder = mount / path.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                limits.append(int((folder / name).read_text().strip()))  # "max" (v2, none) is skipped
            if folder == mount or mount not in folder.parents:
                break
            folder = folder.parent
    unlimited = 2**62  # v1 writes "no limit" as a page-rounded 2**63 - 1
    return min((n for n in limits if n < unlimited), default=None)


def gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def round_up(n: int, step: int = 10**9) -> int:
    """`n` rounded up to whole GB, as a recipe would state a class."""
    return -(-n // step) * step
