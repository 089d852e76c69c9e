"""The scheduled job: discover → plan → build → publish → report, in one process (`dflash-bot run`).

Each candidate is independent: its work runs under `guard`, which turns any exception into an outcome with a
one-line cause (the traceback goes to the log), and the run goes on with the next one. The build stage runs its
exports and GenAI checks in child processes without any token (`bot.sandbox.isolation`); this process downloads with the
read token and publishes with the write token, and never loads a checkpoint itself.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import tempfile
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from bot.build.bundle import Bundle
from bot.build.export import target_task
from bot.build.group import Checkout, DraftBuild, DraftOutcome, build_group
from bot.core import log, profiles
from bot.core.draft_formats import report_note
from bot.core.errors import BotError, Failure, Skip, UsageError
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe
from bot.core.record import BuildRecord, Repos
from bot.core.toolchain import Toolchain, detect
from bot.discover import candidates as discover
from bot.discover.fetch import require_free_disk
from bot.hub import REQUESTS, Hub, RepoListing
from bot.plan import planner as plan
from bot.plan.reuse import ReusedTarget, plan_reuse
from bot.plan.sizing import estimate_build, gb, local_runner
from bot.publish.card import template_fingerprint
from bot.publish.publisher import PublishResult, publish_group, refresh_cards
from bot.run.report import RunReport
from bot.sandbox.isolation import tracked
from bot.status import step as status_step
from bot.status.memory import StatusEntry


@dataclass(frozen=True)
class RunOptions:
    only: str | None = None
    force: bool = False
    dry_run: bool = False
    work: Path | None = None
    keep_work: bool = False
    recheck: bool = False  # examine every source, whatever the status repo remembers
    bot_user: str | None = None  # the Hub user the bot publishes as (`run`: the write token's), for reuse checks


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
    as a failure with its one-line cause while the traceback goes to the log. Returns True when the step finished.
    """
    try:
        action()
        return True
    except BotError as error:
        report.add(Outcome.of_error(source, revision, error))
    except Exception as exc:
        log.get().debug("unexpected error for %s:\n%s", source, traceback.format_exc())
        log.step(
            "%s: unexpected %s: %s (traceback in the --verbose log)",
            source,
            type(exc).__name__,
            " ".join(str(exc).split())[:300],
        )
        report.add(
            Outcome(
                source, revision, Status.FAILED, f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            )
        )
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
    """Discover and plan (`_plan_run`) within the recipe's plan deadline (`hub.plan_deadline_s`): past it, each
    source not planned yet fails this run at its next Hub request, and is examined again by the next run."""
    with reader.deadline("plan", recipe.hub.plan_deadline_s):
        return _plan_run(reader, recipe, options, report, state)


def _plan_run(
    reader: Hub, recipe: Recipe, options: RunOptions, report: RunReport, state: RunMemory | None = None
) -> tuple[list[plan.Decision], list[plan.BuildJob]]:
    """Discover and plan: decisions for every examined source, and build jobs for those to build.

    With `state`, the status repo's memory is read first (two requests) and a source whose revision, toolchain
    and recipe are unchanged since it was last examined is reported from memory: a skip or failure without a
    request of its own, a publish after one read of its draft repo's record (`_believed`).
    """
    card_fp = template_fingerprint()
    state = state if state is not None else RunMemory()
    context = _PlanContext(reader)
    with log.group("discover"):
        listings, skips = discover.list_sources(reader, recipe, detect())
        # What the status page watches: the listing, whatever --only narrows this run to.
        state.listed = sorted({listing.repo_id for listing in listings} | {skip.repo_id for skip in skips})
        if options.only:
            skips = [s for s in skips if s.repo_id == options.only]
            listings = [listing for listing in listings if listing.repo_id == options.only]
            if not listings and not skips:
                only = options.only
                guard(report, only, None, lambda: listings.append(_listing_for(reader, only)))
        state.memory = load_memory(reader, recipe, card_fp, options)
        if state.memory is not None:
            listings, skips = _report_remembered(state, recipe, card_fp, context, report, listings, skips)
        for skip in skips:
            report.add(Outcome(skip.repo_id, skip.revision, Status.SKIPPED, skip.reason, stage=skip.stage))
        log.step("%d candidate(s) to examine, %d ruled out by the listing", len(listings), len(skips))

    decisions: list[plan.Decision] = []
    jobs: list[plan.BuildJob] = []
    with log.group("plan"):
        for listing in listings:
            guard(
                report,
                listing.repo_id,
                listing.sha,
                functools.partial(
                    _plan_one, reader, recipe, options, listing, card_fp, context, report, state, decisions, jobs
                ),
            )
    return decisions, jobs


