"""The pipeline's commands: `plan` (the Actions plan job), `run` (the whole job in one process tree), `publish`
(one bundle, or the Actions publish job) and `check` (the tokens against the recipe). Each reads its options and
hands on to `bot.run.commands` (or `bot.run.preflight`), which does the work."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from bot.cli.context import (
    EndpointOption,
    ForceOption,
    OnlyOption,
    RecheckOption,
    RecipeOption,
    ReportOption,
    WorkOption,
    hub_settings,
    needs_build_extra,
    only_repo,
)
from bot.core.errors import UsageError


def plan_command(
    ctx: typer.Context,
    recipe: RecipeOption = None,
    only: OnlyOption = None,
    force: ForceOption = False,
    recheck: RecheckOption = False,
    dry_run: Annotated[bool, typer.Option(help="plan, but hand nothing on to build or publish")] = False,
    matrix: Annotated[bool, typer.Option(help='print GitHub matrix JSON ({"include": [...]}) on stdout')] = False,
    out: Annotated[Optional[Path], typer.Option(help="write the plan record (for `publish --plan`) here")] = None,
    endpoint: EndpointOption = None,
) -> None:
    """Discover and plan without building: the plan job of the GitHub Actions fan-out.

    Sets the step outputs `matrix`, `count` (entries to build) and `publish` ("true" when the publish job has
    work: builds, card refreshes, or planning failures to report), and writes the planned outcomes to the step
    summary.
    """
    # Planning reads configs and records: no export toolchain (the Actions plan job installs without it).
    from bot.core.recipe import load_recipe
    from bot.plan.step import RunOptions
    from bot.run.commands import plan_job

    only = only_repo(only)
    loaded = load_recipe(recipe)
    settings = hub_settings(ctx, endpoint)
    options = RunOptions(only=only, force=force, dry_run=dry_run, recheck=recheck, settings=settings)
    # stdout carries only the matrix JSON; logs and workflow commands go to stderr (the runner reads both).
    with contextlib.redirect_stdout(sys.stderr):
        planned = plan_job(settings, loaded, options, out=out)
    report = planned.run_report()
    if matrix:
        typer.echo(json.dumps(planned.matrix()))
    else:
        report.print_table()
        count = len(planned.matrix()["include"])
        typer.echo(f"{count} build(s) planned, {len(planned.card_refresh)} card refresh(es)")
    # With --matrix a source's failure is handed on in the plan record (the publish job reports it and fails), so
    # that one bad source never stops the builds of the others.
    raise typer.Exit(0 if matrix else report.exit_code)


def run_command(
    ctx: typer.Context,
    recipe: RecipeOption = None,
    only: OnlyOption = None,
    force: ForceOption = False,
    recheck: RecheckOption = False,
    dry_run: Annotated[bool, typer.Option(help="print the plan and change nothing")] = False,
    report: ReportOption = None,
    endpoint: EndpointOption = None,
    work: WorkOption = None,
) -> None:
    """The scheduled job: discover, plan, build, publish, report.

    Exits 0 when nothing failed (a skip is not a failure) and 1 when a source failed; 2 for options or an
    environment that cannot work (no HF_TOKEN without --dry-run), refused before any Hub call.
    """
    needs_build_extra("run")
    from bot.core.recipe import load_recipe
    from bot.plan.step import RunOptions
    from bot.run.commands import run_once

    only = only_repo(only)
    loaded = load_recipe(recipe)
    settings = hub_settings(ctx, endpoint)
    options = RunOptions(only=only, force=force, dry_run=dry_run, work=work, recheck=recheck, settings=settings)
    result = run_once(settings, loaded, options, report_file=report)
    result.print_table()
    raise typer.Exit(result.exit_code)


def publish_command(
    ctx: typer.Context,
    bundle: Annotated[
        Optional[Path], typer.Option(help="bundle folder written by build", exists=True, file_okay=False)
    ] = None,
    bundles: Annotated[
        Optional[Path], typer.Option(help="folder of bundle folders (the downloaded artifacts)", file_okay=False)
    ] = None,
    plan: Annotated[
        Optional[Path],
        typer.Option(
            help="plan record from `plan --out`: report every planned source and perform its card refreshes",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    report: ReportOption = None,
    artifacts_from_run: Annotated[
        bool,
        typer.Option(
            "--artifacts-from-run",
            help="on Actions: download each planned group's artifact from this workflow run (gh, GH_TOKEN) into "
            "--bundles just before publishing it and delete it after, so the disk holds one group",
        ),
    ] = False,
    recipe: RecipeOption = None,
    endpoint: EndpointOption = None,
) -> None:
    """Publish one bundle, or a run's bundles (re-checking the Hub first, so a stale bundle never overwrites newer
    work). Never loads a checkpoint."""
    needs_build_extra("publish", ("matplotlib",))  # the charts of the cards and the status page
    from bot.core.recipe import load_recipe
    from bot.run.commands import publish_folder, publish_planned, writer_hub
    from bot.run.preflight import require_write_token

    if (bundle is not None and (bundles is not None or plan is not None)) or (
        bundle is None and bundles is None and plan is None
    ):
        raise UsageError("give --bundle alone, or --bundles and/or --plan")
    if bundles is not None and plan is None and not bundles.is_dir():
        raise UsageError(f"--bundles {bundles}: no such folder")
    if artifacts_from_run and (bundles is None or plan is None):
        raise UsageError("--artifacts-from-run needs --plan (the artifacts to fetch) and --bundles (where they go)")
    settings = hub_settings(ctx, endpoint)
    if artifacts_from_run and not all(settings.actions_context.get(n) for n in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY")):
        raise UsageError("--artifacts-from-run fetches from a GitHub Actions run: GITHUB_RUN_ID and GITHUB_REPOSITORY")
    require_write_token(settings.write_token)  # before the recipe is read
    loaded = load_recipe(recipe)
    writer = writer_hub(settings, loaded)
    if bundle is not None:
        result = publish_folder(writer, loaded, bundle.resolve(), report_file=report)
        typer.echo(f"{result.status}: {result.repos.draft}, {result.repos.target}")
        return
    published = publish_planned(
        settings, writer, loaded, bundles=bundles, plan=plan, artifacts_from_run=artifacts_from_run, report_file=report
    )
    published.print_table()
    raise typer.Exit(published.exit_code)


def check_command(
    ctx: typer.Context,
    recipe: RecipeOption = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="check only the read token (the Actions plan job holds no other)")
    ] = False,
    endpoint: EndpointOption = None,
) -> None:
    """Check the tokens against the recipe before anything is downloaded or built: HF_TOKEN must belong to
    publish.bot_user (when set) and may create and write repos in publish.namespace, the status repo and the
    collection; HF_READ_TOKEN (when set) must be one the Hub accepts. Exit 0 when they do; otherwise one line naming
    the namespace, the token's user and the fix."""
    from bot.core.recipe import load_recipe
    from bot.run.preflight import check_tokens

    loaded = load_recipe(recipe)
    settings = hub_settings(ctx, endpoint)
    for line in check_tokens(settings, loaded, read_only=read_only):
        typer.echo(line)
