"""The one path of every run: plan → build each target group in a token-free builder → publish → status.

`dflash-bot run` walks it in one process tree (`run`); the GitHub Actions fan-out (`bot.run.fanout`) splits the same
steps over jobs and calls the same functions in the same order:
- plan: `bot.plan.step.plan_run`, through `run_side.plan_step` (the Actions plan job lays its builds out as matrix
  entries after it);
- build: `build_in_builder` starts `dflash-bot build --job` per target group, and that process runs
  `build_and_hand_off` (on Actions, each build job runs the same command);
- publish: `publish_step` on the folders the builders left (on Actions, the publish job on the artifacts);
- status: `finish_status` (on Actions, in the publish job).

The builder is the only process hop: it holds no write token (`bot.sandbox.confinement.start_builder`), downloads
with the read token, and hands each draft on as a folder (`bot.run.handoff`); the publishing process holds the write
token and never loads a checkpoint. Each candidate is independent: its work runs under `guard`, which turns any
exception into an outcome with a one-line cause, and the run goes on with the next one.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import yaml

from bot.builder.bundle import Bundle
from bot.builder.draft_build import Checkout, DraftBuild
from bot.builder.group import build_group, estimate_group
from bot.builder.official_target import check_official
from bot.core import log
from bot.core.draft_formats import report_note
from bot.core.errors import BotError, Failure, Skip, Stage, as_runners
from bot.core.outcome import Outcome, Status, status_of
from bot.core.recipe import Recipe
from bot.core.record import BuildRecord
from bot.core.settings import Settings
from bot.discover.fetch import require_free_disk
from bot.hub.client import Hub
from bot.hub.transport import REQUESTS
from bot.plan.job import BuildJob, group_jobs
from bot.plan.planner import card_refreshes
from bot.plan.sizing import local_runner
from bot.plan.step import RunOptions
from bot.publish.install import install_line
from bot.publish.publisher import publish_group
from bot.publish.refresh import refresh_cards
from bot.run.handoff import artifact_name, read_group, write_outcome
from bot.run.preflight import require_write_token
from bot.run.report import RunReport, build_cost_note
from bot.run.run_side import RunMemory, guard, guard_group, load_memory, plan_step, report_planned
from bot.sandbox.confinement import READ_TOKEN_VARIABLES, scrubbed_env, start_builder
from bot.sandbox.isolation import tracked
from bot.status import sync as status_sync

LOCAL_RUNNER = "this machine"  # where `run` builds (the Actions plan names a runner class instead)
BUNDLES = "bundles"  # the folder of a group's scratch space its builder hands the drafts on in


def run(
    recipe: Recipe, reader: Hub, writer: Hub | None, options: RunOptions, report: RunReport | None = None
) -> RunReport:
    """Run the whole job once and return its report (never raises for one candidate's problem).

    Args:
        recipe: what to watch, how to build it and where to publish.
        reader: the Hub with the read token (discovery, planning; the builders get this token only).
        writer: the Hub with the write token (publishing, the status page); None on a dry run.
        options: the run's options.
        report: the report to fill in (the CLI passes its own, so that whatever is in it when a signal or a bug
            stops the run is still written).

    Raises:
        UsageError: no write token and not a dry run (refused before any Hub call).
    """
    if not options.dry_run:
        require_write_token(writer.token if writer is not None else None, dry_run_hint=True, stage=Stage.RUN)
    report = report if report is not None else RunReport()
    report.dry_run = options.dry_run
    requests_before = REQUESTS.count
    state = RunMemory()
    if writer is not None and options.bot_user is None and recipe.publish.bot_user is None:
        options = replace(options, bot_user=_bot_user(writer))
    decisions, jobs = plan_step(reader, recipe, options, report, state)
    card_refresh = card_refreshes(decisions)
    if options.dry_run:
        report_planned(report, [(job, LOCAL_RUNNER) for job in jobs], card_refresh)
    else:
        assert writer is not None
        # The cards' install line, settled before any build: a `publish.install` the index lacks fails here.
        install = install_line(options.settings.actions_context, recipe.publish.install)
        if options.work is not None:
            options.work.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-run-", dir=options.work))
        try:
            groups = group_jobs(jobs).values()
            built = _built_groups(report, reader, writer, recipe, groups, scratch, options.keep_work, options.settings)
            publish_step(report, state, writer, recipe, card_refresh, built, install=install)
        finally:
            if not options.keep_work:
                shutil.rmtree(scratch, ignore_errors=True)
        finish_status(report, state, writer, recipe, options)
    report.hub_requests = REQUESTS.count - requests_before
    return report


def _built_groups(
    report: RunReport,
    reader: Hub,
    writer: Hub,
    recipe: Recipe,
    groups: Iterable[list[BuildJob]],
    scratch: Path,
    keep_work: bool,
    settings: Settings,
) -> Iterator[tuple[list[BuildJob], Path]]:
    """Each target group built in its own builder when the publish step asks for it (so each group is published
    before the next one is built), with the folder its builder left; a group whose builder could not run has its
    outcomes in `report` and is not handed on."""
    for members in groups:
        folder = scratch / f"group-{artifact_name(members[0].target)}"
        build = functools.partial(
            build_in_builder, reader, writer, recipe, members, folder, keep_work=keep_work, settings=settings
        )
        if guard_group(report, members, build):
            yield members, folder / BUNDLES


def build_in_builder(
    reader: Hub,
    writer: Hub,
    recipe: Recipe,
    members: list[BuildJob],
    folder: Path,
    *,
    keep_work: bool = False,
    settings: Settings | None = None,
) -> None:
    """Build one target group in a separate, token-free process tree: the Actions build job's command.

    The builder is `dflash-bot build --job` (which runs `build_and_hand_off`) started with
    `bot.sandbox.confinement.start_builder`: no write token in its environment, no inherited file descriptors, its
    own session and, where the OS allows, its own user and PID namespaces; so neither it nor the checkpoint-loading
    children it starts can reach this process, which holds the write token. It downloads with the read token
    only (never the write token, even when discovery here fell back to it).

    The builder leaves one subfolder per draft (`bot.run.handoff`) in `folder / BUNDLES`, for `publish_step`.
    `settings` say which OS confinement the builder gets, and are handed on to it (`Settings.builder_variables`).
    """
    folder.mkdir(parents=True, exist_ok=True)
    jobs_file, recipe_file, out = folder / "jobs.json", folder / "recipe.yaml", folder / BUNDLES
    jobs_file.write_text(json.dumps([job.model_dump(mode="json") for job in members]), encoding="utf-8")
    recipe_file.write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    read_token = reader.token if reader.token and reader.token != writer.token else None
    settings = settings or Settings()
    # The read token the builder gets is this one or none: an inherited HF_READ_TOKEN is dropped.
    handed_on = settings.builder_variables() | ({"HF_READ_TOKEN": read_token} if read_token else {})
    env = scrubbed_env(drop=READ_TOKEN_VARIABLES, variables=handed_on)
    command = [sys.executable, "-m", "bot.cli", "build", "--job", f"@{jobs_file}", "--out", str(out)]
    command += ["--recipe", str(recipe_file), "--endpoint", reader.endpoint, "--work", str(folder / "work")]
    if keep_work:
        command.append("--keep-work")
    with log.group(f"build {members[0].target} and {len(members)} draft(s) in a token-free builder"):
        with tracked(start_builder(command, layers=settings.sandbox_layers, env=env)) as builder:
            code = builder.wait()
        log.step("builder exited with %d", code)


def build_and_hand_off(
    reader: Hub,
    recipe: Recipe,
    jobs: list[BuildJob],
    out: Path,
    *,
    work: Path | None = None,
    keep_work: bool = False,
    settings: Settings | None = None,
) -> list[Outcome]:
    """The builder's work (`dflash-bot build --job`, in `run`'s builder or an Actions build job; no write token):
    build one target group into `out/<draft artifact>/`, one folder per draft.

    Each draft folder holds `build-outcome.json`, plus a publishable bundle when the outcome is `built` (for a
    failed validation gate, the bundle that failed, which publish refuses).

    Returns:
        Each job's outcome, in the order of `jobs`.
    """
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-job-", dir=work))
    report = RunReport()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        built: list[DraftBuild] = []
        fetch = functools.partial(
            fetch_and_build, reader, recipe, jobs, scratch, report, keep_work=keep_work, settings=settings
        )
        guard_group(report, jobs, lambda: built.extend(fetch()))
        outcomes = {o.source: o for o in report.outcomes}
        for result in built:
            job = result.job
            if result.bundle is not None:
                shutil.move(str(result.bundle.root), str(out / artifact_name(job.source)))
            if result.error is not None:  # the runner's: not remembered
                outcomes[job.source] = Outcome.of_error(job.source, job.revision, as_runners(result.error))
                continue
            assert result.bundle is not None and result.bundle.record.repos is not None  # a planned build's
            repos = result.bundle.record.repos  # as the builder wrote them (`BuildJob.repos_for`)
            outcomes[job.source] = Outcome(job.source, job.revision, Status.BUILT, "", [repos.draft, repos.target])
    finally:
        if not keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    handed = [outcomes.get(j.source) or Outcome(j.source, j.revision, Status.FAILED, "build stopped") for j in jobs]
    for job, outcome in zip(jobs, handed, strict=True):
        write_outcome(out / artifact_name(job.source), job, outcome)
    return handed


def fetch_and_build(
    reader: Hub,
    recipe: Recipe,
    members: list[BuildJob],
    scratch: Path,
    report: RunReport,
    *,
    keep_work: bool = False,
    settings: Settings | None = None,
) -> list[DraftBuild]:
    """Download one target and its drafts with the reader, then build each draft (`bot.builder.group.build_group`,
    with the CLI's `settings`). The drafts come first: an official target the plan pinned is checked against the
    layers they tap (`bot.builder.official_target`), and the source target is downloaded only when it does not serve.

    Sources that cannot be downloaded get their outcome in `report`.

    Returns:
        Every downloaded draft with its build's end (each holds its job).
    """
    first = members[0]
    group_dir = scratch / first.target.replace("/", "--")
    # One estimate per group: the disk check before download and the builder's export schedule both use it.
    reused = first.reuse_target is not None
    estimate = estimate_group([job.candidate for job in members], recipe, local_runner(scratch), target_reused=reused)
    with log.group(f"fetch {first.target} and {len(members)} draft(s)"):
        try:
            require_free_disk(scratch, estimate.peak_disk_bytes, "download and export", subject=first.target)
        except BotError as error:
            _target_failed(report, members, error)
            return []
        downloaded = _fetch_drafts(reader, members, group_dir, report)
        if not downloaded:
            return []
        official = None
        if first.official_target is not None:
            official = check_official(
                reader,
                first.official_target,
                first.candidate,
                [draft.checkout.path for draft in downloaded],
                group_dir,
                recipe=recipe,
                settings=settings or Settings(),
            )
        official_ir = official.ir if official is not None else None
        try:
            target_dir = official_ir.path if official_ir is not None else _fetch_target(reader, first, group_dir)
        except BotError as error:
            _target_failed(report, [draft.job for draft in downloaded], error)
            return []
    return build_group(
        Checkout(target_dir, first.target, first.target_revision),
        downloaded,
        recipe,
        work=scratch,
        keep_work=keep_work,
        reused=None if official_ir is not None else first.reuse_target,
        settings=settings,
        estimate=estimate,
        official=official,
    )


def _fetch_drafts(reader: Hub, members: list[BuildJob], group_dir: Path, report: RunReport) -> list[DraftBuild]:
    """Download each draft of the group, each handed to the build with its job; one that cannot be downloaded gets
    its outcome in `report`."""
    downloaded: list[DraftBuild] = []
    for index, job in enumerate(members):
        try:
            files = job.candidate.draft_files
            path = reader.download(job.source, job.revision, group_dir / f"draft-{index}", files).path
        except BotError as error:
            report.add(Outcome.of_error(job.source, job.revision, as_runners(error)))
            continue
        checkout = Checkout(path, job.source, job.revision)
        out = group_dir / "bundles" / f"draft-{index}"
        downloaded.append(DraftBuild(job, checkout, out))
    return downloaded


def _target_failed(report: RunReport, jobs: list[BuildJob], error: BotError) -> None:
    """Each job's outcome when the group's target cannot be downloaded (or the disk cannot take the group)."""
    failure = error if isinstance(error, Skip) else Failure(error.message, stage=error.stage or Stage.DOWNLOAD)
    for job in jobs:
        reason = f"target {job.target}: {failure.reason()}"
        report.add(Outcome(job.source, job.revision, status_of(error), reason))


def _fetch_target(reader: Hub, first: BuildJob, group_dir: Path) -> Path:
    """Download the group's target: the bf16 weights, or the published int4 IR the plan chose to reuse instead
    (`bot.plan.reuse`)."""
    reuse = first.reuse_target
    if reuse is not None:
        return reader.download(reuse.repo, reuse.revision, group_dir / "target-ir", reuse.files).path
    files = first.candidate.target_files
    return reader.download(first.target, first.target_revision, group_dir / "target", files).path


def publish_step(
    report: RunReport,
    state: RunMemory,
    writer: Hub,
    recipe: Recipe,
    card_refresh: Iterable[BuildRecord],
    built: Iterable[tuple[list[BuildJob], Path | None]],
    *,
    install: str | None = None,
) -> None:
    """Publish a run's work: re-render the cards planning found stale, then each target group from the folder its
    builder left (`run`: the builder's; Actions: the build job's downloaded artifact; None: no artifact at all).
    `install` is the draft cards' install line (`bot.publish.install.install_line`; None: none).

    Never loads a checkpoint: it reads JSON and uploads files. Each source's outcome goes to `report`, and each
    source published or found current to `state` (for the status page).
    """
    for published in card_refresh:
        source = published.source.repo or ""
        with log.group(f"refresh cards of {source}"):
            refresh = functools.partial(refresh_card, report, state, writer, recipe, published)
            guard(report, source, published.source.revision, refresh)
    for jobs, folder in built:
        publish_built(report, state, writer, recipe, jobs, folder, install=install)


def refresh_card(report: RunReport, state: RunMemory, writer: Hub, recipe: Recipe, published: BuildRecord) -> None:
    """Re-render one published draft's cards (and its target's) from its record: no rebuild, no weights."""
    result = refresh_cards(writer, published, private=recipe.publish.private)
    source = published.source.repo or ""
    report.add_published(source, published.source.revision, result, "card refreshed")
    state.published[source] = (published, result.repos)


def publish_built(
    report: RunReport,
    state: RunMemory,
    writer: Hub,
    recipe: Recipe,
    jobs: list[BuildJob],
    folder: Path | None,
    *,
    install: str | None = None,
) -> None:
    """Publish what one target group's builder left in `folder`: only bundles that are the builds their jobs
    planned, and none of the group when one is not (`bot.run.handoff.read_group`, as the Actions publish job
    does); every other draft gets its outcome instead."""
    ready = read_group(report, jobs, folder, formats=recipe.export.draft_weight_formats)
    if ready:
        with log.group(f"publish {ready[0][0].repos.target} and {len(ready)} draft(s)"):
            publish = functools.partial(publish_jobs, report, writer, recipe, ready, state, install)
            guard_group(report, [job for job, _ in ready], publish)


def publish_jobs(
    report: RunReport,
    writer: Hub,
    recipe: Recipe,
    ready: list[tuple[BuildJob, Bundle]],
    state: RunMemory,
    install: str | None = None,
) -> None:
    """Publish the bundles of one target group (the target repo once) and record each draft's outcome.

    Each draft goes to the repo of the weight format its build chose; a draft that moved to another format's repo
    has its old repo's card pointed to the new one in the same step (`publish_group(replaces=...)`)."""
    members = [(bundle, job.publish_repos(bundle.record)) for job, bundle in ready]
    replaces = {
        repos.draft: old
        for (job, bundle), (_, repos) in zip(ready, members, strict=True)
        if (old := job.replaced_repo(bundle.record.draft_weight_format)) is not None
    }
    # Every format repo of each source, read around its draft commit: one live repo whatever runs overlap.
    families = {repos.draft: job.outputs.family for (job, _), (_, repos) in zip(ready, members, strict=True)}
    results = publish_group(
        writer, members, private=recipe.publish.private, replaces=replaces, install=install, families=families
    )
    for (job, bundle), result in zip(ready, results, strict=True):
        if isinstance(result, BotError):
            report.add(Outcome.of_error(job.source, job.revision, result))
        else:
            notes = [report_note(bundle.record.draft.format)] if bundle.record.draft.format == "per-row" else []
            notes += [f"card: {note}" for note in job.candidate.card_notes]  # what was dropped from the source card
            cost = bundle.record.resources.get("build")
            if cost is not None:
                notes.append(build_cost_note(cost))
            if bundle.record.official_target is not None:
                notes.append(bundle.record.official_target.note())
            if (old := replaces.get(result.repos.draft)) is not None:
                notes.append(f"now {bundle.record.draft_weight_format}: replaces {old}, whose card points here")
            if result.record is not None:  # another run's build is the live one (`bot.publish.one_repo`)
                notes.append(
                    f"another run published a newer build at the same time as {result.repos.draft}, where this "
                    "one's card now points"
                    if result.commits
                    else f"another run published this build as {result.repos.draft}: not published twice"
                )
            report.add_published(job.source, job.revision, result, "; ".join((*job.reasons, *notes)))
            state.published[job.source] = (result.record or bundle.record, result.repos)


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
        for entry in status_sync.entries_for(memory, state.examined(report), state.published)
        if entry.source in listed
    ]
    status_repo = recipe.status_repo_id

    def write() -> None:
        result = status_sync.publish_status(
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


def _bot_user(writer: Hub) -> str | None:
    """The user the write token publishes as (its commits are the only ones reuse trusts); None when the Hub
    cannot say, so nothing is reused this run."""
    try:
        return writer.user()
    except BotError as error:
        log.step("the write token's user is unknown (%s): no published target is reused", error.message)
        return None


# The steps of the one path, for the Actions split (`bot.run.fanout`), the CLI and the tests.
__all__ = [
    "RunMemory",
    "RunOptions",
    "build_and_hand_off",
    "build_in_builder",
    "fetch_and_build",
    "finish_status",
    "guard",
    "guard_group",
    "load_memory",
    "plan_step",
    "publish_step",
    "run",
]