def _report_remembered(
    state: RunMemory,
    recipe: Recipe,
    card_fp: str,
    context: _PlanContext,
    report: RunReport,
    listings: list[RepoListing],
    skips: list[discover.SkipRecord],
) -> tuple[list[RepoListing], list[discover.SkipRecord]]:
    """Report what the memory vouches for; returns the listings and skips left to examine."""
    assert state.memory is not None
    split = status_step.partition(state.memory, listings, skips)
    examine, remembered = list(split.examine), list(split.remembered)
    for entry, listing in split.verify:
        if _believed(state.memory, recipe, card_fp, context, entry, listing):
            remembered.append(entry)
        else:
            examine.append(listing)
    for entry in remembered:
        state.remembered.add(entry.source)
        report.add(status_step.remembered_outcome(entry))
    log.step("%d source(s) unchanged since last examined, reported from the status repo", len(remembered))
    return examine, [skip for skip in skips if skip.repo_id not in state.remembered]


def _believed(
    memory: status_step.Memory,
    recipe: Recipe,
    card_fp: str,
    context: _PlanContext,
    entry: StatusEntry,
    listing: RepoListing,
) -> bool:
    """Whether a remembered publish holds: the draft repo's record at its listed head (one request, kept for
    `_plan_one`) says what the entry says, and `plan.decide` finds it current (the target's head is not looked up:
    that is what the memory saves)."""
    if entry.draft_repo is None:
        return False
    try:
        record = context.draft_record(entry.draft_repo, status_step.draft_head(memory, entry))
    except BotError:
        return False  # examined: the examination reports the Hub's failure
    if not status_step.believed(entry, record) or record is None:
        return False
    decision = plan.decide(
        listing,
        record,
        publish=recipe.publish,
        recipe_fingerprint=recipe.fingerprint(),
        toolchain=context.toolchain(record),
        card_fingerprint=card_fp,
    )
    return decision.action == plan.Action.UP_TO_DATE


class _PlanContext:
    """What planning looks up once per run: toolchains by target family, target revisions by target repo, and
    the draft records read to check the memory (so an examined source does not read its record twice)."""

    def __init__(self, reader: Hub) -> None:
        self.reader = reader
        self._toolchains: dict[str, Toolchain] = {}
        self._heads: dict[str, str | None] = {}
        self._reusable: dict[tuple[str, str], tuple[ReusedTarget | None, str | None]] = {}
        self._records: dict[str, BuildRecord | None] = {}

    def draft_record(self, draft_repo: str, revision: str | None = None) -> BuildRecord | None:
        """A published draft repo's record (one request per repo and run)."""
        if draft_repo not in self._records:
            self._records[draft_repo] = self.reader.draft_record(draft_repo, revision)
        return self._records[draft_repo]

    def toolchain(self, published: BuildRecord) -> Toolchain:
        """The toolchain a published build is compared with: its target family's profile, not this process's."""
        model_type = published.target.model_type
        if model_type not in self._toolchains:
            try:
                self._toolchains[model_type] = profiles.planned_toolchain(model_type)
            except Skip:
                self._toolchains[model_type] = detect()  # resolve() reports the missing profile with its reason
        return self._toolchains[model_type]

    def reusable_target(
        self, job: plan.BuildJob, recipe: Recipe, bot_user: str | None, memory: status_step.Memory | None
    ) -> tuple[ReusedTarget | None, str | None]:
        """The published target IR this job can build against instead of exporting (`bot.plan.reuse`), once each."""
        key = (job.target_repo, job.target_revision)
        if key not in self._reusable:
            try:
                toolchain = profiles.planned_toolchain(job.target_model_type)
            except Skip:
                self._reusable[key] = None, None
            else:
                task = target_task(job.target_is_vlm)
                self._reusable[key] = plan_reuse(
                    self.reader,
                    job.target_repo,
                    job.target_revision,
                    recipe.export,
                    task,
                    toolchain,
                    bot_user=bot_user,
                    changed_outside=memory is not None and memory.changed_outside(job.target_repo),
                )
        return self._reusable[key]

    def target_head(self, published: BuildRecord) -> str | None:
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


