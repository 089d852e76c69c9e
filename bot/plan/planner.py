"""Decide what to build from what is already published: the Hub is the state (docs/design.md §2).

Each candidate costs one small request, its output repo's `openvino_export.json`, plus one per distinct target
(its current revision). A build happens only when `BuildInputs.changes_to` finds a difference (source or target
revision, recipe fingerprint, tracked toolchain, draft format) or on `--force`; a changed card template alone
re-renders the card without rebuilding. `decide` compares one source with its record (pure); `Planner` holds what
one run looks up once (this environment's toolchain, the card fingerprint, target heads, reusable and official
targets) and turns each listed source into its `Decision` and, for a build, its `bot.plan.job.BuildJob`: the same
record in one-process `run` and in the Actions matrix. Which sources to examine at all (the status memory) and what
becomes of an error are the run's (`bot.plan.step`, `bot.run.run_side`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from bot.core import log, naming, profiles
from bot.core.errors import BotError, Skip, Stage
from bot.core.exporter import target_task
from bot.core.fingerprints import template_fingerprint
from bot.core.hub_records import RepoListing
from bot.core.outcome import Outcome, Status
from bot.core.recipe import PublishSettings, Recipe
from bot.core.record import BuildInputs, BuildRecord, Repos
from bot.core.toolchain import Toolchain
from bot.discover import candidates as discover
from bot.discover.checkpoints import DraftSpec, require_exportable
from bot.discover.trust import Trust, dispatch_hint, exclusion, not_approved
from bot.hub.client import Hub
from bot.plan.job import BuildJob, planned_repos
from bot.plan.official import OfficialRepo, find_official
from bot.plan.reuse import ReusedTarget, plan_reuse

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
    naming.draft_output_repos(publish, listing.repo_id)  # a source no name can be made for is skipped here
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


def card_refreshes(decisions: Iterable[Decision]) -> list[BuildRecord]:
    """The published records whose cards planning found stale: re-rendered by the publish step, no rebuild."""
    return [d.published for d in decisions if d.action == Action.CARD and d.published is not None]


def planned_outcomes(builds: Iterable[tuple[BuildJob, str]], card_refresh: Iterable[BuildRecord]) -> list[Outcome]:
    """A dry run's outcomes: what each planned build (on the machine or runner class named) and card refresh
    would do, in the one wording `run --dry-run` and `plan --dry-run` share, each naming the repos it would publish
    to (`planned_repos`; a card refresh: the pair its record names)."""
    outcomes = []
    for job, where in builds:
        reason = f"{Action.BUILD} on {where}: {'; '.join(job.reasons)} (target {job.target})"
        outcomes.append(Outcome(job.source, job.revision, Status.PLANNED, reason, planned_repos(job)))
    for published in card_refresh:
        reason = f"{Action.CARD}: {CARD_CHANGED}"
        repos = [published.repos.draft, published.repos.target] if published.repos is not None else []
        outcomes.append(Outcome(published.source.repo or "", published.source.revision, Status.PLANNED, reason, repos))
    return outcomes


class KnownNamespace(Protocol):
    """What the status memory tells planning about the output namespace (`bot.status.sync.StatusMemory`)."""

    @property
    def namespace_listing(self) -> Mapping[str, str]: ...

    def changed_outside(self, repo_id: str) -> bool: ...


class Planner:
    """One run's planning, and what it looks up once per run: this environment's toolchain, the card fingerprint,
    toolchains by target family, target revisions by target repo, reuse and official targets by target, and the draft
    records read (so a source whose remembered publish was checked does not read its record twice).

    Args:
        reader: the Hub with the read token.
        recipe: what to watch and how to build it.
        force: `--force`: build every source examined, exporting every target.
        bot_user: the Hub user the bot publishes as, for reuse checks (default: the recipe's `publish.bot_user`).
        profiles_dir: where the toolchain profiles' environments are (their recorded capabilities).
        dispatched: the repo a maintainer dispatched (`--only`): approved, with its target, for this run
            (`bot.discover.trust`).
    """

    def __init__(
        self,
        reader: Hub,
        recipe: Recipe,
        *,
        force: bool = False,
        bot_user: str | None = None,
        profiles_dir: Path,
        dispatched: str | None = None,
    ) -> None:
        self.reader, self.recipe, self.force, self.profiles_dir = reader, recipe, force, profiles_dir
        self.trust = Trust.of(recipe, dispatched)
        self.bot_user = bot_user or recipe.publish.bot_user
        self.toolchain = profiles.planning_toolchain()
        self.card_fp = template_fingerprint()
        self.recipe_fp = recipe.fingerprint()
        # The status memory's view of the namespace, once read (None: not read, every name is looked up).
        self.memory: KnownNamespace | None = None
        self._families: dict[str, Toolchain | None] = {}
        self._heads: dict[str, str | None] = {}
        self._reusable: dict[tuple[str, str], tuple[ReusedTarget | None, str | None]] = {}
        self._official: dict[str, tuple[OfficialRepo | None, str | None]] = {}
        self._records: dict[str, BuildRecord | None] = {}

    def discover(self) -> tuple[list[RepoListing], list[discover.SkipRecord]]:
        """The recipe's listing: the sources to examine, and those the listing itself rules out."""
        return discover.list_sources(self.reader, self.recipe, self.trust)

    def plan(self, listing: RepoListing) -> tuple[Decision, BuildJob | None]:
        """One examined source's decision, and its build job when it is to be built.

        Raises:
            BotError: a Hub request failed, or the source is skipped (no output name, no exportable draft, ...).
        """
        published_repo, published = self._published_draft(listing.repo_id)
        target_revision = self._target_head(published) if published and not self.force else None
        decision = self._decide(listing, published, target_revision=target_revision, published_repo=published_repo)
        decision = self._approved(decision)
        log.step("%s: %s %s", listing.repo_id, decision.action, "; ".join(decision.reasons))
        return decision, self._job(listing, decision) if decision.action == Action.BUILD else None

    def _approved(self, decision: Decision) -> Decision:
        """A build only with an approval (`bot.discover.trust`): a trusted draft (its target's author is checked
        when it is resolved) or this run's dispatch. A pair published on a maintainer's request stays as it is,
        current, until the maintainer dispatches it again (or trusts its authors); anything else unapproved is
        seen, not approved.

        Raises:
            Skip: at `Stage.APPROVE`, nothing of the source is published and nobody approved building it.
        """
        source = decision.listing.repo_id
        if decision.action != Action.BUILD or self.trust.is_dispatched(source):
            return decision
        own = decision.published if decision.published is not None and _published_as(decision) else None
        if self.trust.draft_trusted(source) and (
            own is None or own.approved_by != "dispatch" or self.trust.target_trusted(own.target.repo or "")
        ):
            return decision
        if own is None:
            raise not_approved(self.trust.draft_reason(source), source)
        kept = (
            f"published on a maintainer's request (rev {(own.source.revision or '')[:7]}), kept as it is: it would "
            f"be built again ({'; '.join(decision.reasons)}), and only another dispatch approves that "
            f"({dispatch_hint(source)})"
        )
        return Decision(decision.listing, Action.UP_TO_DATE, (kept,), decision.draft_repo, own)

    def current(self, listing: RepoListing, record: BuildRecord) -> bool:
        """Whether a published record is up to date for this listing, its target's head not looked up (what a
        remembered publish saves)."""
        return self._decide(listing, record, target_revision=None).action == Action.UP_TO_DATE

    def draft_record(self, draft_repo: str, revision: str | None = None) -> BuildRecord | None:
        """A published draft repo's record (one request per repo and run)."""
        if draft_repo not in self._records:
            self._records[draft_repo] = self.reader.draft_record(draft_repo, revision)
        return self._records[draft_repo]

    def listing_for(self, repo_id: str) -> RepoListing:
        """A listing for a repo `--only` names (or the status memory holds published) that the recipe's listing did
        not return.

        Raises:
            Skip: the recipe's `watch.exclude` names it (excluded repos are never built, whoever dispatches them).
        """
        if reason := exclusion(repo_id, self.recipe.watch.exclude):
            raise Skip(reason, subject=repo_id, stage=Stage.DISCOVER)
        files = self.reader.repo_files(repo_id)
        return RepoListing(
            repo_id=repo_id,
            sha=files.sha,
            last_modified=None,
            tags=(),
            gated=files.gated,
            private=files.private,
            architectures=(),
            model_type=None,
            card_data=files.card_data,
        )

    def _decide(
        self,
        listing: RepoListing,
        published: BuildRecord | None,
        *,
        target_revision: str | None,
        published_repo: str | None = None,
    ) -> Decision:
        # A published build is compared with its target family's planned toolchain, not this process's.
        family = self._family(published.target.model_type) if published is not None else None
        return decide(
            listing,
            published,
            publish=self.recipe.publish,
            recipe_fingerprint=self.recipe_fp,
            toolchain=family or self.toolchain,  # no profile: resolve() reports it with its reason
            card_fingerprint=self.card_fp,
            target_revision=target_revision,
            force=self.force,
            published_repo=published_repo,
        )

    def _job(self, listing: RepoListing, decision: Decision) -> BuildJob:
        """Resolve the candidate (config, card, target, sizes) and plan its build: the official target IR to try
        first (`bot.plan.official`, forced builds too), and the published target IR to reuse when that is provably
        the build this one would export (`bot.plan.reuse`; a forced build exports all)."""
        candidate = discover.resolve(
            self.reader, listing, self.recipe, profiles_dir=self.profiles_dir, trust=self.trust
        )
        job = BuildJob.from_candidate(
            candidate,
            decision.reasons,
            self.recipe.publish,
            formats=self.recipe.export.draft_weight_formats,
            published=_published_as(decision),
        )
        official, official_not = self._official_target(job)
        official_reasons = (*job.reasons, *([f"official target not used: {official_not}"] if official_not else []))
        job = job.model_copy(update={"official_target": official, "reasons": official_reasons})
        if self.force:
            return job
        reuse, why_not = self._reusable_target(job)
        reasons = (*job.reasons, *([f"target exported again ({why_not})"] if why_not else []))
        return job.model_copy(update={"reuse_target": reuse, "reasons": reasons})

    def _family(self, model_type: str) -> Toolchain | None:
        """The toolchain a target family builds in (`profiles.planned_toolchain`); None when no profile covers it."""
        if model_type not in self._families:
            try:
                self._families[model_type] = profiles.planned_toolchain(model_type, root=self.profiles_dir)
            except Skip:
                self._families[model_type] = None
        return self._families[model_type]

    def _published_draft(self, source: str) -> tuple[str | None, BuildRecord | None]:
        """Where a source's draft is published, and its record: the repo of each weight format's name is read (one
        request each; none for a name the status memory's namespace listing does not hold), and of two, this
        source's newest build wins (the other is the repo a format switch left behind, its card pointing here)."""
        listed = {repo.lower() for repo in self.memory.namespace_listing} if self.memory is not None else None
        found: list[tuple[str, BuildRecord]] = []
        for repo in dict.fromkeys(naming.draft_output_repos(self.recipe.publish, source).values()):
            if listed is not None and repo.lower() not in listed:
                continue
            record = self.draft_record(repo)
            if record is not None:
                found.append((repo, record))
        if not found:
            return None, None
        return max(found, key=lambda item: (item[1].source.repo == source, item[1].built_at))

    def _reusable_target(self, job: BuildJob) -> tuple[ReusedTarget | None, str | None]:
        """The published target IR this job can build against instead of exporting, and why not; once per target."""
        target_repo = job.repos.target
        key = (target_repo, job.target_revision)
        if key not in self._reusable:
            toolchain = self._family(job.candidate.target_model_type)
            self._reusable[key] = (
                (None, None)
                if toolchain is None
                else plan_reuse(
                    self.reader,
                    target_repo,
                    job.target_revision,
                    self.recipe.export,
                    target_task(job.candidate.target_is_vlm),
                    toolchain,
                    bot_user=self.bot_user,
                    changed_outside=self.memory is not None and self.memory.changed_outside(target_repo),
                )
            )
        return self._reusable[key]

    def _official_target(self, job: BuildJob) -> tuple[OfficialRepo | None, str | None]:
        """The official target IR this job tries before exporting the target, or why the official repos found do not
        serve (`bot.plan.official`); looked up once per target and run."""
        if job.target not in self._official:
            self._official[job.target] = find_official(
                self.reader, self.recipe.publish, job.target, is_vlm=job.candidate.target_is_vlm
            )
        return self._official[job.target]

    def _target_head(self, published: BuildRecord) -> str | None:
        """The target's current revision (one light request per target); None when it cannot be read now."""
        repo = published.target.repo
        if repo is None:
            return None
        if repo not in self._heads:
            try:
                self._heads[repo] = self.reader.head(repo)
            except BotError as error:
                log.step("%s: cannot read the target's revision (%s); not compared", repo, error.message)
                self._heads[repo] = None
        return self._heads[repo]


def _published_as(decision: Decision) -> tuple[str, str] | None:
    """(repo, weight format) of the source's own published build, which its build keeps unless another format is
    faster by the recipe's margin; None when nothing of this source is published (another source's build in the
    repo is never kept, nor superseded: publish refuses to overwrite it)."""
    published, repo = decision.published, decision.draft_repo
    if published is None or repo is None or published.source.repo != decision.listing.repo_id:
        return None
    return repo, published.draft_weight_format
