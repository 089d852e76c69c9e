"""The run's side of its steps, what they share: `guard`, which turns one source's error into its outcome, the run's
memory for the status repo (`RunMemory`), and what the run lends the plan step (`plan_step`).

The plan step itself is the plan stage's (`bot.plan.step.plan_run`); the run lends it the run report, `guard` and
the status repo's memory (`status.sync.load_memory`: read once, before any source is examined), which sit above the
plan layer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bot.core import log
from bot.core.errors import BotError, InfrastructureFailure, Stage, as_runners, runner_fault_of
from bot.core.fingerprints import Fingerprints, current_toolchain_fingerprint
from bot.core.hub_records import RepoListing
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe
from bot.core.record import BuildRecord, Repos
from bot.discover.candidates import SkipRecord
from bot.discover.trust import excluded_by
from bot.hub.client import Hub
from bot.plan.job import BuildJob
from bot.plan.planner import Decision, Planner, planned_outcomes
from bot.plan.step import RunOptions, plan_run
from bot.run.report import RunReport
from bot.status import sync as status_sync
from bot.status.memory import StatusEntry


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

    memory: status_sync.StatusMemory | None = None
    listed: list[str] = field(default_factory=list)
    remembered: set[str] = field(default_factory=set)
    published: dict[str, tuple[BuildRecord, Repos]] = field(default_factory=dict)

    def examined(self, report: RunReport) -> list[Outcome]:
        return [o for o in report.outcomes if o.source not in self.remembered]


def guard(report: RunReport, source: str, revision: str | None, action: Callable[[], object]) -> bool:
    """Run one candidate's step; any error becomes that candidate's outcome and the run goes on.

    A `BotError` is an expected skip or failure (the runner's when its message shows it: `as_runners`); an exception
    the machine raised (a full disk, no memory: `runner_fault_of`) is the runner's failure, one line, never the
    source's; anything else is a bug or a hostile input nobody foresaw, reported as a failure with its one-line cause
    while its traceback goes to the log at error level (on Actions an annotation and the lines after it). Returns True
    when the step finished.
    """
    try:
        action()
        return True
    except BotError as error:
        report.add(Outcome.of_error(source, revision, as_runners(error)))
    except Exception as exc:
        fault = runner_fault_of(exc)
        if fault is not None:
            said = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            report.add(Outcome.of_error(source, revision, InfrastructureFailure(said, runner=fault)))
            return False
        cause = f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        log.get().error("%s: %s", source, cause, exc_info=exc)  # a bug: its traceback at error level, not one line
        report.add(Outcome(source, revision, Status.FAILED, cause))
    return False


def guard_group(report: RunReport, jobs: list[BuildJob], action: Callable[[], object]) -> bool:
    """`guard` for a step that serves several sources (a target group): when it stops, each source gets the cause."""
    if guard(report, jobs[0].source, jobs[0].revision, action):
        return True
    cause = report.outcomes[-1]
    for job in jobs[1:]:
        report.add(Outcome(job.source, job.revision, cause.status, cause.reason))
    return False


def plan_step(
    reader: Hub, recipe: Recipe, options: RunOptions, report: RunReport, state: RunMemory | None = None
) -> tuple[list[Decision], list[BuildJob]]:
    """The plan step of a run (`bot.plan.step.plan_run`), its outcomes in `report`.

    Args:
        reader: the Hub with the read token.
        recipe: what to watch and how to build it.
        options: the run's options (`only`, `force`, `recheck`, `bot_user` for target reuse).
        report: receives every source's outcome that planning decides (skips, failures, up to date).
        state: receives what the status page needs (the memory, the listing, the sources found up to date).

    Returns:
        (decisions, build jobs); a source that failed or was skipped in planning has neither.
    """
    state = state if state is not None else RunMemory()
    plan = plan_run(reader, recipe, options, _RunSide(report, state, options))
    state.listed = plan.listed
    state.published.update(plan.published)
    return plan.decisions, plan.jobs


@dataclass
class _RunSide:
    """The run report, `guard` and the status memory, lent to the plan step (`bot.plan.step.RunSide`)."""

    report: RunReport
    state: RunMemory
    options: RunOptions

    def add(self, outcome: Outcome) -> None:
        self.report.add(outcome)

    def guard(self, source: str, revision: str | None, action: Callable[[], object]) -> bool:
        return guard(self.report, source, revision, action)

    def recall(
        self, planner: Planner, listings: list[RepoListing], skips: list[SkipRecord]
    ) -> tuple[list[RepoListing], list[SkipRecord]]:
        """Read the status memory and report what it vouches for; returns the listings and skips left to examine."""
        toolchain = current_toolchain_fingerprint(planner.toolchain)
        fingerprints = Fingerprints.of(planner.recipe, toolchain=toolchain, card=planner.card_fp)
        memory = load_memory(planner.reader, planner.recipe, fingerprints, self.options)
        self.state.memory = planner.memory = memory
        if memory is None:
            return listings, skips
        listings, skips = self._keep_published(planner, memory, listings, skips)
        split = status_sync.partition(memory, listings, skips)
        examine, remembered = list(split.examine), list(split.remembered)
        for entry, listing in split.verify:
            if _believed(planner, memory, entry, listing):
                remembered.append(entry)
            else:
                examine.append(listing)
        for entry in remembered:
            self.state.remembered.add(entry.source)
            self.report.add(status_sync.remembered_outcome(entry))
        log.step("%d source(s) unchanged since last examined, reported from the status repo", len(remembered))
        return examine, [skip for skip in skips if skip.repo_id not in self.state.remembered]

    def _keep_published(
        self, planner: Planner, memory: status_sync.StatusMemory, listings: list[RepoListing], skips: list[SkipRecord]
    ) -> tuple[list[RepoListing], list[SkipRecord]]:
        """Published pairs stay watched whoever approved them (docs/design.md §14): a not-approved source the memory
        holds a published pair of is examined like a listed one (the planner keeps the pair as it is until a new
        dispatch), and a published source no listing returned (a dispatched repo no search finds) is looked up, one
        request each, unless the recipe now excludes it or this run is another repo's dispatch."""
        kept = status_sync.published_sources(memory)
        listings = list(listings)
        left = []
        for skip in skips:
            if skip.stage == Stage.APPROVE and skip.listing is not None and skip.repo_id.lower() in kept:
                listings.append(skip.listing)
            else:
                left.append(skip)
        seen = {listing.repo_id.lower() for listing in listings} | {skip.repo_id.lower() for skip in left}
        only = self.options.only
        for key, source in kept.items():
            if key in seen or (only and only.lower() != key) or excluded_by(source, planner.recipe.watch.exclude):
                continue
            self.guard(source, None, functools.partial(_append_listing, planner, source, listings))
        return listings, left


def _append_listing(planner: Planner, source: str, listings: list[RepoListing]) -> None:
    listings.append(planner.listing_for(source))


def _believed(planner: Planner, memory: status_sync.StatusMemory, entry: StatusEntry, listing: RepoListing) -> bool:
    """Whether a remembered publish holds: the draft repo's record at its listed head (one request, kept for
    the source's planning) says what the entry says, and the planner finds it current (the target's head is not
    looked up: that is what the memory saves)."""
    if entry.draft_repo is None:
        return False
    try:
        record = planner.draft_record(entry.draft_repo, status_sync.draft_head(memory, entry))
    except BotError:
        return False  # examined: the examination reports the Hub's failure
    if not status_sync.believed(entry, record) or record is None:
        return False
    return planner.current(listing, record)


def load_memory(
    reader: Hub, recipe: Recipe, fingerprints: Fingerprints, options: RunOptions
) -> status_sync.StatusMemory | None:
    """The status repo's memory, or None when it cannot be read (then every source is examined, as before)."""
    try:
        return status_sync.load_memory(
            reader, recipe, fingerprints=fingerprints, recheck=options.recheck or options.force
        )
    except BotError as error:
        log.step("status repo unreadable (%s): every source is examined", error.one_line())
        return None


def report_planned(
    report: RunReport, builds: Iterable[tuple[BuildJob, str]], card_refresh: Iterable[BuildRecord]
) -> None:
    """A dry run's outcomes (`bot.plan.planner.planned_outcomes`) added to the run report."""
    for outcome in planned_outcomes(builds, card_refresh):
        report.add(outcome)
