"""The records a group build passes between its modules: what to build, from which files, into which folder, and
how this machine runs it (`bot.builder.group` is the entry point; `bot.builder.target` and `bot.builder.draft` do the
work for the target and for each draft)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from bot.builder.bundle import Bundle, local_path_markers
from bot.builder.export import ExportRequest, ExportResult, export_model
from bot.core.errors import BotError, Stage
from bot.core.recipe import Recipe
from bot.core.settings import SANDBOX_LAYERS
from bot.core.toolchain import Toolchain
from bot.discover.checkpoints import DraftSpec, TargetSpec
from bot.plan.job import BuildJob

T = TypeVar("T")


@dataclass(frozen=True)
class Checkout:
    """A checkpoint on disk and, when it came from the Hub, where from."""

    path: Path
    repo_id: str | None = None
    revision: str | None = None

    @property
    def name(self) -> str:
        return self.repo_id or self.path.name


@dataclass(frozen=True)
class DraftBuild:
    """One draft of a group build, from the plan's job to the bundle: the one record of it that the builder hands
    in and back, extended by the steps (`dataclasses.replace`), never copied into another type.

    The job is held as the plan made it (`bot.plan.job.BuildJob`, read back from `jobs.json` or the Actions
    matrix): its record names the repos the job publishes to. A pair of local folders (`build --draft --target`,
    the toolchain trial) has no plan and makes a job of its own (`BuildJob.local`): its record names no repos, so no
    publish path takes it. The build adds its bundle (which may have failed a gate) or the error that stopped it;
    one draft's error never stops its siblings.
    """

    job: BuildJob
    checkout: Checkout
    out: Path  # its bundle folder
    bundle: Bundle | None = None
    error: BotError | None = None

    @property
    def ok(self) -> bool:
        return self.bundle is not None and self.bundle.passed and self.error is None

    def stopped(self, error: BotError, stage: Stage | None = None) -> DraftBuild:
        """This draft, stopped by `error`, which names it (and `stage`) where an inner layer did not."""
        return replace(self, error=error.at(subject=self.checkout.name, stage=stage))


@dataclass(frozen=True)
class VerifiedPair:
    """The configs of the downloaded files, after checking they match what discovery saw."""

    draft: DraftSpec
    target: TargetSpec


@dataclass(frozen=True)
class Schedule:
    """How this machine runs the group (bot.plan.sizing): exports side by side only when both fit its memory."""

    parallel_exports: bool
    memory_budget_bytes: int
    estimate: str
    sandbox_layers: tuple[str, ...] = SANDBOX_LAYERS  # the OS confinement its children may use (Settings)


def child_home(scratch: Path, name: str) -> Path:
    """The HOME, TMPDIR, XDG and HF folder of one export child of a group: its own, never shared."""
    return scratch / "homes" / name


@dataclass(frozen=True, kw_only=True)
class GroupContext:
    """What every step of one group build shares: the recipe, the toolchain, the scratch folder and the schedule."""

    recipe: Recipe
    toolchain: Toolchain
    scratch: Path
    schedule: Schedule

    def export(self, request: ExportRequest, quantization: list[str] | None) -> ExportResult:
        """One export child, in its own home, with the recipe's time limit and this machine's memory budget.

        Raises:
            Failure: as `bot.builder.export.export_model`.
        """
        return export_model(
            request,
            self.recipe.export,
            log_dir=self.scratch / "logs",
            home=child_home(self.scratch, request.name_or_role),
            python=self.toolchain.python,
            memory_budget_bytes=self.schedule.memory_budget_bytes,
            quantization=quantization,
            layers=self.schedule.sandbox_layers,
        )

    def environments(self) -> list[Path]:
        """The profile environment the children ran in, when it is not this one (its paths must not be
        published)."""
        return [Path(self.toolchain.python).parent.parent] if self.toolchain.python else []

    def public(self, text: str) -> str:
        """A message fit for a record and a card: this machine's work folder and environments left out."""
        for marker in local_path_markers(self.scratch, *self.environments()):
            text = text.replace(marker, "…")
        return text[:300]


def run_step(stage: Stage, action: Callable[[], T]) -> T:
    """Run one step; an error from it names the step (`export-draft`, `inspect-target`, ...)."""
    try:
        return action()
    except BotError as error:
        error.stage = stage
        raise
