"""`dflash-bot`: a thin typed CLI over the pipeline stages.

Expected failures (a Skip or Failure) end with one line naming the checkpoint, the stage and the cause, and the
error's exit code; only a bug prints a traceback.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from bot import log
from bot.errors import BotError

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


def _fail(error: BotError) -> None:
    typer.echo(f"error: {error.one_line()}", err=True)
    raise typer.Exit(error.exit_code)


@app.callback()
def _setup(ctx: typer.Context, verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    import os

    from bot.actions import Actions
    from bot.settings import Settings

    settings = Settings.from_env(os.environ)  # the one read of the environment
    Actions(settings).mask_tokens()  # before anything could print a token
    log.setup(verbose, on_actions=settings.on_actions)
    ctx.obj = settings


def _settings(ctx: typer.Context, endpoint: str | None = None):
    """The run's settings, with a `--endpoint` option applied; sets up the Hub client for that endpoint."""
    from dataclasses import replace

    from bot.hub import configure_client
    from bot.settings import Settings

    settings: Settings = ctx.obj if isinstance(ctx.obj, Settings) else Settings()
    if endpoint:
        settings = replace(settings, endpoint=endpoint.rstrip("/"))
    configure_client(settings.endpoint)
    return settings


def _only(only: str | None) -> str | None:
    """Refuse a malformed `--only` up front (it names a Hub repo)."""
    if only is None:
        return None
    from bot.naming import validate_repo_id

    try:
        validate_repo_id(only, what="--only")
    except BotError as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(2) from None
    if "/" not in only:
        typer.echo(f"error: --only {only!r} needs the namespace too (e.g. z-lab/{only})", err=True)
        raise typer.Exit(2)
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
    from bot.build import Checkout, build_pair
    from bot.recipe import load_recipe

    if job is not None:
        if draft is not None or target is not None:
            typer.echo("error: give either --job or --draft/--target, not both", err=True)
            raise typer.Exit(2)
        _build_job(_settings(ctx, endpoint), job, out, recipe, work, keep_work)
        return
    if draft is None or target is None:
        typer.echo("error: --draft and --target are required (or --job)", err=True)
        raise typer.Exit(2)
    try:
        bundle = build_pair(
            Checkout(draft.resolve()),
            Checkout(target.resolve()),
            out.resolve(),
            load_recipe(recipe),
            keep_work=keep_work,
        )
    except BotError as error:
        _fail(error)
    validation = bundle.record.validation
    typer.echo(
        f"validated: {bundle.root} (lossless, accept length {validation.accept_length:.2f} at "
        f"k={validation.recommended_num_assistant_tokens})"
    )


