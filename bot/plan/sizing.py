"""How much memory and disk a build needs, from a model fitted on measured builds (docs/scale.md).

Each stage's peak is a straight line in the bytes it reads, ``a × bytes + b``, fitted by `bench/scale.py` on
random-weight checkpoints of real Qwen3 shapes; the constants live in the recipe (`bot.core.runners.SizingModel`).
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
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.core.runners import SIZED_STAGES, LineKind, RunnerClass, RunnerSettings, SizedStage, SizingModel

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
    """

    peak_memory_bytes: int
    peak_disk_bytes: int
    parallel_exports: bool
    remove_sources: bool
    peak_file_bytes: int = 0

    def fits(self, runner: RunnerClass) -> bool:
        return self.peak_memory_bytes <= runner.max_memory_bytes and self.peak_disk_bytes <= runner.max_disk_bytes

    def describe(self) -> str:
        schedule = "exports in parallel" if self.parallel_exports else "exports one after the other"
        removal = ", source weights removed after export" if self.remove_sources else ""
        return (
            f"memory {gb(self.peak_memory_bytes)}, disk {gb(self.peak_disk_bytes)} ({schedule}{removal}; "
            f"+{gb(self.peak_file_bytes)} file-backed)"
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


def stage_peaks(draft_bytes: int, target_bytes: int, model: SizingModel, *, target_reused: bool = False) -> StagePeaks:
    """Evaluate every fitted line of `model` for a draft and a target of these safetensors sizes (a reused target
    is downloaded as its int4 IR, never exported: `bot.plan.reuse`)."""
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
    memory: dict[str, int] = {
        stage: runs[stage].memory.at(reads[stage]) if stage in runs else 0 for stage in SIZED_STAGES
    }
    file: dict[str, int] = {stage: runs[stage].file.at(reads[stage]) if stage in runs else 0 for stage in SIZED_STAGES}
    if "quality" in runs:
        memory["quality"] += f32_copy_bytes(target_bytes)
    return StagePeaks(
        memory=memory,
        file=file,
        draft_ir_bytes=model.ir_bytes.at(draft_bytes),
        target_ir_bytes=model.ir_bytes.at(target_bytes),
        draft_export_scratch=model.export_scratch_disk.at(draft_bytes),
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
) -> BuildEstimate:
    """Peak memory and disk of one build for a given schedule (what `estimate_build` chooses between).

    Args:
        draft_bytes, target_bytes: safetensors bytes of the draft and of the target (bf16 weights).
        model: the fitted sizing constants.
        parallel_exports: the draft and target exports run side by side.
        remove_sources: the downloaded sources are removed once both IRs are written.
        target_reused: the target's published int4 IR is downloaded instead of its weights (no target export).
    """
    peaks = stage_peaks(draft_bytes, target_bytes, model, target_reused=target_reused)
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


def estimate_build(
    draft_bytes: int, target_bytes: int, runner: RunnerClass, model: SizingModel, *, target_reused: bool = False
) -> BuildEstimate:
    """The schedule a build will use on `runner`, and its peak memory and disk.

    Exports run side by side only when both fit the runner's memory together and their temporary IRs its disk;
    sources are removed after export only when keeping them would not fit its disk.

    Args:
        draft_bytes, target_bytes: safetensors bytes of the draft and of the target (bf16 weights).
        runner: the runner class the build would run on.
        model: the fitted sizing constants (the recipe's `runners.sizing`).
        target_reused: the target's published int4 IR is downloaded instead of exported (`bot.plan.reuse`).

    Returns:
        The estimate; it may exceed the runner's limits (`BuildEstimate.fits` says), `choose_runner` picks a class.
    """

    def schedule(parallel_exports: bool, remove_sources: bool) -> BuildEstimate:
        return estimate_schedule(
            draft_bytes,
            target_bytes,
            model,
            parallel_exports=parallel_exports,
            remove_sources=remove_sources,
            target_reused=target_reused,
        )

    def fits_disk(estimate: BuildEstimate) -> bool:
        return estimate.peak_disk_bytes <= runner.max_disk_bytes

    # Side by side, both exports' temporary IRs are on disk at once: only when memory and disk both take that.
    parallel = schedule(True, False)
    in_parallel = parallel.peak_memory_bytes <= runner.max_memory_bytes and (
        fits_disk(parallel) or fits_disk(schedule(True, True))
    )
    kept = schedule(in_parallel, False)
    if fits_disk(kept):
        return kept
    return schedule(in_parallel, True)


def choose_runner(
    draft_bytes: int, target_bytes: int, runners: RunnerSettings, *, target_reused: bool = False
) -> tuple[RunnerClass | None, BuildEstimate, str]:
    """The smallest runner class (by memory) whose memory and disk take the build's estimated peaks.

    Args:
        draft_bytes, target_bytes: safetensors bytes of the draft and of the target.
        runners: the recipe's runner classes and sizing constants.
        target_reused: the target's published IR is downloaded instead of exported (`bot.plan.reuse`).

    Returns:
        (class, estimate on it, reason). When no class fits: (None, the estimate on the largest class, a reason
        that states the estimated peak memory and disk and the class to add).
    """
    estimate = None
    for runner in runners.classes:
        estimate = estimate_build(draft_bytes, target_bytes, runner, runners.sizing, target_reused=target_reused)
        if estimate.fits(runner):
            return runner, estimate, f"runner class '{runner.name}': {estimate.describe()}"
    assert estimate is not None  # classes has at least one entry
    largest = runners.classes[-1]
    needed = estimate
    return (
        None,
        needed,
        (
            f"estimated peak memory {gb(needed.peak_memory_bytes)} and disk {gb(needed.peak_disk_bytes)} "
            f"({needed.describe().split('(', 1)[1].split(';')[0]}) do not fit the largest runner class "
            f"'{largest.name}' ({gb(largest.max_memory_bytes)} memory, {gb(largest.max_disk_bytes)} disk): add a class "
            f"to the recipe's runners.classes with max_memory_bytes >= {round_up(needed.peak_memory_bytes)} and "
            f"max_disk_bytes >= {round_up(needed.peak_disk_bytes)}, e.g. {{name: large, max_memory_bytes: "
            f"{round_up(needed.peak_memory_bytes)}, max_disk_bytes: {round_up(needed.peak_disk_bytes)}, "
            f"runs_on: [self-hosted, linux, x64, dflash-large]}}"
        ),
    )


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


def round_up(n: int, step: int = 10**9) -> int:
    """`n` rounded up to whole GB, as a recipe would state a class."""
    return -(-n // step) * step
