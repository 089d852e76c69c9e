"""Decide what to build from what is already published: the Hub is the state (DESIGN §2).

Each candidate costs one small request, its output repo's `openvino_export.json`, plus one per distinct target
(its current revision). A build happens only when `BuildInputs.changes_to` finds a difference (source or target
revision, recipe fingerprint, tracked toolchain, draft format) or on `--force`; a changed card template alone
re-renders the card without rebuilding. The builds are handed on as `BuildJob`s, the same record in one-process
`run` and in the Actions matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from bot.core import naming
from bot.core.errors import Skip
from bot.core.recipe import PublishSettings
from bot.core.record import BuildInputs, BuildRecord, Repos
from bot.core.toolchain import Toolchain
from bot.discover.candidates import Candidate
from bot.discover.checkpoints import DraftSpec, require_exportable
from bot.hub import RepoListing
from bot.plan.reuse import ReusedTarget


class Action(StrEnum):
    BUILD = "build"
    CARD = "card"  # re-render the published cards only
    UP_TO_DATE = "up-to-date"


@dataclass(frozen=True)
class Decision:
    """What to do with one listed source, and why."""

    listing: RepoListing
    action: Action
    reasons: tuple[str, ...]
    draft_repo: str
    published: BuildRecord | None  # the draft repo's record, when there is one

    def repos(self) -> Repos | None:
        """Both output repos, known when something is published (a build learns the target from discovery)."""
        return self.published.repos if self.published is not None else None


class BuildJob(BaseModel):
    """One build: a draft and its target pinned to revisions, what discovery learned, and where it publishes.

    Written by `plan --matrix` into the Actions matrix and read back by `build --job` (`BuildJob.model_validate`:
    a field missing, unknown or of the wrong type is refused).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str
    target: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    target_revision: str
    kind: str
    format: str
    target_model_type: str
    target_is_vlm: bool
    draft_bytes: int = Field(ge=0)
    target_bytes: int = Field(ge=0)
    profile: str
    draft_files: tuple[str, ...]
    target_files: tuple[str, ...]
    download_bytes: int = Field(ge=0)
    card_notes: tuple[str, ...] = ()  # what discovery dropped from the draft's card, for the report
    reasons: tuple[str, ...]
    draft_repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    target_repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    # The published target whose int4 IR the build downloads instead of exporting the target (bot.plan.reuse).
    reuse_target: ReusedTarget | None = None

    @classmethod
    def from_candidate(cls, candidate: Candidate, reasons: tuple[str, ...], publish: PublishSettings) -> BuildJob:
        assert candidate.repo_id and candidate.revision and candidate.target_repo and candidate.target_revision
        return cls(
            source=candidate.repo_id,
            revision=candidate.revision,
            target=candidate.target_repo,
            target_revision=candidate.target_revision,
            kind=candidate.kind,
            format=candidate.draft_format,
            target_model_type=candidate.target_model_type,
            target_is_vlm=candidate.target_is_vlm,
            draft_bytes=candidate.draft_bytes,
            target_bytes=candidate.target_bytes,
            profile=candidate.profile,
            draft_files=candidate.draft_files,
            target_files=candidate.target_files,
            download_bytes=candidate.download_bytes,
            card_notes=candidate.card_notes,
            reasons=tuple(reasons),
            draft_repo=draft_output_repo(publish, candidate.repo_id),
            target_repo=target_output_repo(publish, candidate.target_repo),
        )

    @property
    def repos(self) -> Repos:
        return Repos(draft=self.draft_repo, target=self.target_repo)

    @property
    def weight_bytes(self) -> int:
        return self.draft_bytes + self.target_bytes

    def candidate(self) -> Candidate:
        """Discovery's facts, for the build to verify the downloaded files against."""
        return Candidate(
            repo_id=self.source,
            revision=self.revision,
            kind=self.kind,
            draft_format=self.format,
            target_repo=self.target,
            target_revision=self.target_revision,
            target_model_type=self.target_model_type,
            target_is_vlm=self.target_is_vlm,
            draft_bytes=self.draft_bytes,
            target_bytes=self.target_bytes,
            profile=self.profile,
            draft_files=self.draft_files,
            target_files=self.target_files,
            download_bytes=self.download_bytes,
            card_notes=self.card_notes,
        )


def draft_output_repo(publish: PublishSettings, source_repo: str) -> str:
    """The draft's output repo (`bot.core.naming`: injective, within the Hub's limits).

    Raises:
        Skip: no valid output name can be made from the source id.
    """
    return naming.draft_output_repo(publish, source_repo)


def target_output_repo(publish: PublishSettings, target_repo: str) -> str:
    """The target's output repo (`bot.core.naming`)."""
    return naming.target_output_repo(publish, target_repo)


def expected_format(published: BuildRecord, toolchain: Toolchain) -> str | None:
    """The draft format this toolchain would export for the published kind (None if it cannot export it)."""
    spec = DraftSpec.of_kind(published.draft.kind, published.draft.architecture, published.draft.base_model_type)
    try:
        return require_exportable(spec, toolchain)
    except Skip:
        return None


def wanted_inputs(
    listing: RepoListing,
    published: BuildRecord,
    recipe_fingerprint: str,
    toolchain: Toolchain,
    target_revision: str | None,
) -> BuildInputs:
    """What a build of this listing would be made from now (None: not known at planning time)."""
    return BuildInputs(
        source_revision=listing.sha,
        target_revision=target_revision,
        recipe_fingerprint=recipe_fingerprint,
        draft_format=expected_format(published, toolchain),
        toolchain=toolchain.tracked(),
    )


def decide(
    listing: RepoListing,
    published: BuildRecord | None,
    *,
    publish: PublishSettings,
    recipe_fingerprint: str,
    toolchain: Toolchain,
    card_fingerprint: str,
    target_revision: str | None = None,
    force: bool = False,
) -> Decision:
    """Compare a listed source with its published record (pure: no Hub call).

    Args:
        toolchain: the toolchain the published build's target family plans with (`profiles.planned_toolchain`).
        target_revision: the target's current revision, when looked up (a new target commit rebuilds the pair).
    """
    draft_repo = draft_output_repo(publish, listing.repo_id)
    if force:
        return Decision(listing, Action.BUILD, ("forced",), draft_repo, published)
    if published is None:
        return Decision(listing, Action.BUILD, ("new",), draft_repo, None)
    reasons = published.inputs().changes_to(
        wanted_inputs(listing, published, recipe_fingerprint, toolchain, target_revision)
    )
    if reasons:
        return Decision(listing, Action.BUILD, tuple(reasons), draft_repo, published)
    if published.card is None or published.card.template_fingerprint != card_fingerprint:
        return Decision(listing, Action.CARD, ("card template changed",), draft_repo, published)
    return Decision(listing, Action.UP_TO_DATE, (), draft_repo, published)
