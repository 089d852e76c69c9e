"""`dflash-bot`: a thin typed CLI over the pipeline stages.

Expected failures (a Skip or Failure, a usage error) end with one line naming the checkpoint, the stage and the
cause, and the error's exit code; only a bug prints a traceback. Commands raise; `main` prints, exits, and writes
the `--report` on every exit path, usage errors included.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional
from urllib.parse import urlsplit

import click
import typer

from bot.core import log
from bot.core.errors import UNEXPECTED_EXIT_CODE, BotError, Failure, Stage, UsageError

if TYPE_CHECKING:
    from bot.core.recipe import Recipe
    from bot.hub import Hub
    from bot.run.report import RunReport

# The commands import the stages (and the local Hub server) inside their functions: `main` switches telemetry off
# before anything imports huggingface_hub, whose import otherwise fetches a registry from huggingface.co
# (tests/test_layout.py checks that nothing imported above brings it in).

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Watch the Hub for DFlash/DSpark drafts, export them to OpenVINO int4, validate, publish.",
)
hub_app = typer.Typer(no_args_is_help=True, help="The local Hub-compatible server (tests, demo, offline work).")
app.add_typer(hub_app, name="hub")
toolchain_app = typer.Typer(
    no_args_is_help=True, help="Follow upstream: newer toolchain releases, tried on tiny pairs."
)
app.add_typer(toolchain_app, name="toolchain")

RecipeOption = Annotated[
    Optional[Path],
    typer.Option("--recipe", help="recipe YAML (default: workflows/dflash.yaml)", exists=True, dir_okay=False),
]


def _fail(error: BotError) -> NoReturn:
    """Hand an expected error on to `main`, which writes the --report, prints one line and exits with its code."""
    raise error


# The export toolchain is the `build` extra (pyproject.toml): a plain `pip install dflash-ov-bot` runs `try`, `status`,
# `inspect` and `hub serve`; every command that exports, builds or publishes asks for the extra by name first.
BUILD_EXTRA = (
    "torch", "optimum-intel", "optimum", "nncf", "transformers", "tokenizers", "safetensors", "einops", "diffusers",
    "matplotlib",
)  # fmt: skip


def _needs_build_extra(command: str, distributions: Sequence[str] = BUILD_EXTRA) -> None:
    """Refuse `command` at its start when the packages its stages import are not installed (not deep in a trace)."""
    missing = []
    for name in distributions:
        try:
            version(name)
        except PackageNotFoundError:
            missing.append(name)
    if missing:
        raise UsageError(
            f"`dflash-bot {command}` needs the build extra: pip install 'dflash-ov-bot[build]' "
            f"(not installed: {', '.join(missing)})"
        )


@app.callback()
def _setup(ctx: typer.Context, verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    from bot.core.settings import Settings
    from bot.run.actions import Actions

    try:
        settings = Settings.from_env(os.environ)  # the one read of the environment
    except ValueError as exc:  # a misspelt DFLASH_BOT_SANDBOX: refused before anything runs
        raise UsageError(str(exc)) from None
    Actions(settings).mask_tokens()  # before anything could print a token
    log.setup(verbose, on_actions=settings.on_actions)
    ctx.obj = settings


def _env_settings(ctx: typer.Context):
    """The settings `_setup` read from the environment (the defaults when a test invokes a command alone)."""
    from bot.core.settings import Settings

    return ctx.obj if isinstance(ctx.obj, Settings) else Settings()


def _settings(ctx: typer.Context, endpoint: str | None = None):
    """The run's settings, with a `--endpoint` option applied; sets up the Hub client for that endpoint."""
    from bot.hub import configure_client

    settings = _env_settings(ctx)
    if endpoint:
        settings = replace(settings, endpoint=endpoint.rstrip("/"))
    _check_endpoint(settings.endpoint, "--endpoint" if endpoint else "HF_ENDPOINT")
    configure_client(settings.endpoint)
    return settings


def _check_endpoint(endpoint: str, name: str) -> None:
    """Refuse an endpoint that is no http(s) URL at once (without a scheme the client retried for seconds and
    then failed with a protocol error that never named the variable)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{name}={endpoint!r} is not an http(s) URL: use e.g. https://huggingface.co")


def _reader_token_name(settings) -> str:
    """The variable the read side's token comes from (the write token stands in when no read token is set)."""
    return "HF_READ_TOKEN" if settings.read_token else "HF_TOKEN"


