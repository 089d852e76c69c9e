"""The build job: one candidate to build, why, and where it publishes; the one record planning hands on to the build.

`plan --matrix` writes it into the Actions matrix and `build --job` reads it back; `dflash-bot run` hands the same
record to its builder in `jobs.json`.

Published repo names are derived here only (`OutputRepos`, from the recipe's naming rule in `bot.core.naming`): the
plan keeps them in the job, the builder writes `OutputRepos.for_build` of the format it chose into the record, the
hand-off and the publisher hold the record to them, and `publish --bundle` names them from the bundle's record
(`OutputRepos.named`) the same way.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.core import naming
from bot.core.errors import Skip
from bot.core.recipe import PublishSettings
from bot.core.record import BuildRecord, OfficialTarget, Repos
from bot.discover.candidates import Candidate
from bot.plan.official import OfficialRepo
from bot.plan.reuse import ReusedTarget

REPO_ID = r"^[\w.-]+/[\w.-]+$"  # owner/name, as the Hub spells repo ids


@dataclass(frozen=True)
class OutputRepos:
    """Every repo one source's builds may be published to: the draft repo of each weight format and the target repo.

    The one place a pair's published repos are composed (`named` applies the recipe's naming rule; a `BuildJob`
    holds the result as planned, `BuildJob.outputs`).
    """

    drafts: Mapping[str, str]  # weight format -> draft repo, in naming order
    target: str
    # The draft repo of a weight format `drafts` does not list (a job planned with one draft repo for every format);
    # None: such a format is refused.
    fallback: str | None = None

    @classmethod
    def named(cls, publish: PublishSettings, source: str, target: str) -> OutputRepos:
        """The repos the recipe's naming rule gives a draft `source` and its `target` (`bot.core.naming`).

        Raises:
            Skip: no valid repo id can be made from `source` or `target`.
        """
        return cls(naming.draft_output_repos(publish, source), naming.target_output_repo(publish, target))

    @property
    def family(self) -> tuple[str, ...]:
        """Every format's draft repo, in naming order: read around a draft commit so a source keeps one live repo."""
        return tuple(self.drafts.values())

    def for_build(self, weight_format: str, official: OfficialTarget | None = None) -> Repos:
        """The repos a build whose draft was chosen in `weight_format` is published to: that format's draft repo,
        and the target repo, or the official target's when the draft was validated against it (`official.used`: no
        target of the bot's own exists for it).

        Raises:
            Skip: `weight_format` has no draft repo here.
        """
        draft = self.drafts.get(weight_format, self.fallback)
        if draft is None:
            raise Skip(
                f"cannot name the draft for weight format {weight_format!r}: not one of {', '.join(self.drafts)}"
            )
        target = official.repo if official is not None and official.used else self.target
        return Repos(draft=draft, target=target)


class BuildJob(BaseModel):
    """One build: discovery's `Candidate` (a draft and its target pinned to revisions), why, and where it publishes.

    The candidate is held as discovery made it, never copied field by field: the build verifies its downloads
    against it, and the builder's record of the draft (`bot.builder.draft_build.DraftBuild`) holds this job as it is.
    Written by `plan --matrix` into the Actions matrix and read back by `build --job` (`BuildJob.model_validate`: a
    field missing, unknown or of the wrong type is refused, and so is a candidate without both repos and revisions
    pinned). A build of local folders has no plan and makes a job of its own (`BuildJob.local`): no output repos,
    so its record names none and no publish path takes it; `build --job` refuses such a job (`planned`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    candidate: Candidate
    reasons: tuple[str, ...]
    # Where the draft is published now, or (a new draft) where its first weight format would be; both None: a local
    # build (`BuildJob.local`), published nowhere.
    draft_repo: Annotated[str, Field(pattern=REPO_ID)] | None
    target_repo: Annotated[str, Field(pattern=REPO_ID)] | None
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
        """A build downloads from the Hub: both repo ids well formed (they name folders too), both revisions set.
        A local build (no output repos) downloads nothing and publishes nowhere: it names nothing to publish."""
        if self.draft_repo is None and self.target_repo is None:
            if self.draft_repos or self.published_format or self.reuse_target or self.official_target:
                raise ValueError("a local build job (no output repos) names no format repo, published or reused target")
            return self
        if self.draft_repo is None or self.target_repo is None:
            raise ValueError("a build job names both output repos, or neither (a local build)")
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
        outputs = OutputRepos.named(publish, candidate.repo_id, candidate.target_repo)
        return cls(
            candidate=candidate,
            reasons=tuple(reasons),
            draft_repo=published[0] if published else outputs.drafts[formats[0]],
            target_repo=outputs.target,
            draft_repos=dict(outputs.drafts),
            published_format=published[1] if published else None,
        )

    @classmethod
    def local(cls, candidate: Candidate) -> BuildJob:
        """The job of a build without a plan (`build --draft --target`, the toolchain trial): local folders,
        classified as discovery would (`bot.discover.candidates.classify_folders`), published nowhere."""
        return cls(candidate=candidate, reasons=("local folders",), draft_repo=None, target_repo=None)

    @property
    def planned(self) -> bool:
        """Whether the plan made this job (it names its output repos); False: a local build (`local`)."""
        return self.draft_repo is not None

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
        """The repos as planned (`draft_repo`); a build publishes to `repos_for` its chosen weight format.

        Raises:
            ValueError: a local build's job (`local`) names none.
        """
        if self.draft_repo is None or self.target_repo is None:
            raise ValueError("a local build job names no output repos")
        return Repos(draft=self.draft_repo, target=self.target_repo)

    @property
    def outputs(self) -> OutputRepos:
        """Every repo this job's build may be published to, as planned (`draft_repo` for a format without a repo
        of its own)."""
        planned = self.repos
        return OutputRepos(self.draft_repos, planned.target, fallback=planned.draft)

    def repos_for(self, weight_format: str, official: OfficialTarget | None = None) -> Repos:
        """The repos a build of this job in `weight_format`, tried against `official`, is published to
        (`OutputRepos.for_build`): the builder writes them into the record (`BuildRecord.repos`), and the hand-off
        and the publisher hold the record to them (`publish_repos`)."""
        return self.outputs.for_build(weight_format, official)

    def publish_repos(self, built: BuildRecord) -> Repos:
        """The repos this job's build `built` is published to: `repos_for` the weight format it chose and the
        official target it tried."""
        return self.repos_for(built.draft_weight_format, built.official_target)

    def replaced_repo(self, weight_format: str) -> str | None:
        """The published repo a build in `weight_format` replaces (its card then points to the new one): the draft
        was published under another format's name; None when it goes to the same repo or nothing was published."""
        new = self.repos_for(weight_format).draft
        return self.draft_repo if self.published_format is not None and self.draft_repo != new else None


def group_jobs(jobs: list[BuildJob]) -> dict[tuple[str, str], list[BuildJob]]:
    """Jobs by target and target revision: one target download and export serves the whole group."""
    groups: dict[tuple[str, str], list[BuildJob]] = defaultdict(list)
    for job in jobs:
        groups[(job.target, job.target_revision)].append(job)
    return dict(groups)


def planned_repos(job: BuildJob) -> list[str]:
    """The repos a planned build may publish to: its draft repo as planned, the repo of each other weight format
    the build may choose instead (the measured faster one is published, `publish.format_switch_margin`), then the
    target repo (unused when the official target IR serves, `bot.plan.official`)."""
    repos = job.repos
    return list(dict.fromkeys((repos.draft, *job.outputs.family, repos.target)))