def _plan_one(
    reader: Hub,
    recipe: Recipe,
    options: RunOptions,
    listing: RepoListing,
    card_fp: str,
    context: _PlanContext,
    report: RunReport,
    state: RunMemory,
    decisions: list[plan.Decision],
    jobs: list[plan.BuildJob],
) -> None:
    draft_repo = plan.draft_output_repo(recipe.publish, listing.repo_id)
    published = context.draft_record(draft_repo)
    decision = plan.decide(
        listing,
        published,
        publish=recipe.publish,
        recipe_fingerprint=recipe.fingerprint(),
        toolchain=context.toolchain(published) if published else detect(),
        card_fingerprint=card_fp,
        target_revision=context.target_head(published) if published and not options.force else None,
        force=options.force,
    )
    log.step("%s: %s %s", listing.repo_id, decision.action, "; ".join(decision.reasons))
    if decision.action == plan.Action.UP_TO_DATE:
        repos = decision.repos()
        report.add(
            Outcome(listing.repo_id, listing.sha, Status.UP_TO_DATE, "", [repos.draft, repos.target] if repos else [])
        )
        if published is not None and repos is not None:
            state.published[listing.repo_id] = (published, repos)
    elif decision.action == plan.Action.BUILD:
        candidate = discover.resolve(reader, listing, recipe)
        job = plan.BuildJob.from_candidate(candidate, decision.reasons, recipe.publish)
        if not options.force:  # a forced build exports everything again
            bot_user = options.bot_user or recipe.publish.bot_user
            reuse, why_not = context.reusable_target(job, recipe, bot_user, state.memory)
            reasons = (*job.reasons, *([f"target exported again ({why_not})"] if why_not else []))
            job = job.model_copy(update={"reuse_target": reuse, "reasons": reasons})
        jobs.append(job)
    decisions.append(decision)


def run(
    recipe: Recipe, reader: Hub, writer: Hub | None, options: RunOptions, report: RunReport | None = None
) -> RunReport:
    """Run the whole job once and return its report (never raises for one candidate's problem).

    Args:
        report: the report to fill in (the CLI passes its own, so that whatever is in it when a signal or a bug
            stops the run is still written).

    Raises:
        UsageError: no write token and not a dry run (refused before any Hub call).
    """
    if not options.dry_run and (writer is None or not writer.token):
        raise UsageError("no write token (HF_TOKEN): nothing could be published; set it, or use --dry-run", stage="run")
    report = report if report is not None else RunReport()
    report.dry_run = options.dry_run
    requests_before = REQUESTS.count
    state = RunMemory()
    if writer is not None and options.bot_user is None and recipe.publish.bot_user is None:
        options = replace(options, bot_user=_bot_user(writer))
    decisions, jobs = plan_run(reader, recipe, options, report, state)

    if options.dry_run:
        targets = {job.source: job.target for job in jobs}
        for decision in decisions:
            if decision.action != plan.Action.UP_TO_DATE and (
                decision.action == plan.Action.CARD or decision.listing.repo_id in targets
            ):
                target = targets.get(decision.listing.repo_id)
                detail = f" (target {target})" if target else ""
                report.add(
                    Outcome(
                        decision.listing.repo_id,
                        decision.listing.sha,
                        Status.PLANNED,
                        f"{decision.action}: {'; '.join(decision.reasons)}{detail}",
                    )
                )
        report.hub_requests = REQUESTS.count - requests_before
        return report
    assert writer is not None

    for decision in decisions:
        published = decision.published
        if decision.action == plan.Action.CARD and published is not None:
            guard(
                report,
                decision.listing.repo_id,
                decision.listing.sha,
                functools.partial(_refresh, report, state, writer, recipe, decision.listing, published),
            )

    if options.work is not None:
        options.work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-run-", dir=options.work))
    try:
        for members in group_jobs(jobs).values():
            _build_and_publish(report, state, reader, writer, recipe, members, scratch, options)
    finally:
        if not options.keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    finish_status(report, state, writer, recipe, options)
    report.hub_requests = REQUESTS.count - requests_before
    return report


def _refresh(
    report: RunReport, state: RunMemory, writer: Hub, recipe: Recipe, listing: RepoListing, published: BuildRecord
) -> None:
    result = refresh_cards(writer, published, private=recipe.publish.private)
    report.add_published(listing.repo_id, listing.sha, result, "card refreshed")
    state.published[listing.repo_id] = (published, result.repos)


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