def _only(only: str | None) -> str | None:
    """Refuse a malformed `--only` up front (it names a Hub repo)."""
    if only is None:
        return None
    from bot.core.naming import validate_repo_id

    try:
        validate_repo_id(only, what="--only")
    except BotError as error:
        raise UsageError(error.message) from None
    if "/" not in only:
        raise UsageError(f"--only {only!r} needs the namespace too (e.g. z-lab/{only})")
    return only


@app.command()
def build(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="bundle folder to write")],
    draft: Annotated[Optional[Path], typer.Option(help="draft checkpoint folder", file_okay=False)] = None,
    target: Annotated[Optional[Path], typer.Option(help="target checkpoint folder", file_okay=False)] = None,
    job: Annotated[
        Optional[str],
        typer.Option(
            help="one matrix entry's job (JSON, or @FILE) from `plan --matrix`: download the pinned sources with "
            "HF_READ_TOKEN (never HF_TOKEN) and build them"
        ),
    ] = None,
    recipe: RecipeOption = None,
    endpoint: Annotated[Optional[str], typer.Option(help="Hub endpoint for --job")] = None,
    work: Annotated[Optional[Path], typer.Option(help="parent folder for scratch space", file_okay=False)] = None,
    keep_work: Annotated[bool, typer.Option(help="keep the scratch folder for debugging")] = False,
) -> None:
    """Classify, export, inspect and validate one draft/target pair into a bundle folder.

    Either from local folders (--draft and --target) or from the Hub (--job, the build job of the Actions fan-out).
    """
    _needs_build_extra("build")
    from bot.builder.group import Checkout, build_pair
    from bot.core.recipe import load_recipe

    if job is not None:
        if draft is not None or target is not None:
            raise UsageError("give either --job or --draft/--target, not both")
        _build_job(_settings(ctx, endpoint), job, out, recipe, work, keep_work)
        return
    if draft is None or target is None:
        raise UsageError("--draft and --target are required (or --job)")
    try:
        bundle = build_pair(
            Checkout(draft.resolve()),
            Checkout(target.resolve()),
            out.resolve(),
            load_recipe(recipe),
            keep_work=keep_work,
            settings=_env_settings(ctx),
        )
    except BotError as error:
        _fail(error)
    validation = bundle.record.validation
    typer.echo(
        f"validated: {bundle.root} (lossless, accept length {validation.accept_length:.2f} at "
        f"k={validation.recommended_num_assistant_tokens})"
    )


def _build_job(settings, job: str, out: Path, recipe: Path | None, work: Path | None, keep_work: bool) -> None:
    """The builder (an Actions build job, or the process `run` starts per target group): read token only; the
    write token is dropped from this process before anything runs."""
    from bot.core.recipe import load_recipe
    from bot.hub import Hub
    from bot.run.actions import Actions
    from bot.run.fanout import parse_jobs
    from bot.run.pipeline import build_and_hand_off
    from bot.run.report import RunReport

    if settings.write_token or os.environ.pop("HF_TOKEN", None):
        os.environ.pop("HF_TOKEN", None)
        log.get().warning("HF_TOKEN is set in a build: ignored and removed (a build job should not hold it)")
    settings = settings.without_write_token()
    try:
        text = Path(job[1:]).read_text(encoding="utf-8") if job.startswith("@") else job
    except OSError as exc:
        raise UsageError(f"cannot read {job[1:]}: {exc.strerror}") from None
    try:
        jobs = parse_jobs(text)
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    reader = Hub(settings.endpoint, settings.read_token, settings=loaded.hub)
    outcomes = build_and_hand_off(
        reader, loaded, jobs, out.resolve(), work=work, keep_work=keep_work, settings=settings
    )
    actions = Actions(settings)
    report = RunReport(outcomes=outcomes)
    actions.report(
        report,
        title=f"build {jobs[0].target} and {len(jobs)} draft(s)",
        endpoint=reader.endpoint,
        settings={"runner": settings.runner_name, "recipe": loaded.name},
    )
    actions.set_output("status", "failed" if report.failed else "built")
    for outcome in outcomes:
        typer.echo(
            f"{outcome.status}: {outcome.source}@{(outcome.revision or '')[:7]} -> {out}"
            + (f" ({outcome.reason})" if outcome.reason else "")
        )
    raise typer.Exit(report.exit_code)  # a skip (a source turned gated) is no failure