def _build_job(settings, job: str, out: Path, recipe: Path | None, work: Path | None, keep_work: bool) -> None:
    """The build job: read token only; the write token is dropped from this process before anything runs."""
    import os

    from bot.actions import Actions
    from bot.fanout import build_jobs, parse_jobs
    from bot.hub import Hub
    from bot.recipe import load_recipe
    from bot.report import RunReport

    if settings.write_token or os.environ.pop("HF_TOKEN", None):
        os.environ.pop("HF_TOKEN", None)
        log.get().warning("HF_TOKEN is set in a build: ignored and removed (a build job should not hold it)")
    settings = settings.without_write_token()
    try:
        text = Path(job[1:]).read_text(encoding="utf-8") if job.startswith("@") else job
    except OSError as exc:
        typer.echo(f"error: cannot read {job[1:]}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None
    try:
        jobs = parse_jobs(text)
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    reader = Hub(settings.endpoint, settings.read_token)
    outcomes = build_jobs(reader, loaded, jobs, out.resolve(), work=work, keep_work=keep_work)
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
    if shape is not None:
        _make_shape(shape, out or (Path(kind) if kind else None), seed, sparse)
        return
    from tinymodels import TINY_KINDS, make_tiny

    if kind is None or out is None:
        typer.echo("error: make-tiny needs KIND and OUT (or --shape NAME OUT)", err=True)
        raise typer.Exit(2)
    if kind not in TINY_KINDS:
        typer.echo(f"error: unknown kind '{kind}'; choose from: {', '.join(TINY_KINDS)}", err=True)
        raise typer.Exit(2)
    pair = make_tiny(kind, out, target_repo=target_repo, seed=seed)
    typer.echo(f"{kind}: target {pair.target}, draft {pair.draft}")


def _make_shape(shape: str, out: Path | None, seed: int, sparse: bool) -> None:
    from tinymodels.shapes import SHAPES, make_shape

    if shape not in SHAPES or out is None:
        typer.echo(f"error: make-tiny --shape NAME OUT, NAME one of: {', '.join(SHAPES)}", err=True)
        raise typer.Exit(2)
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
        typer.echo("error: --token (or HUB_TOKEN) is required", err=True)
        raise typer.Exit(2)
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
    import contextlib
    import json

    from bot.actions import Actions
    from bot.fanout import plan_matrix
    from bot.hub import Hub
    from bot.pipeline import RunOptions
    from bot.recipe import load_recipe

    only = _only(only)
    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    settings = _settings(ctx, endpoint)
    reader = Hub(settings.endpoint, settings.reader_token)
    actions = Actions(settings)
    # stdout carries only the matrix JSON; logs and workflow commands go to stderr (the runner reads both).
    with contextlib.redirect_stdout(sys.stderr):
        planned = plan_matrix(reader, loaded, RunOptions(only=only, force=force, dry_run=dry_run, recheck=recheck))
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
    from bot.actions import Actions
    from bot.hub import Hub
    from bot.outcome import Outcome, Status
    from bot.pipeline import RunOptions, run
    from bot.recipe import load_recipe
    from bot.report import RunReport

    only = _only(only)
    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    settings = _settings(ctx, endpoint)
    if not dry_run and not settings.write_token:
        typer.echo(
            "error: no write token (HF_TOKEN) is set, so nothing could be published: set it, or use "
            "--dry-run to see the plan",
            err=True,
        )
        raise typer.Exit(2)
    from bot.confinement import hold_write_token

    # From here on the token lives only in this process's memory: out of its environment (and the environment block
    # /proc shows), the process non-dumpable; builds run in a token-free process tree (pipeline.build_in_builder).
    hold_write_token()
    reader = Hub(settings.endpoint, settings.reader_token)
    writer = Hub(settings.endpoint, settings.write_token) if not dry_run else None
    result = RunReport(dry_run=dry_run)
    try:
        run(
            loaded,
            reader,
            writer,
            RunOptions(only=only, force=force, dry_run=dry_run, work=work, recheck=recheck),
            result,
        )
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
    recipe: RecipeOption = None,
    endpoint: EndpointOption = None,
) -> None:
    """Publish one bundle, or a run's bundles (re-checking the Hub first, so a stale bundle never overwrites newer
    work). Never loads a checkpoint."""
    from bot.actions import Actions
    from bot.bundle import Bundle
    from bot.fanout import load_plan, publish_run
    from bot.hub import Hub
    from bot.plan import draft_output_repo, target_output_repo
    from bot.publish import publish_bundle
    from bot.recipe import load_recipe
    from bot.record import RecordError, Repos

    if (bundle is not None and (bundles is not None or plan is not None)) or (
        bundle is None and bundles is None and plan is None
    ):
        typer.echo("error: give --bundle alone, or --bundles and/or --plan", err=True)
        raise typer.Exit(2)
    settings = _settings(ctx, endpoint)
    if not settings.write_token:
        typer.echo("error: no write token (HF_TOKEN) is set: nothing can be published", err=True)
        raise typer.Exit(2)
    writer = Hub(settings.endpoint, settings.write_token)
    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    if bundle is not None:
        try:
            one = Bundle.read(bundle.resolve())
            built = one.record
            if not built.source.repo or not built.target.repo:
                raise BotError(
                    "bundle was built from local folders: there is no source repo to publish under", stage="publish"
                )
            repos = Repos(
                draft=draft_output_repo(loaded.publish, built.source.repo),
                target=target_output_repo(loaded.publish, built.target.repo),
            )
            result = publish_bundle(writer, one, repos, private=loaded.publish.private)
        except RecordError as exc:
            typer.echo(f"error: {bundle}: {exc}", err=True)
            raise typer.Exit(1) from None
        except BotError as error:
            _fail(error)
        typer.echo(f"{result.status}: {result.repos.draft}, {result.repos.target}")
        return
    try:
        planned = load_plan(plan, loaded) if plan else None
    except BotError as error:
        _fail(error)
    result_report = publish_run(writer, loaded, bundles.resolve() if bundles else None, planned)
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
    """Print what the bot watches, published, skipped and failed, from the status repo on the Hub."""
    from bot.hub import Hub
    from bot.recipe import load_recipe
    from bot.status_page import show_status

    settings = _settings(ctx, endpoint)
    try:
        repo_id = repo or load_recipe(recipe).publish.status_repo_id
        code = show_status(Hub(settings.endpoint, settings.reader_token), repo_id, as_json=as_json)
    except BotError as error:
        _fail(error)
    raise typer.Exit(code)


@toolchain_app.command("check")
def toolchain_check(
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
    import contextlib
    import json

    from bot import upstream

    try:
        # stdout carries only the table or the JSON; progress and workflow commands of the builds go to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            report = upstream.check(build=build)
    except BotError as error:
        _fail(error)
    if markdown:
        markdown.write_text(upstream.table(report, markdown=True), encoding="utf-8")
    typer.echo(json.dumps(report.as_dict(), indent=2) if as_json else upstream.table(report))
    if write and report.newer and report.passed:
        from bot.profiles import PROFILES_FILE

        changed = upstream.apply_pins(report, profiles_file=PROFILES_FILE, pyproject=upstream.PYPROJECT)
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
    """Print an IR folder's role, format and every check's result as JSON; exit 0 only when all required pass."""
    import json

    from bot.check_ir import inspect_folder

    try:
        record = inspect_folder(ir_dir.resolve())
    except BotError as error:
        _fail(error)
    typer.echo(json.dumps(record, indent=2))
    raise typer.Exit(0 if record["passed"] else 2)


@app.command()
def demo() -> None:
    """Start a local Hub with generated checkpoints, run the job twice, print the report and the card."""
    from bot.demo import run_demo

    raise typer.Exit(run_demo())


def _terminate(signum: int, frame: object) -> None:
    from bot.isolation import stop_all_children

    stop_all_children()
    sys.exit(128 + signum)


def main() -> int:
    # SIGTERM (a cancelled Actions job, a killed cron) unwinds like Ctrl-C: scratch folders are removed and
    # child exporters are killed by the `finally` blocks on the way out.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