def finish_status(report: RunReport, state: RunMemory, writer: Hub, recipe: Recipe, options: RunOptions) -> None:
    """Write the status page (one commit, only when it changed) and sync the collection; a problem here is a
    failed outcome of the status repo, never of a model (those are published already)."""
    memory = state.memory
    if memory is None or options.dry_run:
        return
    if memory.unreadable:
        log.step("status page %s not written: it could not be read at planning", recipe.status_repo_id)
        return
    # Only sources the listing returned are on the page: a repo reached through --only alone is not watched.
    listed = set(state.listed)
    updates = [
        entry
        for entry in status_step.entries_for(memory, state.examined(report), state.published)
        if entry.source in listed
    ]
    status_repo = recipe.status_repo_id

    def write() -> None:
        result = status_step.publish_status(
            writer,
            recipe,
            memory,
            updates,
            watched=None if options.only else state.listed,
            committed=bool(report.commits),
        )
        report.status_page, report.collection = result.page_url, result.collection_url
        if result.commit:
            report.status_commit = result.commit
            log.step("status page %s: commit %s", status_repo, result.commit[:7])

    with log.group(f"status page {status_repo}"):
        guard(report, status_repo, None, write)


def group_jobs(jobs: list[plan.BuildJob]) -> dict[tuple[str, str], list[plan.BuildJob]]:
    """Jobs by target and target revision: one target download and export serves the whole group."""
    groups: dict[tuple[str, str], list[plan.BuildJob]] = defaultdict(list)
    for job in jobs:
        groups[(job.target, job.target_revision)].append(job)
    return dict(groups)


def _build_and_publish(
    report: RunReport,
    state: RunMemory,
    reader: Hub,
    writer: Hub,
    recipe: Recipe,
    members: list[plan.BuildJob],
    scratch: Path,
    options: RunOptions,
) -> None:
    ready: list[tuple[plan.BuildJob, Bundle]] = []
    if not guard_group(
        report,
        members,
        lambda: ready.extend(
            build_in_builder(reader, writer, recipe, members, scratch, report, keep_work=options.keep_work)
        ),
    ):
        return
    if ready:
        with log.group(f"publish {ready[0][0].target_repo} and {len(ready)} draft(s)"):
            guard_group(report, [job for job, _ in ready], lambda: publish_jobs(report, writer, recipe, ready, state))


def build_in_builder(
    reader: Hub,
    writer: Hub,
    recipe: Recipe,
    members: list[plan.BuildJob],
    scratch: Path,
    report: RunReport,
    *,
    keep_work: bool = False,
) -> list[tuple[plan.BuildJob, Bundle]]:
    """Build one target group in a separate, token-free process tree, and read back what it built.

    The builder is `dflash-bot build --job` (the Actions build job's command) started with
    `bot.sandbox.confinement.start_builder`: no write token in its environment, no inherited file descriptors, its own
    session and, where the OS allows, its own user and PID namespaces; so neither it nor the checkpoint-loading
    children it starts can reach this process, which holds the write token. It downloads with the read token
    only (never the write token, even when discovery here fell back to it).

    Returns:
        (job, bundle) for every draft built and checked (`bot.run.handoff.read_built`); every other draft's outcome is
        added to `report`.
    """
    from bot.run.handoff import artifact_name, read_built
    from bot.sandbox.confinement import start_builder

    group = scratch / f"group-{artifact_name(members[0].target)}"
    group.mkdir(parents=True, exist_ok=True)
    jobs_file, recipe_file, out = group / "jobs.json", group / "recipe.yaml", group / "bundles"
    jobs_file.write_text(json.dumps([job.model_dump(mode="json") for job in members]), encoding="utf-8")
    recipe_file.write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    read_token = reader.token if reader.token and reader.token != writer.token else None
    env = {k: v for k, v in os.environ.items() if k != "HF_READ_TOKEN"}
    if read_token:
        env["HF_READ_TOKEN"] = read_token
    command = [
        sys.executable,
        "-m",
        "bot.cli",
        "build",
        "--job",
        f"@{jobs_file}",
        "--out",
        str(out),
        "--recipe",
        str(recipe_file),
        "--endpoint",
        reader.endpoint,
        "--work",
        str(group / "work"),
    ]
    if keep_work:
        command.append("--keep-work")
    with log.group(f"build {members[0].target} and {len(members)} draft(s) in a token-free builder"):
        with tracked(start_builder(command, env=env)) as builder:
            code = builder.wait()
        log.step("builder exited with %d", code)
    ready = []
    for job in members:
        bundle = read_built(report, job, out / artifact_name(job.source))
        if bundle is not None:
            ready.append((job, bundle))
    return ready