@app.command("make-tiny")
def make_tiny_command(
    kind: Annotated[Optional[str], typer.Argument(help="the kind of pair (an unknown kind lists them all)")] = None,
    out: Annotated[Optional[Path], typer.Argument(help="folder that receives target/ and draft/")] = None,
    target_repo: Annotated[
        Optional[str],
        typer.Option(help="target repo id named in the draft's card (default: the family's tiny target name)"),
    ] = None,
    seed: int = 0,
    shape: Annotated[
        Optional[str],
        typer.Option(
            help="instead of a tiny kind, a random-weight pair of a real shape (qwen3-0.6b, qwen3-1.7b, qwen3-4b, "
            "qwen3-8b, qwen3.5-0.8b): real sizes, for scale benchmarks; then the only argument is OUT"
        ),
    ] = None,
    sparse: Annotated[
        bool,
        typer.Option(
            help="with --shape: all-zero weights as sparse files (real sizes and configs in no disk, for "
            "planning and sizing; not for export)"
        ),
    ] = False,
) -> None:
    """Write a tiny generated draft/target pair laid out like Hub checkouts (or, with --shape, a real-size one)."""
    _needs_build_extra("make-tiny", ("torch", "safetensors"))
    if shape is not None:
        _make_shape(shape, out or (Path(kind) if kind else None), seed, sparse)
        return
    from tinymodels import TINY_KINDS, make_tiny  # imports torch

    if kind is None or out is None:
        raise UsageError("make-tiny needs KIND and OUT (or --shape NAME OUT)")
    if kind not in TINY_KINDS:
        raise UsageError(f"unknown kind '{kind}'; choose from: {', '.join(TINY_KINDS)}")
    pair = make_tiny(kind, out, target_repo=target_repo, seed=seed)
    typer.echo(f"{kind}: target {pair.target}, draft {pair.draft}")


def _make_shape(shape: str, out: Path | None, seed: int, sparse: bool) -> None:
    from tinymodels.shapes import SHAPES, make_shape  # imports torch

    if shape not in SHAPES or out is None:
        raise UsageError(f"make-tiny --shape NAME OUT, NAME one of: {', '.join(SHAPES)}")
    pair = make_shape(shape, out, seed=seed, sparse=sparse)
    typer.echo(f"{shape}: target {pair.target}, draft {pair.draft}")


@hub_app.command("serve")
def hub_serve(
    port: Annotated[int, typer.Option(help="loopback port (0: pick a free one)")] = 0,
    data: Annotated[Path, typer.Option(help="folder holding the hub's state")] = Path("hub-data"),
    user: Annotated[str, typer.Option(help="the user the token belongs to")] = "bot",
    token: Annotated[str, typer.Option(help="write token (may write to any namespace)", envvar="HUB_TOKEN")] = "",
    faults: Annotated[Optional[Path], typer.Option(help="JSON file of fault rules", exists=True)] = None,
) -> None:
    """Serve a Hub-compatible API on loopback until interrupted."""
    from hubserver import load_rules, serve

    if not token:
        raise UsageError("--token (or HUB_TOKEN) is required")
    serve(port=port, data_dir=data, user=user, token=token, faults=load_rules(faults) if faults else ())


