"""The recipe's `runners` section: the runner classes a build can be sent to, and the sizing model that says how much
memory and disk a build needs (fitted by bench/scale.py; the estimates are `bot.plan.sizing`'s).

Kept apart from `bot.core.recipe`, which holds the section as `Recipe.runners`, and parsed under the same rule:
frozen models, unknown keys refused.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from bot.core.recipe_section import RecipeSection

# The build job's `timeout-minutes` in .github/workflows/watch.yml (330), in seconds: what a class's build must finish
# within unless the class states its own limit (tests/test_workflows.py holds the two equal).
BUILD_JOB_SECONDS = 330 * 60


class RunnerClass(RecipeSection):
    """One kind of GitHub Actions runner a build can be sent to, by the memory, disk, cores and time it has."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    max_memory_bytes: int = Field(
        ge=1,
        description="largest estimated anonymous peak this runner takes; also the memory guard's budget",
    )
    max_disk_bytes: int = Field(ge=1, description="largest estimated peak disk use (sources, IRs, bundle)")
    runs_on: str | list[str] = Field(description="the job's `runs-on`: a label or a list of labels")
    cores: int = Field(4, ge=1, description="CPU cores: the parallel stages' measured seconds scale by them")
    max_seconds: int | None = Field(
        BUILD_JOB_SECONDS,
        ge=1,
        description="the build job's time limit on this class (None: none); a build estimated past it is refused",
    )


class LinearFit(RecipeSection):
    """``a × bytes + b``: one stage's measured peak as a line in the bytes it reads."""

    a: float = Field(ge=0, allow_inf_nan=False)
    b: int

    def at(self, n_bytes: int) -> int:
        return max(0, int(self.a * n_bytes + self.b))


SizedStage = Literal["draft_export", "target_export", "validate", "inspect", "quality"]
# The stages the sizing model has lines for, defined once: `SizingModel` holds a `StageLines` for each, and
# `bot.plan.sizing.StagePeaks` one figure of each kind for each.
SIZED_STAGES: tuple[SizedStage, ...] = get_args(SizedStage)
LineKind = Literal["memory", "file"]
LINE_KINDS: tuple[LineKind, ...] = get_args(LineKind)
# A recipe's line names: `<stage>_<kind>` for these kinds (seconds beside the two memory kinds).
RECIPE_KINDS = (*LINE_KINDS, "seconds")
# The family whose lines stand for a target family measured on none of its own (and for every draft: a DFlash draft
# is a Qwen3 trunk whatever its target).
BASE_FAMILY = "qwen3"


class StageLines(RecipeSection):
    """One stage's lines: its anonymous peak (`memory`), its file-backed working set (`file`) and its wall seconds on
    the measuring machine's cores (`seconds`; None: not measured, so the stage adds no time to an estimate)."""

    memory: LinearFit
    file: LinearFit
    seconds: LinearFit | None = None


# Fitted by bench/scale.py on Qwen3 0.6B, 1.7B and 4B shapes; the measurements are in docs/scale.md (2-core AMD
# EPYC, 24 GiB, optimum-intel 2.2.0, NNCF 3.4.0, OpenVINO 2026.4.1). Rerun the benchmark to refit.
_FITTED: dict[SizedStage, StageLines] = {
    "draft_export": StageLines(
        memory=LinearFit(a=0.3708, b=492_713_759),
        file=LinearFit(a=1.0288, b=199_183_326),
        seconds=LinearFit(a=8.759e-09, b=14),
    ),
    "target_export": StageLines(
        memory=LinearFit(a=0.3071, b=1_977_722_951),
        file=LinearFit(a=1.0033, b=205_766_234),
        seconds=LinearFit(a=7.86e-09, b=34),
    ),
    "validate": StageLines(
        memory=LinearFit(a=0.3924, b=1_042_456_856),
        file=LinearFit(a=0.2682, b=217_871_387),
        seconds=LinearFit(a=1.927e-08, b=16),
    ),
    "inspect": StageLines(
        memory=LinearFit(a=0.0017, b=83_410_319), file=LinearFit(a=0.0, b=44_264_106), seconds=LinearFit(a=0.0, b=1)
    ),
    "quality": StageLines(
        memory=LinearFit(a=0.379, b=327_449_335),
        file=LinearFit(a=1.0347, b=-56_538_059),
        seconds=LinearFit(a=4.779e-09, b=15),
    ),
}


