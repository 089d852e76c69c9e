"""The plan step of every run: discover the watched sources, leave out what the status repo vouches for, plan the rest.

`dflash-bot run` and the Actions plan job call `plan_run` alike (through `bot.run.run_side.plan_step`); what they do
next differs only in where the builds run (`bot.run.pipeline`, `bot.run.fanout`). The decisions are the `Planner`'s
(`bot.plan.planner`). What the plan step needs from the run it is part of comes in as a `RunSide`: the run report
each outcome goes to, the guard under which each source is planned (one source's problem is its outcome and never
stops the others), and the status repo's memory, which reports an unchanged source without examining it. The status
repo and the run report sit above this layer; they are the run's to hold (`bot.run.run_side`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bot.core import log
from bot.core.errors import Stage
from bot.core.hub_records import RepoListing
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe
from bot.core.record import BuildRecord, Repos
from bot.core.settings import Settings
from bot.discover.candidates import SkipRecord
from bot.hub.client import Hub
from bot.plan.job import BuildJob
from bot.plan.planner import Action, Decision, Planner


@dataclass(frozen=True)
class RunOptions:
    only: str | None = None  # a maintainer's dispatch of one repo: this run builds it whoever its author is
    force: bool = False
    dry_run: bool = False
    work: Path | None = None
    keep_work: bool = False
    recheck: bool = False  # examine every source, whatever the status repo remembers
    bot_user: str | None = None  # the Hub user the bot publishes as (`run`: the write token's), for reuse checks
    # The CLI's (profile environments for planning, the builder's confinement); tests get the defaults.
    settings: Settings = field(default_factory=Settings)


class RunSide(Protocol):
    """What a run lends its plan step (`bot.run.run_side`)."""

    def add(self, outcome: Outcome) -> None:
        """Report one source's outcome."""

    def guard(self, source: str, revision: str | None, action: Callable[[], object]) -> bool:
        """Run one source's step; any error becomes its outcome. Returns True when the step finished."""

    def recall(
        self, planner: Planner, listings: list[RepoListing], skips: list[SkipRecord]
    ) -> tuple[list[RepoListing], list[SkipRecord]]:
        """Read the status memory (and give the planner its view of the namespace), report what it vouches for,
        and return the listings and skips left to examine."""


@dataclass
class Plan:
    """What the plan step decided: a decision for every examined source, a build job for each one to build, and
    what the status page needs (every source id the listing returned; source -> (record, repos) of each source
    found up to date)."""

    decisions: list[Decision] = field(default_factory=list)
    jobs: list[BuildJob] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)
    published: dict[str, tuple[BuildRecord, Repos]] = field(default_factory=dict)


def plan_run(reader: Hub, recipe: Recipe, options: RunOptions, side: RunSide) -> Plan:
    """Discover and plan: a decision for every examined source, and a build job for each one to build.

    The status repo's memory is read first (`side.recall`: two requests) and a source whose revision, toolchain
    and recipe are unchanged since it was last examined is reported from memory: a skip or failure without a
    request of its own, a publish after one read of its draft repo's record. All of it runs within the recipe's
    plan deadline (`hub.plan_deadline_s`): past it, each source not planned yet fails this run at its next Hub
    request, and is examined again by the next run.

    Args:
        reader: the Hub with the read token.
        recipe: what to watch and how to build it.
        options: the run's options (`only`, `force`, `bot_user` for target reuse, the profiles' folder).
        side: receives every source's outcome that planning decides (skips, failures, up to date).

    Returns:
        The plan; a source that failed or was skipped in planning has neither a decision nor a job.
    """
    planner = Planner(
        reader,
        recipe,
        force=options.force,
        bot_user=options.bot_user,
        profiles_dir=options.settings.profiles_dir,
        dispatched=options.only,
    )
    plan = Plan()
    with reader.deadline(Stage.PLAN, recipe.hub.plan_deadline_s):
        with log.group("discover"):
            listings = _discover(planner, options.only, side, plan)
        with log.group("plan"):
            for listing in listings:
                side.guard(listing.repo_id, listing.sha, functools.partial(_plan_one, planner, listing, side, plan))
    return plan


def _discover(planner: Planner, only: str | None, side: RunSide, plan: Plan) -> list[RepoListing]:
    """The listings to examine; the skips and what the memory vouches for are reported here."""
    listings, skips = planner.discover()
    # What the status page watches: the listing, whatever --only narrows this run to.
    plan.listed = sorted({listing.repo_id for listing in listings} | {skip.repo_id for skip in skips})
    if only:
        skips = [s for s in skips if s.repo_id == only]
        listings = [listing for listing in listings if listing.repo_id == only]
        if not listings and not skips:
            side.guard(only, None, lambda: listings.append(planner.listing_for(only)))
    listings, skips = side.recall(planner, listings, skips)
    for skip in skips:
        side.add(Outcome(skip.repo_id, skip.revision, Status.SKIPPED, skip.reason, stage=skip.stage))
    log.step("%d candidate(s) to examine, %d ruled out by the listing", len(listings), len(skips))
    return listings


def _plan_one(planner: Planner, listing: RepoListing, side: RunSide, plan: Plan) -> None:
    decision, job = planner.plan(listing)
    if decision.action == Action.UP_TO_DATE:
        repos = decision.repos()
        where = [repos.draft, repos.target] if repos else []
        side.add(Outcome(listing.repo_id, listing.sha, Status.UP_TO_DATE, "; ".join(decision.reasons), where))
        if decision.published is not None and repos is not None:
            plan.published[listing.repo_id] = (decision.published, repos)
    elif job is not None:
        plan.jobs.append(job)
    plan.decisions.append(decision)