EndpointOption = Annotated[Optional[str], typer.Option(help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")]
OnlyOption = Annotated[Optional[str], typer.Option(help="only this source repo id (a dispatch for one model)")]
ForceOption = Annotated[bool, typer.Option(help="rebuild even when the published build is current")]
RecheckOption = Annotated[
    bool,
    typer.Option(
        help="examine every source, even those the status repo remembers as "
        "unchanged since they were last skipped, failed or published"
    ),
]


@app.command("plan")
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
    from bot.hub import Hub
    from bot.run.actions import Actions
    from bot.run.fanout import plan_matrix
    from bot.run.pipeline import RunOptions

    only = _only(only)
    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    settings = _settings(ctx, endpoint)
    reader = Hub(settings.endpoint, settings.reader_token, settings=loaded.hub, token_name=_reader_token_name(settings))
    actions = Actions(settings)
    # stdout carries only the matrix JSON; logs and workflow commands go to stderr (the runner reads both).
    with contextlib.redirect_stdout(sys.stderr):
        _preflight_reader(reader, settings, only)
        options = RunOptions(only=only, force=force, dry_run=dry_run, recheck=recheck, settings=settings)
        planned = plan_matrix(reader, loaded, options)
        matrix_json = planned.matrix()
        count = len(matrix_json["include"])
        if out:
            out.write_text(planned.model_dump_json(indent=2) + "\n", encoding="utf-8")
        actions.set_output("matrix", matrix_json)
        actions.set_output("count", str(count))
        # The publish job also reports: a source that failed in planning makes it run (and fail) too.
        report = planned.run_report()
        has_work = count or planned.card_refresh or report.failed
        actions.set_output("publish", "true" if not dry_run and has_work else "false")
        actions.report(
            report,
            title="dflash-bot plan",
            endpoint=reader.endpoint,
            settings={
                "recipe": loaded.name,
                "fingerprint": loaded.fingerprint(),
                "only": only or "all",
                "force": force,
                "dry run": dry_run,
                "builds": count,
                "card refreshes": len(planned.card_refresh),
            },
        )
    if matrix:
        typer.echo(json.dumps(matrix_json))
    else:
        report.print_table()
        typer.echo(f"{count} build(s) planned, {len(planned.card_refresh)} card refresh(es)")
    # With --matrix a source's failure is handed on in the plan record (the publish job reports it and fails), so
    # that one bad source never stops the builds of the others.
    raise typer.Exit(0 if matrix else report.exit_code)


@app.command("run")
def run_command(
    ctx: typer.Context,
    recipe: RecipeOption = None,
    only: OnlyOption = None,
    force: ForceOption = False,
    recheck: RecheckOption = False,
    dry_run: Annotated[bool, typer.Option(help="print the plan and change nothing")] = False,
    report: Annotated[Optional[Path], typer.Option(help="write the run report as JSON here")] = None,
    endpoint: EndpointOption = None,
    work: Annotated[Optional[Path], typer.Option(help="parent folder for scratch space", file_okay=False)] = None,
) -> None:
    """The scheduled job: discover, plan, build, publish, report.

    Exits 0 when nothing failed (a skip is not a failure) and 1 when a source failed; 2 for options or an
    environment that cannot work (no HF_TOKEN without --dry-run), refused before any Hub call.
    """
    _needs_build_extra("run")
    from bot.core.outcome import Outcome, Status
    from bot.core.recipe import load_recipe
    from bot.hub import Hub
    from bot.run.actions import Actions
    from bot.run.pipeline import RunOptions, run
    from bot.run.report import RunReport

    only = _only(only)
    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    settings = _settings(ctx, endpoint)
    if not dry_run and not settings.write_token:
        raise UsageError(
            "no write token (HF_TOKEN) is set, so nothing could be published: set it, or use --dry-run to see the plan"
        )
    from bot.sandbox.confinement import hold_write_token

    # From here on the token lives only in this process's memory: out of its environment (and the environment block
    # /proc shows), the process non-dumpable; builds run in a token-free process tree (pipeline.build_in_builder).
    hold_write_token()
    reader = Hub(settings.endpoint, settings.reader_token, settings=loaded.hub, token_name=_reader_token_name(settings))
    writer = (
        Hub(settings.endpoint, settings.write_token, settings=loaded.hub, token_name="HF_TOKEN")
        if not dry_run
        else None
    )
    # Before any download: a token that cannot publish where the recipe says stops the run here, not at the first
    # create_repo after the builds.
    bot_user = _preflight_writer(writer, loaded) if writer is not None else None
    _preflight_reader(reader, settings, only, identity_known=writer is not None and not settings.read_token)
    result = RunReport(dry_run=dry_run)
    options = RunOptions(only=only, force=force, dry_run=dry_run, work=work, recheck=recheck, settings=settings)
    if bot_user is not None and loaded.publish.bot_user is None:
        options = replace(options, bot_user=bot_user)
    try:
        run(loaded, reader, writer, options, result)
    except BaseException as stop:  # a signal (SIGTERM unwinds as SystemExit) or a bug: the report says so
        result.add(Outcome("(run)", None, Status.FAILED, f"run stopped: {type(stop).__name__} {stop}".strip()))
        raise
    finally:
        # The report is safe on disk before anything is printed (printing a hostile name must not lose it).
        if report:
            result.write(report)
    Actions(settings).report(
        result,
        title="dflash-bot run",
        endpoint=reader.endpoint,
        settings={"recipe": loaded.name, "fingerprint": loaded.fingerprint(), "only": only or "all", "force": force},
    )
    result.print_table()
    raise typer.Exit(result.exit_code)


@app.command("publish")
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
    report: Annotated[Optional[Path], typer.Option(help="write the run report as JSON here")] = None,
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
    _needs_build_extra("publish", ("matplotlib",))  # the charts of the cards and the status page
    from bot.builder.bundle import Bundle
    from bot.core.recipe import load_recipe
    from bot.core.record import RecordError, Repos
    from bot.hub import Hub
    from bot.plan.planner import draft_output_repo, target_output_repo
    from bot.publish.install import install_line
    from bot.publish.publisher import publish_bundle
    from bot.run.actions import Actions
    from bot.run.fanout import gh_fetch, load_plan, publish_run
    from bot.run.report import RunReport

    if (bundle is not None and (bundles is not None or plan is not None)) or (
        bundle is None and bundles is None and plan is None
    ):
        raise UsageError("give --bundle alone, or --bundles and/or --plan")
    if bundles is not None and plan is None and not bundles.is_dir():
        raise UsageError(f"--bundles {bundles}: no such folder")
    if artifacts_from_run and (bundles is None or plan is None):
        raise UsageError("--artifacts-from-run needs --plan (the artifacts to fetch) and --bundles (where they go)")
    settings = _settings(ctx, endpoint)
    run_id, repository = (settings.actions_context.get(name) for name in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY"))
    if artifacts_from_run and not (run_id and repository):
        raise UsageError("--artifacts-from-run fetches from a GitHub Actions run: GITHUB_RUN_ID and GITHUB_REPOSITORY")
    if not settings.write_token:
        raise UsageError("no write token (HF_TOKEN) is set: nothing can be published")
    writer = Hub(settings.endpoint, settings.write_token, token_name="HF_TOKEN")
    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    if bundle is not None:
        try:
            one = Bundle.read(bundle.resolve())
            built = one.record
            if not built.source.repo or not built.target.repo:
                raise Failure(
                    "bundle was built from local folders: there is no source repo to publish under", stage=Stage.PUBLISH
                )
            repos = Repos(
                draft=draft_output_repo(loaded.publish, built.source.repo, built.draft_weight_format),
                target=target_output_repo(loaded.publish, built.target.repo),
            )
            _preflight_writer(writer, loaded)
            result = publish_bundle(writer, one, repos, private=loaded.publish.private)
        except RecordError as exc:
            raise Failure(f"{bundle}: {exc}", stage=Stage.PUBLISH) from None
        if report:
            published = RunReport()
            published.add_published(built.source.repo, built.source.revision, result, "published from --bundle")
            published.write(report)
        typer.echo(f"{result.status}: {result.repos.draft}, {result.repos.target}")
        return
    try:
        planned = load_plan(plan, loaded) if plan else None
    except BotError as error:
        _fail(error)
    _preflight_writer(writer, loaded)
    if artifacts_from_run and bundles is not None:
        bundles.mkdir(parents=True, exist_ok=True)
    fetch = gh_fetch(run_id, repository) if artifacts_from_run and run_id and repository else None
    try:
        install = install_line(settings.actions_context, loaded.publish.install)
    except BotError as error:
        _fail(error)
    result_report = publish_run(writer, loaded, bundles.resolve() if bundles else None, planned, fetch, install=install)
    if report:
        result_report.write(report)
    Actions(settings).report(
        result_report,
        title="dflash-bot run",
        endpoint=writer.endpoint,
        settings={"recipe": loaded.name, "fingerprint": loaded.fingerprint()},
    )
    result_report.print_table()
    raise typer.Exit(result_report.exit_code)


def _preflight_writer(writer: Hub, recipe: Recipe) -> str:
    """The write token's user, once the Hub said it may publish `recipe` (`bot.run.preflight.check_writer`)."""
    from bot.run.preflight import check_writer

    return check_writer(writer, recipe).user


def _preflight_reader(reader: Hub, settings, only: str | None, *, identity_known: bool = False) -> None:
    """The read token is one the Hub accepts, and a `--only` repo exists (`bot.run.preflight`)."""
    from bot.run.preflight import check_only, check_reader

    if not identity_known:
        check_reader(reader, _reader_token_name(settings))
    check_only(reader, only)


@app.command("check")
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
    from bot.hub import Hub
    from bot.run.preflight import check_reader, check_writer

    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    settings = _settings(ctx, endpoint)
    if not settings.read_token and (read_only or not settings.write_token):
        wanted = "HF_READ_TOKEN" if read_only else "HF_TOKEN (publishing) or HF_READ_TOKEN (reading)"
        raise UsageError(f"no token to check: set {wanted}")
    if settings.write_token and not read_only:
        writer = Hub(settings.endpoint, settings.write_token, settings=loaded.hub, token_name="HF_TOKEN")
        identity = check_writer(writer, loaded)
        typer.echo(
            f"HF_TOKEN: {identity.user} ({identity.role} token) may publish to {loaded.publish.namespace}, the "
            f"status repo {loaded.status_repo_id} and the collection in {loaded.publish.collection_namespace}"
        )
    if settings.read_token:
        reader = Hub(settings.endpoint, settings.read_token, settings=loaded.hub, token_name="HF_READ_TOKEN")
        found = check_reader(reader, "HF_READ_TOKEN")
        assert found is not None
        typer.echo(f"HF_READ_TOKEN: {found.user} ({found.role} token) is accepted by {settings.endpoint}")


@app.command("status")
def status_command(
    ctx: typer.Context,
    recipe: RecipeOption = None,
    repo: Annotated[
        Optional[str], typer.Option(help="status dataset repo (default: the recipe's publish.status_repo)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print status.json instead of the table")] = False,
    endpoint: EndpointOption = None,
) -> None:
    """Print what the bot watches, published, skipped and failed, from the status repo on the Hub, and when it last
    ran; exits 1 when that is stale (no run for three schedule periods: the schedule stopped)."""
    from bot.core.recipe import load_recipe
    from bot.hub import Hub
    from bot.status.page import show_status

    settings = _settings(ctx, endpoint)
    try:
        repo_id = repo or load_recipe(recipe).status_repo_id
        code = show_status(Hub(settings.endpoint, settings.reader_token), repo_id, as_json=as_json)
    except BotError as error:
        _fail(error)
    raise typer.Exit(code)


@toolchain_app.command("check")
def toolchain_check(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON (for machines)")] = False,
    markdown: Annotated[
        Optional[Path], typer.Option(help="also write the table as Markdown here (a PR body)", dir_okay=False)
    ] = None,
    write: Annotated[
        bool,
        typer.Option(help="when the candidate passes, write its pins into pyproject.toml and toolchains/profiles.yaml"),
    ] = False,
    build: Annotated[
        bool,
        typer.Option(
            help="build and try candidate environments (--no-build: only propose; a "
            "newer release then exits 1, untried)"
        ),
    ] = True,
) -> None:
    """Ask the package index (through pip's configuration) for newer releases of the OpenVINO stack; try each
    profile's candidate in its own environment (capability probe, tiny oracle pair); exit 0 when there is no newer
    release or the candidate passes, 1 when it fails."""
    _needs_build_extra("toolchain check")
    from bot.run import upstream

    settings = _env_settings(ctx)
    pinned = upstream.pinned_files() if write else None  # an installed bot has no checkout to pin in: said first
    try:
        # stdout carries only the table or the JSON; progress and workflow commands of the builds go to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            report = upstream.check(build=build, settings=settings)
    except BotError as error:
        _fail(error)
    if markdown:
        markdown.write_text(upstream.table(report, markdown=True), encoding="utf-8")
    typer.echo(json.dumps(report.as_dict(), indent=2) if as_json else upstream.table(report))
    if pinned is not None and report.newer and report.passed:
        changed = upstream.apply_pins(report, profiles_file=pinned[0], pyproject=pinned[1])
        typer.echo(f"pinned the candidate in: {', '.join(changed) or 'nothing to change'}", err=True)
    raise typer.Exit(report.exit_code)


@app.command("inspect")
def inspect_command(
    ir_dir: Annotated[
        Path,
        typer.Argument(
            help="an IR folder (an export's output or a bundle's draft/ or target/)", exists=True, file_okay=False
        ),
    ],
) -> None:
    """Print an IR folder's role, format and every check's result as JSON; exit 0 when all required checks pass,
    1 when one failed (a damaged IR: no .xml, a missing or truncated .bin, rt_info of the wrong type)."""
    from bot.builder.inspect_ir import inspect_folder

    record = inspect_folder(ir_dir.resolve())
    typer.echo(json.dumps(record, indent=2))
    raise typer.Exit(0 if record["passed"] else 1)


@app.command("try")
def try_command(
    ctx: typer.Context,
    draft_repo: Annotated[str, typer.Argument(help="a draft repo published by dflash-bot (namespace/name)")],
    revision: Annotated[Optional[str], typer.Option(help="the draft repo's revision (default: main)")] = None,
    device: Annotated[str, typer.Option(help="OpenVINO device: CPU, GPU, NPU, AUTO (or GPU.1, ...)")] = "CPU",
    prompt: Annotated[
        Optional[list[str]], typer.Option("--prompt", help="a prompt; repeat for more (default: the recipe's)")
    ] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="tokens per run (default: the recipe's)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    cache_dir: Annotated[
        Optional[Path], typer.Option(help="downloads are kept here (default: ~/.cache/dflash-bot/try)", file_okay=False)
    ] = None,
    endpoint: EndpointOption = None,
) -> None:
    """Measure a published pair on this machine: download the draft and the target it was validated with (every
    file checked against the Hub's hash and the record), run the lossless check and the k sweep on the device, and
    print them beside the card's figures. Exit 0 when lossless here, 1 when not. Never writes to the Hub."""
    from bot.hub import Hub
    from bot.run.try_pair import DEFAULT_CACHE, TryOptions, render, stdout_console, to_json, try_pair

    settings = _settings(ctx, endpoint)
    options = TryOptions(draft_repo, revision, device, tuple(prompt or ()), max_new_tokens, cache_dir or DEFAULT_CACHE)
    reader = Hub(settings.endpoint, settings.reader_token, token_name=_reader_token_name(settings))
    try:
        result = try_pair(reader, options, layers=settings.sandbox_layers)
    except Failure as failure:
        if failure.stage == Stage.VERIFY:  # no draft record there: say so when it is a target repo's
            _refuse_target_repo(reader, draft_repo, revision)
        raise
    if as_json:
        typer.echo(to_json(result))
    else:
        render(result, stdout_console())
    raise typer.Exit(result.exit_code)


def _refuse_target_repo(reader: Hub, repo: str, revision: str | None) -> None:
    """A target repo given to `try` is named as one, with the draft repos its record lists (one more GET, only on
    this failure path); the record check's own message otherwise (it lists the fields a draft record lacks)."""
    record = reader.target_record(repo, revision)
    if record is not None:
        drafts = ", ".join(draft.repo for draft in record.drafts) or "none listed"
        raise UsageError(f"this is a target repo; pass its draft repo (validated with it: {drafts})", subject=repo)


@app.command()
def demo(ctx: typer.Context) -> None:
    """Start a local Hub with generated checkpoints, run the job twice, print the report and the card."""
    _needs_build_extra("demo")
    from bot.run.demo import run_demo

    raise typer.Exit(run_demo(settings=_env_settings(ctx)))


@dataclass(frozen=True)
class _Ending:
    """How a command ended: its exit code, why (for a report it did not write) and the line that says so."""

    code: int
    reason: str | None = None
    stage: Stage | None = None
    show: Callable[[], None] | None = None


def run_command_line(args: Sequence[str]) -> int:
    """Run one command line; every exit path ends here, so `--report PATH` is written on each of them.

    A command that writes its own report (run, publish) keeps it; when it ended before doing so (a usage error, a
    recipe error, a refused option, a signal) a report with one failed outcome naming the cause is written, before
    anything is printed. A report path that cannot be written is refused before the command runs.

    Args:
        args: the arguments after the program name.

    Returns:
        The exit code (a usage error: 2; an expected error: its `exit_code`; an unexpected exception: 70; a
        signal: 128 + its number). The README's "Exit codes" table lists them (`bot.core.errors.EXIT_CODES`).
    """
    args = list(args)
    report = _report_path(args)
    if report is not None and (problem := _unwritable(report)):
        typer.echo(f"error: --report {report}: {problem}", err=True)
        return 2
    before = _stamp(report)
    ending = _invoke(args)
    code = ending.code
    if report is not None and _stamp(report) == before:
        try:
            _fallback_report(args, ending).write(report)
        except OSError as exc:
            typer.echo(f"error: cannot write --report {report}: {exc.strerror or exc}", err=True)
            code = code or 1
    if ending.show is not None:
        ending.show()
    return code


def _invoke(args: list[str]) -> _Ending:
    """Run the app without click's own exit handling, so that every ending comes back here."""
    try:
        result = app(args=args, prog_name="dflash-bot", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError:  # the help was printed already
        return _Ending(2, "no command given", Stage.USAGE)
    except click.ClickException as error:  # an unknown option, a missing argument, a --recipe that does not exist
        return _Ending(error.exit_code, error.format_message(), Stage.USAGE, error.show)
    except click.Abort:
        return _Ending(1, "aborted", None, lambda: typer.echo("Aborted!", err=True))
    except BotError as error:
        line = f"error: {error.one_line()}"
        reason = f"{error.subject}: {error.reason()}" if error.subject else error.reason()
        stage = error.stage or (Stage.USAGE if isinstance(error, UsageError) else None)
        return _Ending(error.exit_code, reason, stage, lambda: typer.echo(log.error_line(line), err=True))
    except SystemExit as exit_:  # SIGTERM (`_terminate`) or a library's sys.exit
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        return _Ending(code, f"stopped (exit {code})" if code else None)
    except Exception as error:  # a bug: the whole traceback at error level, and an exit code no expected error has
        cause = f"unexpected {type(error).__name__}: {' '.join(str(error).split())[:300]}"
        show = functools.partial(log.get().error, "error: %s", cause, exc_info=error)
        return _Ending(UNEXPECTED_EXIT_CODE, cause, None, show)
    code = result if isinstance(result, int) else 0
    return _Ending(code, f"ended with exit code {code}" if code else None)


def _report_path(args: list[str]) -> Path | None:
    """The `--report PATH` (or `--report=PATH`) in `args`, the last one when repeated, as click reads it."""
    found: Path | None = None
    for index, token in enumerate(args):
        if token == "--":
            break
        if token == "--report" and index + 1 < len(args):
            found = Path(args[index + 1])
        elif token.startswith("--report="):
            found = Path(token.partition("=")[2])
    return found


def _unwritable(path: Path) -> str | None:
    """Why a report could not be written at `path` (None: it can)."""
    if path.is_dir():
        return "is a folder, not a file"
    folder = path.parent
    if not folder.is_dir():
        return f"its folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"its folder {folder} is not writable"
    return None


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    """Identity of the file at `path` (a report is written by a rename, so a new one always differs)."""
    try:
        found = path.stat() if path is not None else None
    except OSError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size) if found else None


def _fallback_report(args: list[str], ending: _Ending) -> RunReport:
    """The report of a command that ended before writing its own: one failed outcome naming why (none on exit 0)."""
    from bot.core.outcome import Outcome, Status
    from bot.run.report import RunReport

    command: click.Command = typer.main.get_command(app)
    names = []
    for token in (a for a in args if not a.startswith("-")):
        if not isinstance(command, click.Group) or token not in command.commands:
            break
        command = command.commands[token]
        names.append(token)
    report = RunReport(dry_run="--dry-run" in args)
    if ending.code:
        source = f"({' '.join(names) or 'dflash-bot'})"
        reason = ending.reason or f"exit code {ending.code}"
        report.add(Outcome(source, None, Status.FAILED, reason, stage=ending.stage))
    return report


_handler_pid = 0  # the process that installed `_terminate` (0: none did)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM in the process that installed it: kill the children, then unwind (the report is written on the way).

    In a fork that still has it (one made below Python, which skips `_default_sigterm_in_fork`) it does what SIGTERM
    does by default: the fork owns none of the children, and a lock their bookkeeping holds may be copied locked.
    """
    if os.getpid() != _handler_pid:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    from bot.sandbox.isolation import stop_all_children

    stop_all_children()
    sys.exit(128 + signum)


def _default_sigterm_in_fork() -> None:
    """A forked child gets the default SIGTERM back. OpenVINO's telemetry posts from a multiprocessing fork and
    SIGTERMs it after a timeout; with our handler that fork hung, and so did its parent waiting for it at exit."""
    if signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def install_signal_handlers() -> None:
    """SIGTERM (a cancelled Actions job, a killed cron) unwinds like Ctrl-C in this process, and only in it:
    scratch folders are removed and child exporters are killed by the `finally` blocks on the way out."""
    global _handler_pid
    if not _handler_pid:
        os.register_at_fork(after_in_child=_default_sigterm_in_fork)
    _handler_pid = os.getpid()
    signal.signal(signal.SIGTERM, _terminate)


def main() -> int:
    from bot.sandbox.telemetry import switch_off

    switch_off()  # before anything imports huggingface_hub, NNCF or OpenVINO, in every command and the builder
    install_signal_handlers()
    return run_command_line(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