class SizingModel(RecipeSection):
    """Peaks and seconds per stage, fitted by bench/scale.py on real-shape random-weight builds; see docs/scale.md.

    `bytes` is the safetensors (bf16) size of what the stage reads: one model for an export and its IR, the target
    for inspect and the quality step, draft + target for validate (a small original's f32 copy in the quality step,
    2 x its bytes, is added to its line: `bot.plan.sizing.f32_copy_bytes`). The `memory` lines are the anonymous
    peak (plus swap) of the stage's whole process tree: what the kernel cannot drop, so what must fit a runner
    class's memory and what the memory guard compares with it. The
    `file` lines are the file-backed working set beside it (mapped checkpoints and IR weights): the kernel drops
    and rereads those pages under pressure, so it is reported (room for it keeps a stage fast) and never refuses a
    build. Disk is bytes allocated under the work folder. The `seconds` lines are wall seconds on `cores` cores
    (the validation line with the benchmark's short sweep: `bot.plan.sizing.BuildTime` adds the recipe's timing
    budget). Draft and target exports have lines of their own: a draft export carries optimum-intel's DFlash export
    path on top of its weights, a target's is the plain causal-LM export.

    The top-level lines are the Qwen3 (dense) family's, `BASE_FAMILY`. `families` holds the lines of each target
    family measured at its own width (`bench/scale.py --shapes NAME@1 NAME@2 NAME@3`: a fixed part and a per-layer
    part, which at one width is a line in bytes); a target of a family not listed there is sized by the Qwen3 lines,
    and the plan says so (`for_family`).

    A recipe names each stage's line `<stage>_<kind>` (`validate_memory: {a: ..., b: ...}`), as bench/scale.py
    writes them; a line it leaves out keeps its fitted default. The model is written back the same way.
    """

    stages: dict[SizedStage, StageLines] = Field(default_factory=lambda: dict(_FITTED))
    ir_bytes: LinearFit = LinearFit(a=0.2845, b=14_212_313)
    export_scratch_disk: LinearFit = LinearFit(a=1.0093, b=-63_083_564)
    cores: int = Field(2, ge=1, description="the cores the seconds lines were measured on")
    families: dict[str, SizingModel] = Field(default_factory=dict)
    measured_on: str | None = Field(
        None,
        description="a family's lines measured on another family (a stand-in until its own are measured): that one",
    )

    @field_validator("stages")
    @classmethod
    def _every_stage(cls, stages: dict[SizedStage, StageLines]) -> dict[SizedStage, StageLines]:
        missing = [stage for stage in SIZED_STAGES if stage not in stages]
        if missing:
            raise ValueError(f"no lines for {', '.join(missing)}")
        return {stage: stages[stage] for stage in SIZED_STAGES}

    @field_validator("families")
    @classmethod
    def _flat_families(cls, families: dict[str, SizingModel]) -> dict[str, SizingModel]:
        nested = [name for name, lines in families.items() if lines.families]
        if nested:
            raise ValueError(f"a family's lines hold no families of their own: {', '.join(nested)}")
        if BASE_FAMILY in families:
            raise ValueError(f"the top-level lines are {BASE_FAMILY}'s: list it there, not under families")
        return families

    def for_family(self, model_type: str) -> tuple[SizingModel, bool]:
        """The lines that size a target of `model_type`, and whether they were measured on that family (False:
        another family's lines stand in, an extrapolation the plan names: `measured_family`)."""
        if model_type == BASE_FAMILY:
            return self, True
        if model_type in self.families:
            lines = self.families[model_type]
            return lines, lines.measured_on in (None, model_type)
        return self, False

    def measured_family(self, model_type: str) -> str:
        """The family whose measurements size a target of `model_type`."""
        if model_type in self.families:
            return self.families[model_type].measured_on or model_type
        return model_type if model_type == BASE_FAMILY else BASE_FAMILY

    @classmethod
    def line_names(cls) -> list[str]:
        """Every line as a recipe names it."""
        return [
            *(f"{stage}_{kind}" for stage in SIZED_STAGES for kind in RECIPE_KINDS),
            "ir_bytes",
            "export_scratch_disk",
        ]

    @model_validator(mode="before")
    @classmethod
    def _stage_lines(cls, data: object) -> object:
        """A recipe's `<stage>_<kind>` lines into `stages`, each stage's missing line at its fitted default."""
        if not isinstance(data, dict) or "stages" in data:
            return data
        rest = dict(data)
        stages = {}
        for stage in SIZED_STAGES:
            fitted = _FITTED[stage]
            stages[stage] = {kind: rest.pop(f"{stage}_{kind}", getattr(fitted, kind)) for kind in RECIPE_KINDS}
        return {**rest, "stages": stages}

    @model_serializer(mode="wrap")
    def _as_recipe_lines(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        dumped = handler(self)
        stages = dumped.pop("stages", {})  # left out by an `exclude_defaults` dump
        lines = {
            f"{stage}_{kind}": figures[kind]
            for stage, figures in stages.items()
            for kind in RECIPE_KINDS
            if figures.get(kind) is not None
        }
        if not dumped.get("families", True):
            dumped.pop("families")
        if dumped.get("measured_on", "") is None:
            dumped.pop("measured_on")
        return {**lines, **dumped}


class RunnerSettings(RecipeSection):
    """Runner classes for the GitHub Actions fan-out (`plan --matrix`); not part of the recipe fingerprint.

    A build goes to the smallest class whose memory, disk and time limit take its estimates with `headroom` to spare
    (`bot.plan.sizing.choose_runner`, from the fitted `sizing` model and the target family's lines); a build no class
    covers is skipped with a reason naming the class to add. 0.15 is the largest error the depth extrapolation may
    have and still pass its check (docs/scale.md: fit on two depths, predict a third within 15 %).
    """

    classes: list[RunnerClass] = Field(
        default_factory=lambda: [
            RunnerClass(
                name="standard", max_memory_bytes=15 * 10**9, max_disk_bytes=30 * 10**9, runs_on="ubuntu-latest"
            )
        ],
        min_length=1,
    )
    sizing: SizingModel = Field(default_factory=SizingModel)
    headroom: float = Field(
        0.15,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="a class takes a build when each estimate (memory, disk, seconds) times 1 + headroom fits it",
    )
    max_entries: int = Field(256, ge=1, le=256, description="matrix entries per run (GitHub allows 256)")

    @field_validator("classes")
    @classmethod
    def _sorted_unique(cls, classes: list[RunnerClass]) -> list[RunnerClass]:
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise ValueError(f"runner class names must be unique: {names}")
        return sorted(classes, key=lambda c: (c.max_memory_bytes, c.max_disk_bytes))