def publish_jobs(
    report: RunReport, writer: Hub, recipe: Recipe, ready: list[tuple[plan.BuildJob, Bundle]], state: RunMemory
) -> None:
    """Publish the bundles of one target group (the target repo once) and record each draft's outcome."""
    results = publish_group(writer, [(bundle, job.repos) for job, bundle in ready], private=recipe.publish.private)
    for (job, bundle), result in zip(ready, results, strict=True):
        if isinstance(result, BotError):
            report.add(Outcome.of_error(job.source, job.revision, result))
        else:
            notes = [report_note(bundle.record.draft.format)] if bundle.record.draft.format == "per-row" else []
            notes += [f"card: {note}" for note in job.card_notes]  # what was dropped from the source card
            cost = bundle.record.resources.get("build")
            if cost is not None:
                notes.append(
                    f"built in {cost.seconds:.0f} s, peak {gb(cost.peak_rss_bytes or 0)} memory and "
                    f"{gb(cost.peak_disk_bytes or 0)} disk"
                )
            report.add_published(job.source, job.revision, result, "; ".join((*job.reasons, *notes)))
            state.published[job.source] = (bundle.record, job.repos)


def fetch_and_build(
    reader: Hub,
    recipe: Recipe,
    members: list[plan.BuildJob],
    scratch: Path,
    report: RunReport,
    *,
    keep_work: bool = False,
) -> list[tuple[plan.BuildJob, DraftOutcome]]:
    """Download one target and its drafts with the reader, then build each draft into `scratch/.../bundles`.

    Used by `run` (then publishes) and by `dflash-bot build --job` (a matrix entry: the bundle goes to publish).
    Sources that cannot be downloaded get their outcome in `report`.

    Returns:
        (job, build outcome) for every downloaded draft.
    """
    first = members[0]
    group_dir = scratch / _safe_name(first.target)
    with log.group(f"fetch {first.target} and {len(members)} draft(s)"):
        try:
            reuse = first.reuse_target
            estimate = estimate_build(
                sum(j.draft_bytes for j in members),
                first.target_bytes,
                local_runner(scratch),
                recipe.runners.sizing,
                target_reused=reuse is not None,
            )
            require_free_disk(scratch, estimate.peak_disk_bytes, "download and export", subject=first.target)
            if reuse is not None:  # the published int4 IR instead of the bf16 weights (bot.plan.reuse)
                target_dir = reader.download(reuse.repo, reuse.revision, group_dir / "target-ir", reuse.files).path
            else:
                target_dir = reader.download(
                    first.target, first.target_revision, group_dir / "target", first.target_files
                ).path
        except BotError as error:
            failure = error if isinstance(error, Skip) else Failure(error.message, stage=error.stage or "download")
            for job in members:
                report.add(
                    Outcome(
                        job.source,
                        job.revision,
                        Status.SKIPPED if isinstance(error, Skip) else Status.FAILED,
                        f"target {first.target}: {failure.reason()}",
                    )
                )
            return []
        drafts: list[DraftBuild] = []
        downloaded: list[plan.BuildJob] = []
        for index, job in enumerate(members):
            try:
                path = reader.download(job.source, job.revision, group_dir / f"draft-{index}", job.draft_files).path
            except BotError as error:
                report.add(Outcome.of_error(job.source, job.revision, error))
                continue
            drafts.append(
                DraftBuild(
                    job.candidate(), Checkout(path, job.source, job.revision), group_dir / "bundles" / f"draft-{index}"
                )
            )
            downloaded.append(job)
    if not drafts:
        return []
    target = Checkout(target_dir, first.target, first.target_revision)
    outcomes = build_group(target, drafts, recipe, work=scratch, keep_work=keep_work, reused=first.reuse_target)
    return list(zip(downloaded, outcomes, strict=True))


def _bot_user(writer: Hub) -> str | None:
    """The user the write token publishes as (its commits are the only ones reuse trusts); None when the Hub
    cannot say, so nothing is reused this run."""
    try:
        return writer.user()
    except BotError as error:
        log.step("the write token's user is unknown (%s): no published target is reused", error.message)
        return None


def _listing_for(reader: Hub, repo_id: str) -> RepoListing:
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


def _safe_name(repo_id: str) -> str:
    return repo_id.replace("/", "--")


__all__ = ["PublishResult", "RunOptions", "fetch_and_build", "group_jobs", "guard", "plan_run", "run"]
