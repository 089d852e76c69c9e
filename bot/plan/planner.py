"""Decide what to build from what is already published: the Hub is the state (DESIGN §2).

Each candidate costs one small request, its output repo's `openvino_export.json`, plus one per distinct target
(its current revision). A build happens only when `BuildInputs.changes_to` finds a difference (source or target
revision, recipe fingerprint, tracked toolchain, draft format) or on `--force`; a changed card template alone
re-renders the card without rebuilding. The builds are handed on as `BuildJob`s, the same record in one-process
`run` and in the Actions matrix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.core import naming
from bot.core.errors import Skip
from bot.core.recipe import PublishSettings
from bot.core.record import BuildInputs, BuildRecord, Repos
from bot.core.toolchain import Toolchain
from bot.discover.candidates import Candidate
from bot.discover.checkpoints import DraftSpec, require_exportable
from bot.hub import RepoListing
from bot.plan.reuse import ReusedTarget

REPO_ID = r"^[\w.-]+/[\w.-]+$"  # owner/name, as the Hub spells repo ids
CARD_CHANGED = "card template changed"  # the one reason a published build gets its cards re-rendered


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
    """One build: discovery's `Candidate` (a draft and its target pinned to revisions), why, and where it publishes.

    The candidate is held as discovery made it, never copied field by field: the build verifies its downloads
    against it. Written by `plan --matrix` into the Actions matrix and read back by `build --job`
    (`BuildJob.model_validate`: a field missing, unknown or of the wrong type is refused, and so is a candidate
    without both repos and revisions pinned).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    candidate: Candidate
    reasons: tuple[str, ...]
    draft_repo: str = Field(pattern=REPO_ID)
    target_repo: str = Field(pattern=REPO_ID)
    # The published target whose int4 IR the build downloads instead of exporting the target (bot.plan.reuse).
    reuse_target: ReusedTarget | None = None

    @model_validator(mode="after")
    def _pinned(self) -> BuildJob:
        """A build downloads from the Hub: both repo ids well formed (they name folders too), both revisions set."""
        candidate = self.candidate
        for role, repo in (("source", candidate.repo_id), ("target", candidate.target_repo)):
            if repo is None or not re.fullmatch(REPO_ID, repo):
                raise ValueError(f"the {role} repo id {repo!r} is not owner/name")
        if not candidate.revision or not candidate.target_revision:
            raise ValueError("a build job pins the source and the target revision")
        if min(candidate.draft_bytes, candidate.target_bytes, candidate.download_bytes) < 0:
            raise ValueError("a build job's byte counts are not negative")
        return self

    @classmethod
    def from_candidate(cls, candidate: Candidate, reasons: tuple[str, ...], publish: PublishSettings) -> BuildJob:
        """The job for a resolved candidate: the candidate itself, why it is built, and both output repos."""
        assert candidate.repo_id and candidate.target_repo
        return cls(
            candidate=candidate,
            reasons=tuple(reasons),
            draft_repo=draft_output_repo(publish, candidate.repo_id),
            target_repo=target_output_repo(publish, candidate.target_repo),
        )

    # The pinned ids, typed as set (`_pinned` checked them): what the run's bookkeeping goes by.
    @property
    def source(self) -> str:
        return self.candidate.repo_id or ""

    @property
    def revision(self) -> str:
        return self.candidate.revision or ""

    @property
    def target(self) -> str:
        return self.candidate.target_repo or ""

    @property
    def target_revision(self) -> str:
        return self.candidate.target_revision or ""

    @property
    def repos(self) -> Repos:
        return Repos(draft=self.draft_repo, target=self.target_repo)


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
        return Decision(listing, Action.CARD, (CARD_CHANGED,), draft_repo, published)
    return Decision(listing, Action.UP_TO_DATE, (), draft_repo, published)
