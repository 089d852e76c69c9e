"""The work behind `dflash-bot plan`, `run`, `build --job` and `publish`, once the CLI has read and checked their
options: the Hub clients made from the settings, the token checks before any download, the stage, the step outputs
and the report. `bot/cli/` only handles arguments and prints; these are callable without it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from bot.builder.bundle import Bundle
from bot.core import log
from bot.core.errors import Failure, Stage
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe
from bot.core.record import RecordError
from bot.core.settings import Settings
from bot.hub.client import Hub
from bot.plan.job import BuildJob, OutputRepos
from bot.plan.step import RunOptions
from bot.publish.install import install_line
from bot.publish.publisher import PublishResult, publish_bundle
from bot.run.actions import Actions
from bot.run.fanout import MatrixPlan, gh_fetch, load_plan, plan_matrix, publish_run
from bot.run.pipeline import build_and_hand_off, run
from bot.run.preflight import check_read_side, check_writer, reader_token_name, require_write_token
from bot.run.report import RunReport
from bot.sandbox.confinement import hold_write_token


def reader_hub(settings: Settings, recipe: Recipe) -> Hub:
    """The Hub with the read token (the write token stands in without one), named as the variable it came from."""
    return Hub(settings.endpoint, settings.reader_token, settings=recipe.hub, token_name=reader_token_name(settings))


def writer_hub(settings: Settings, recipe: Recipe) -> Hub:
    """The Hub with the write token under the recipe's `hub:` settings (timeouts, rate floor, the upload deadline
    every commit of the job shares), or the one error every publishing path gives without it.

    Raises:
        UsageError: no write token.
    """
    return Hub(settings.endpoint, require_write_token(settings.write_token), settings=recipe.hub, token_name="HF_TOKEN")


def plan_job(settings: Settings, recipe: Recipe, options: RunOptions, *, out: Path | None = None) -> MatrixPlan:
    """The Actions plan job: check the read token, plan, write the plan record to `out`, set the step outputs
    `matrix`, `count` and `publish`, and report the planned outcomes in the step summary."""
    reader = reader_hub(settings, recipe)
    actions = Actions(settings)
    check_read_side(reader, settings, options.only)
    planned = plan_matrix(reader, recipe, options)
    count = len(planned.matrix()["include"])
    if out:
        out.write_text(planned.model_dump_json(indent=2) + "\n", encoding="utf-8")
    actions.set_output("matrix", planned.matrix())
    actions.set_output("count", str(count))
    # The publish job also reports: a source that failed in planning makes it run (and fail) too.
    report = planned.run_report()
    has_work = count or planned.card_refresh or report.failed
    actions.set_output("publish", "true" if not options.dry_run and has_work else "false")
    facts = {"only": options.only or "all", "force": options.force, "dry run": options.dry_run, "builds": count}
    actions.report(
        report,
        title="dflash-bot plan",
        endpoint=reader.endpoint,
        settings={
            "recipe": recipe.name,
            "fingerprint": recipe.fingerprint(),
            **facts,
            "card refreshes": len(planned.card_refresh),
        },
    )
    return planned


def run_once(settings: Settings, recipe: Recipe, options: RunOptions, *, report_file: Path | None = None) -> RunReport:
    """`dflash-bot run`: the token checks before any download, then the whole pipeline (`pipeline.run`) in this
    process tree; the report is written to `report_file` however the run ends, then summarised for Actions.

    Raises:
        UsageError: no write token without a dry run, or one that may not publish where the recipe says.
    """
    if not options.dry_run:
        require_write_token(settings.write_token, dry_run_hint=True)
    # From here on the token lives only in this process's memory: out of its environment (and the environment block
    # /proc shows), the process non-dumpable; builds run in a token-free process tree (pipeline.build_in_builder).
    hold_write_token()
    reader = reader_hub(settings, recipe)
    writer = (
        Hub(settings.endpoint, settings.write_token, settings=recipe.hub, token_name="HF_TOKEN")
        if not options.dry_run
        else None
    )
    # Before any download: a token that cannot publish where the recipe says stops the run here, not at the first
    # create_repo after the builds.
    bot_user = check_writer(writer, recipe).user if writer is not None else None
    check_read_side(reader, settings, options.only, identity_known=writer is not None and not settings.read_token)
    result = RunReport(dry_run=options.dry_run)
    if bot_user is not None and recipe.publish.bot_user is None:
        options = replace(options, bot_user=bot_user)
    try:
        run(recipe, reader, writer, options, result)
    except BaseException as stop:  # a signal (SIGTERM unwinds as SystemExit) or a bug: the report says so
        result.add(Outcome("(run)", None, Status.FAILED, f"run stopped: {type(stop).__name__} {stop}".strip()))
        raise
    finally:
        # The report is safe on disk before anything is printed (printing a hostile name must not lose it).
        if report_file:
            result.write(report_file)
    Actions(settings).report(
        result,
        title="dflash-bot run",
        endpoint=reader.endpoint,
        settings={
            "recipe": recipe.name,
            "fingerprint": recipe.fingerprint(),
            "only": options.only or "all",
            "force": options.force,
        },
    )
    return result


def drop_write_token(settings: Settings) -> Settings:
    """The builder's settings: a write token in its environment is removed (with a warning) before anything runs;
    a build job downloads with the read token only."""
    if settings.write_token or os.environ.pop("HF_TOKEN", None):
        os.environ.pop("HF_TOKEN", None)
        log.get().warning("HF_TOKEN is set in a build: ignored and removed (a build job should not hold it)")
    return settings.without_write_token()


def build_planned(
    settings: Settings, recipe: Recipe, jobs: list[BuildJob], out: Path, *, work: Path | None, keep_work: bool
) -> RunReport:
    """`dflash-bot build --job`: one target group downloaded with the read token and built into `out`
    (`pipeline.build_and_hand_off`), reported for Actions with the step output `status` (built or failed)."""
    reader = Hub(settings.endpoint, settings.read_token, settings=recipe.hub)
    outcomes = build_and_hand_off(reader, recipe, jobs, out, work=work, keep_work=keep_work, settings=settings)
    actions = Actions(settings)
    report = RunReport(outcomes=outcomes)
    actions.report(
        report,
        title=f"build {jobs[0].target} and {len(jobs)} draft(s)",
        endpoint=reader.endpoint,
        settings={"runner": settings.runner_name, "recipe": recipe.name},
    )
    actions.set_output("status", "failed" if report.failed else "built")
    return report


def publish_folder(writer: Hub, recipe: Recipe, folder: Path, *, report_file: Path | None = None) -> PublishResult:
    """`dflash-bot publish --bundle`: one bundle folder published under the repos the recipe names for its record's
    sources, as the plan would (`OutputRepos.named`), in the weight format and with the official target it records.

    Raises:
        Failure: the bundle was built from local folders, or its record does not read.
        UsageError: the write token may not publish where the recipe says.
    """
    try:
        one = Bundle.read(folder)
        built = one.record
        if not built.source.repo or not built.target.repo:
            raise Failure(
                "bundle was built from local folders: there is no source repo to publish under", stage=Stage.PUBLISH
            )
        outputs = OutputRepos.named(recipe.publish, built.source.repo, built.target.repo)
        repos = outputs.for_build(built.draft_weight_format, built.official_target)
        check_writer(writer, recipe)
        result = publish_bundle(writer, one, repos, private=recipe.publish.private, family=outputs.family)
    except RecordError as exc:
        raise Failure(f"{folder}: {exc}", stage=Stage.PUBLISH) from None
    if report_file:
        published = RunReport()
        published.add_published(built.source.repo, built.source.revision, result, "published from --bundle")
        published.write(report_file)
    return result


def publish_planned(
    settings: Settings,
    writer: Hub,
    recipe: Recipe,
    *,
    bundles: Path | None,
    plan: Path | None,
    artifacts_from_run: bool = False,
    report_file: Path | None = None,
) -> RunReport:
    """The Actions publish job (`dflash-bot publish --bundles/--plan`): the plan's card refreshes and every bundle
    published (`fanout.publish_run`), each group's artifact fetched from this workflow run just before it with
    `artifacts_from_run`; the report written to `report_file` and summarised for Actions."""
    planned = load_plan(plan, recipe) if plan else None
    check_writer(writer, recipe)
    if artifacts_from_run and bundles is not None:
        bundles.mkdir(parents=True, exist_ok=True)
    run_id, repository = (settings.actions_context.get(name) for name in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY"))
    fetch = gh_fetch(run_id, repository) if artifacts_from_run and run_id and repository else None
    install = install_line(settings.actions_context, recipe.publish.install)
    report = publish_run(writer, recipe, bundles.resolve() if bundles else None, planned, fetch, install=install)
    if report_file:
        report.write(report_file)
    Actions(settings).report(
        report,
        title="dflash-bot run",
        endpoint=writer.endpoint,
        settings={"recipe": recipe.name, "fingerprint": recipe.fingerprint()},
    )
    return report
