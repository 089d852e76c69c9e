"""Decide what to build from what is already published: the Hub is the state (DESIGN §2).

Each candidate costs one small request, its output repo's `openvino_export.json`, plus one per distinct target
(its current revision). A build happens only when `BuildInputs.changes_to` finds a difference (source or target
revision, recipe fingerprint, tracked toolchain, draft format) or on `--force`; a changed card template alone
re-renders the card without rebuilding. The builds are handed on as `BuildJob`s, the same record in one-process
`run` and in the Actions matrix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.core import naming
from bot.core.errors import Skip
from bot.core.recipe import PublishSettings
from bot.core.record import BuildInputs, BuildRecord, Repos
from bot.core.toolchain import Toolchain
from bot.discover.candidates import Candidate
from bot.discover.checkpoints import DraftSpec, require_exportable
from bot.hub import RepoListing
from bot.plan.official import OfficialRepo
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
    draft_repo: str | None  # the repo the draft is published in (its record was read there); None: not published
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
    # Where the draft is published now, or (a new draft) where its first weight format would be.
    draft_repo: str = Field(pattern=REPO_ID)
    target_repo: str = Field(pattern=REPO_ID)
    # Weight format -> the repo the draft is published to when the build chooses that format (`bot.core.naming`);
    # empty: `draft_repo` for every format.
    draft_repos: dict[str, Annotated[str, Field(pattern=REPO_ID)]] = Field(default_factory=dict)
    # The weight format `draft_repo`'s record holds (None: nothing published): the build keeps it unless another
    # format measures faster by the recipe's `publish.format_switch_margin` (bot.builder.weight_formats).
    published_format: str | None = None
    # The published target whose int4 IR the build downloads instead of exporting the target (bot.plan.reuse).
    reuse_target: ReusedTarget | None = None
    # The official target IR the build tries first; when it serves, no target is exported (bot.plan.official).
    official_target: OfficialRepo | None = None

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
    def from_candidate(
        cls,
        candidate: Candidate,
        reasons: tuple[str, ...],
        publish: PublishSettings,
        *,
        formats: Sequence[str] = naming.DRAFT_WEIGHT_FORMATS,
        published: tuple[str, str] | None = None,
    ) -> BuildJob:
        """The job for a resolved candidate: the candidate itself, why it is built, and its output repos.

        Args:
            formats: the recipe's `export.draft_weight_formats` (the first names a new draft's `draft_repo`).
            published: (repo, weight format) of the draft as published now, as planning found it.
        """
        assert candidate.repo_id and candidate.target_repo
        draft_repos = draft_output_repos(publish, candidate.repo_id)
        return cls(
            candidate=candidate,
            reasons=tuple(reasons),
            draft_repo=published[0] if published else draft_repos[formats[0]],
            target_repo=target_output_repo(publish, candidate.target_repo),
            draft_repos=draft_repos,
            published_format=published[1] if published else None,
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
        """The repos as planned (`draft_repo`); a build publishes to `repos_for` its chosen weight format."""
        return Repos(draft=self.draft_repo, target=self.target_repo)

    def repos_for(self, weight_format: str) -> Repos:
        """The repos a build whose draft was chosen in `weight_format` publishes to."""
        return self.repos.model_copy(update={"draft": self.draft_repos.get(weight_format, self.draft_repo)})

    def replaced_repo(self, weight_format: str) -> str | None:
        """The published repo a build in `weight_format` replaces (its card then points to the new one): the draft
        was published under another format's name; None when it goes to the same repo or nothing was published."""
        new = self.repos_for(weight_format).draft
        return self.draft_repo if self.published_format is not None and self.draft_repo != new else None


def draft_output_repo(publish: PublishSettings, source_repo: str, weight_format: str) -> str:
    """The draft's output repo in one weight format (`bot.core.naming`: injective, within the Hub's limits).

    Raises:
        Skip: no valid output name can be made from the source id.
    """
    return naming.draft_output_repo(publish, source_repo, weight_format)


def draft_output_repos(publish: PublishSettings, source_repo: str) -> dict[str, str]:
    """Weight format -> the draft's output repo in it: where planning looks for what is published.

    Raises:
        Skip: no valid output name can be made from the source id.
    """
    return naming.draft_output_repos(publish, source_repo)


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
    published_repo: str | None = None,
) -> Decision:
    """Compare a listed source with its published record (pure: no Hub call).

    Args:
        toolchain: the toolchain the published build's target family plans with (`profiles.planned_toolchain`).
        target_revision: the target's current revision, when looked up (a new target commit rebuilds the pair).
        published_repo: the repo `published` was read from (default: the one the record names).

    Raises:
        Skip: no valid output name can be made from the source id.
    """
    draft_output_repos(publish, listing.repo_id)  # a source no name can be made for is skipped here
    named = published.repos.draft if published is not None and published.repos is not None else None
    draft_repo = published_repo or named
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
