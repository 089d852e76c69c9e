"""The plan step of every run: discover the watched sources, read what the status repo remembers, decide what to build.

`dflash-bot run` and the Actions plan job call `plan_run` alike; what they do next differs only in where the builds
run (`bot.run.pipeline`, `bot.run.fanout`). Each source is planned under `guard`, so one source's problem is its
outcome and never stops the others. The toolchain of this environment is detected once here and passed down.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bot.builder.export import target_task
from bot.core import log, profiles
from bot.core.errors import BotError, Skip, Stage
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe
from bot.core.record import BuildRecord, Repos
from bot.core.settings import Settings
from bot.core.toolchain import Toolchain
from bot.discover import candidates as discover
from bot.hub import Hub, RepoListing
from bot.plan import planner as plan
from bot.plan.official import OfficialRepo, find_official
from bot.plan.reuse import ReusedTarget, plan_reuse
from bot.publish.card import template_fingerprint
from bot.run.report import RunReport
from bot.status import step as status_step
from bot.status.memory import StatusEntry, toolchain_fingerprint


@dataclass(frozen=True)
class RunOptions:
    only: str | None = None
    force: bool = False
    dry_run: bool = False
    work: Path | None = None
    keep_work: bool = False
    recheck: bool = False  # examine every source, whatever the status repo remembers
    bot_user: str | None = None  # the Hub user the bot publishes as (`run`: the write token's), for reuse checks
    # The CLI's (profile environments for planning, the builder's confinement); tests get the defaults.
    settings: Settings = field(default_factory=Settings)


@dataclass
class RunMemory:
    """What a run keeps for the status repo: the memory it planned with and what it learned since.

    Attributes:
        memory: the status repo and the output namespace as planning read them (None: unreadable, so every
            source was examined).
        listed: every source id the listing returned (sources no longer listed leave the status page).
        remembered: sources reported from memory (no Hub request was made for them).
        published: source -> (record, repos) of every source published or found up to date this run.
    """

    memory: status_step.Memory | None = None
    listed: list[str] = field(default_factory=list)
    remembered: set[str] = field(default_factory=set)
    published: dict[str, tuple[BuildRecord, Repos]] = field(default_factory=dict)

    def examined(self, report: RunReport) -> list[Outcome]:
        return [o for o in report.outcomes if o.source not in self.remembered]


def guard(report: RunReport, source: str, revision: str | None, action: Callable[[], object]) -> bool:
    """Run one candidate's step; any error becomes that candidate's outcome and the run goes on.

    A `BotError` is an expected skip or failure; anything else is a bug or a hostile input nobody foresaw, reported
    as a failure with its one-line cause while its traceback goes to the log at error level (on Actions an
    annotation and the lines after it). Returns True when the step finished.
    """
    try:
        action()
        return True
    except BotError as error:
        report.add(Outcome.of_error(source, revision, error))
    except Exception as exc:
        cause = f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        log.get().error("%s: %s", source, cause, exc_info=exc)  # a bug: its traceback at error level, not one line
        report.add(Outcome(source, revision, Status.FAILED, cause))
    return False


def guard_group(report: RunReport, jobs: list[plan.BuildJob], action: Callable[[], object]) -> bool:
    """`guard` for a step that serves several sources (a target group): when it stops, each source gets the cause."""
    if guard(report, jobs[0].source, jobs[0].revision, action):
        return True
    cause = report.outcomes[-1]
    for job in jobs[1:]:
        report.add(Outcome(job.source, job.revision, cause.status, cause.reason))
    return False


def plan_run(
    reader: Hub, recipe: Recipe, options: RunOptions, report: RunReport, state: RunMemory | None = None
) -> tuple[list[plan.Decision], list[plan.BuildJob]]:
    """Discover and plan: a decision for every examined source, and a build job for each one to build.

    With `state`, the status repo's memory is read first (two requests) and a source whose revision, toolchain
    and recipe are unchanged since it was last examined is reported from memory: a skip or failure without a
    request of its own, a publish after one read of its draft repo's record. All of it runs within the recipe's
    plan deadline (`hub.plan_deadline_s`): past it, each source not planned yet fails this run at its next Hub
    request, and is examined again by the next run.

    Args:
        reader: the Hub with the read token.
        recipe: what to watch and how to build it.
        options: the run's options (`only`, `force`, `recheck`, `bot_user` for target reuse).
        report: receives every source's outcome that planning decides (skips, failures, up to date).
        state: receives what the status page needs (the memory, the listing, the sources found up to date).

    Returns:
        (decisions, build jobs); a source that failed or was skipped in planning has neither.
    """
    planner = _Planner(reader, recipe, options, report, state if state is not None else RunMemory())
    with reader.deadline(Stage.PLAN, recipe.hub.plan_deadline_s):
        return planner.plan_all()


class _Planner:
    """One run's planning, and what it looks up once per run: this environment's toolchain, the card fingerprint,
    toolchains by target family, target revisions by target repo, reuse and official targets by target, and the draft
    records read to check the memory (so an examined source does not read its record twice)."""

    def __init__(self, reader: Hub, recipe: Recipe, options: RunOptions, report: RunReport, state: RunMemory) -> None:
        self.reader, self.recipe, self.options, self.report, self.state = reader, recipe, options, report, state
        self.toolchain = profiles.planning_toolchain()
        self.card_fp = template_fingerprint()
        self.recipe_fp = recipe.fingerprint()
        self._families: dict[str, Toolchain | None] = {}
        self._heads: dict[str, str | None] = {}
        self._reusable: dict[tuple[str, str], tuple[ReusedTarget | None, str | None]] = {}
        self._official: dict[str, tuple[OfficialRepo | None, str | None]] = {}
        self._records: dict[str, BuildRecord | None] = {}

    def plan_all(self) -> tuple[list[plan.Decision], list[plan.BuildJob]]:
        with log.group("discover"):
            listings = self._discover()
        decisions: list[plan.Decision] = []
        jobs: list[plan.BuildJob] = []
        with log.group("plan"):
            for listing in listings:
                step = functools.partial(self._plan_one, listing, decisions, jobs)
                guard(self.report, listing.repo_id, listing.sha, step)
        return decisions, jobs

    def _discover(self) -> list[RepoListing]:
        """The listings to examine; the skips and what the memory vouches for are reported here."""
        listings, skips = discover.list_sources(self.reader, self.recipe, self.toolchain)
        # What the status page watches: the listing, whatever --only narrows this run to.
        self.state.listed = sorted({listing.repo_id for listing in listings} | {skip.repo_id for skip in skips})
        if only := self.options.only:
            skips = [s for s in skips if s.repo_id == only]
            listings = [listing for listing in listings if listing.repo_id == only]
            if not listings and not skips:
                guard(self.report, only, None, lambda: listings.append(_listing_for(self.reader, only)))
        profile_fps = [profile.fingerprint() for profile in profiles.load_profiles().profiles]
        toolchain_fp = toolchain_fingerprint(self.toolchain, profile_fps)
        self.state.memory = load_memory(self.reader, self.recipe, self.card_fp, self.options, toolchain_fp=toolchain_fp)
        if self.state.memory is not None:
            listings, skips = self._report_remembered(self.state.memory, listings, skips)
        for skip in skips:
            self.report.add(Outcome(skip.repo_id, skip.revision, Status.SKIPPED, skip.reason, stage=skip.stage))
        log.step("%d candidate(s) to examine, %d ruled out by the listing", len(listings), len(skips))
        return listings

    def _report_remembered(
        self, memory: status_step.Memory, listings: list[RepoListing], skips: list[discover.SkipRecord]
    ) -> tuple[list[RepoListing], list[discover.SkipRecord]]:
        """Report what the memory vouches for; returns the listings and skips left to examine."""
        split = status_step.partition(memory, listings, skips)
        examine, remembered = list(split.examine), list(split.remembered)
        for entry, listing in split.verify:
            if self._believed(memory, entry, listing):
                remembered.append(entry)
            else:
                examine.append(listing)
        for entry in remembered:
            self.state.remembered.add(entry.source)
            self.report.add(status_step.remembered_outcome(entry))
        log.step("%d source(s) unchanged since last examined, reported from the status repo", len(remembered))
        return examine, [skip for skip in skips if skip.repo_id not in self.state.remembered]

    def _believed(self, memory: status_step.Memory, entry: StatusEntry, listing: RepoListing) -> bool:
        """Whether a remembered publish holds: the draft repo's record at its listed head (one request, kept for
        `_plan_one`) says what the entry says, and `plan.decide` finds it current (the target's head is not looked
        up: that is what the memory saves)."""
        if entry.draft_repo is None:
            return False
        try:
            record = self._draft_record(entry.draft_repo, status_step.draft_head(memory, entry))
        except BotError:
            return False  # examined: the examination reports the Hub's failure
        if not status_step.believed(entry, record) or record is None:
            return False
        return self._decide(listing, record, target_revision=None).action == plan.Action.UP_TO_DATE

    def _plan_one(self, listing: RepoListing, decisions: list[plan.Decision], jobs: list[plan.BuildJob]) -> None:
        published_repo, published = self._published_draft(listing.repo_id)
        target_revision = self._target_head(published) if published and not self.options.force else None
        decision = self._decide(listing, published, target_revision=target_revision, published_repo=published_repo)
        log.step("%s: %s %s", listing.repo_id, decision.action, "; ".join(decision.reasons))
        if decision.action == plan.Action.UP_TO_DATE:
            repos = decision.repos()
            self.report.add(
                Outcome(
                    listing.repo_id, listing.sha, Status.UP_TO_DATE, "", [repos.draft, repos.target] if repos else []
                )
            )
            if published is not None and repos is not None:
                self.state.published[listing.repo_id] = (published, repos)
        elif decision.action == plan.Action.BUILD:
            jobs.append(self._job(listing, decision))
        decisions.append(decision)

    def _decide(
        self,
        listing: RepoListing,
        published: BuildRecord | None,
        *,
        target_revision: str | None,
        published_repo: str | None = None,
    ) -> plan.Decision:
        # A published build is compared with its target family's planned toolchain, not this process's.
        family = self._family(published.target.model_type) if published is not None else None
        return plan.decide(
            listing,
            published,
            publish=self.recipe.publish,
            recipe_fingerprint=self.recipe_fp,
            toolchain=family or self.toolchain,  # no profile: resolve() reports it with its reason
            card_fingerprint=self.card_fp,
            target_revision=target_revision,
            force=self.options.force,
            published_repo=published_repo,
        )

    def _job(self, listing: RepoListing, decision: plan.Decision) -> plan.BuildJob:
        """Resolve the candidate (config, card, target, sizes) and plan its build: the official target IR to try
        first (`bot.plan.official`, forced builds too), and the published target IR to reuse when that is provably
        the build this one would export (`bot.plan.reuse`; a forced build exports all)."""
        candidate = discover.resolve(self.reader, listing, self.recipe, profiles_dir=self.options.settings.profiles_dir)
        job = plan.BuildJob.from_candidate(
            candidate,
            decision.reasons,
            self.recipe.publish,
            formats=self.recipe.export.draft_weight_formats,
            published=_published_as(decision),
        )
        official, official_not = self._official_target(job)
        official_reasons = (*job.reasons, *([f"official target not used: {official_not}"] if official_not else []))
        job = job.model_copy(update={"official_target": official, "reasons": official_reasons})
        if self.options.force:
            return job
        reuse, why_not = self._reusable_target(job)
        reasons = (*job.reasons, *([f"target exported again ({why_not})"] if why_not else []))
        return job.model_copy(update={"reuse_target": reuse, "reasons": reasons})

    def _family(self, model_type: str) -> Toolchain | None:
        """The toolchain a target family builds in (`profiles.planned_toolchain`); None when no profile covers it."""
        if model_type not in self._families:
            try:
                self._families[model_type] = profiles.planned_toolchain(
                    model_type, root=self.options.settings.profiles_dir
                )
            except Skip:
                self._families[model_type] = None
        return self._families[model_type]

    def _published_draft(self, source: str) -> tuple[str | None, BuildRecord | None]:
        """Where a source's draft is published, and its record: the repo of each weight format's name is read (one
        request each; none for a name the status memory's namespace listing does not hold), and of two, this
        source's newest build wins (the other is the repo a format switch left behind, its card pointing here)."""
        listed = {repo.lower() for repo in self.state.memory.namespace_listing} if self.state.memory else None
        found: list[tuple[str, BuildRecord]] = []
        for repo in dict.fromkeys(plan.draft_output_repos(self.recipe.publish, source).values()):
            if listed is not None and repo.lower() not in listed:
                continue
            record = self._draft_record(repo)
            if record is not None:
                found.append((repo, record))
        if not found:
            return None, None
        return max(found, key=lambda item: (item[1].source.repo == source, item[1].built_at))

    def _draft_record(self, draft_repo: str, revision: str | None = None) -> BuildRecord | None:
        """A published draft repo's record (one request per repo and run)."""
        if draft_repo not in self._records:
            self._records[draft_repo] = self.reader.draft_record(draft_repo, revision)
        return self._records[draft_repo]

    def _reusable_target(self, job: plan.BuildJob) -> tuple[ReusedTarget | None, str | None]:
        """The published target IR this job can build against instead of exporting, and why not; once per target."""
        key = (job.target_repo, job.target_revision)
        if key not in self._reusable:
            toolchain = self._family(job.candidate.target_model_type)
            memory = self.state.memory
            self._reusable[key] = (
                (None, None)
                if toolchain is None
                else plan_reuse(
                    self.reader,
                    job.target_repo,
                    job.target_revision,
                    self.recipe.export,
                    target_task(job.candidate.target_is_vlm),
                    toolchain,
                    bot_user=self.options.bot_user or self.recipe.publish.bot_user,
                    changed_outside=memory is not None and memory.changed_outside(job.target_repo),
                )
            )
        return self._reusable[key]

    def _official_target(self, job: plan.BuildJob) -> tuple[OfficialRepo | None, str | None]:
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


def _published_as(decision: plan.Decision) -> tuple[str, str] | None:
    """(repo, weight format) of the source's own published build, which its build keeps unless another format is
    faster by the recipe's margin; None when nothing of this source is published (another source's build in the
    repo is never kept, nor superseded: publish refuses to overwrite it)."""
    published, repo = decision.published, decision.draft_repo
    if published is None or repo is None or published.source.repo != decision.listing.repo_id:
        return None
    return repo, published.draft_weight_format


def load_memory(
    reader: Hub, recipe: Recipe, card_fp: str, options: RunOptions, *, toolchain_fp: str | None = None
) -> status_step.Memory | None:
    """The status repo's memory, or None when it cannot be read (then every source is examined, as before)."""
    try:
        return status_step.load_memory(
            reader, recipe, card_fp=card_fp, recheck=options.recheck or options.force, toolchain_fp=toolchain_fp
        )
    except BotError as error:
        log.step("status repo unreadable (%s): every source is examined", error.one_line())
        return None


def group_jobs(jobs: list[plan.BuildJob]) -> dict[tuple[str, str], list[plan.BuildJob]]:
    """Jobs by target and target revision: one target download and export serves the whole group."""
    groups: dict[tuple[str, str], list[plan.BuildJob]] = defaultdict(list)
    for job in jobs:
        groups[(job.target, job.target_revision)].append(job)
    return dict(groups)


def card_refreshes(decisions: Iterable[plan.Decision]) -> list[BuildRecord]:
    """The published records whose cards planning found stale: re-rendered by the publish step, no rebuild."""
    return [d.published for d in decisions if d.action == plan.Action.CARD and d.published is not None]


def report_planned(
    report: RunReport, builds: Iterable[tuple[plan.BuildJob, str]], card_refresh: Iterable[BuildRecord]
) -> None:
    """A dry run's outcomes: what each planned build (on the machine or runner class named) and card refresh
    would do, in the one wording `run --dry-run` and `plan --dry-run` share, each naming the repos it would publish
    to (`planned_repos`; a card refresh: the pair its record names)."""
    for job, where in builds:
        reason = f"{plan.Action.BUILD} on {where}: {'; '.join(job.reasons)} (target {job.target})"
        report.add(Outcome(job.source, job.revision, Status.PLANNED, reason, planned_repos(job)))
    for published in card_refresh:
        reason = f"{plan.Action.CARD}: {plan.CARD_CHANGED}"
        repos = [published.repos.draft, published.repos.target] if published.repos is not None else []
        report.add(Outcome(published.source.repo or "", published.source.revision, Status.PLANNED, reason, repos))


def planned_repos(job: plan.BuildJob) -> list[str]:
    """The repos a planned build may publish to: its draft repo as planned, the repo of each other weight format
    the build may choose instead (the measured faster one is published, `publish.format_switch_margin`), then the
    target repo (unused when the official target IR serves, `bot.plan.official`)."""
    return list(dict.fromkeys((job.draft_repo, *job.draft_repos.values(), job.target_repo)))


def _listing_for(reader: Hub, repo_id: str) -> RepoListing:
    """A listing for a repo `--only` names that the recipe's listing did not return."""
    files = reader.repo_files(repo_id)
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
