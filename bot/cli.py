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

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Watch the Hub for DFlash/DSpark drafts, export them to OpenVINO int4, validate, publish.")
hub_app = typer.Typer(no_args_is_help=True, help="The local Hub-compatible server (tests, demo, offline work).")
app.add_typer(hub_app, name="hub")

RecipeOption = Annotated[Optional[Path], typer.Option("--recipe", help="recipe YAML (default: workflows/dflash.yaml)",
                                                      exists=True, dir_okay=False)]


def _fail(error: BotError) -> None:
    typer.echo(f"error: {error.one_line()}", err=True)
    raise typer.Exit(error.exit_code)


@app.callback()
def _setup(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    from bot.actions import Actions

    Actions.from_environ().mask_tokens()  # before anything could print a token
    log.setup(verbose)


@app.command()
def build(
    out: Annotated[Path, typer.Option(help="bundle folder to write")],
    draft: Annotated[Optional[Path], typer.Option(help="draft checkpoint folder", file_okay=False)] = None,
    target: Annotated[Optional[Path], typer.Option(help="target checkpoint folder", file_okay=False)] = None,
    job: Annotated[Optional[str], typer.Option(
        help="one matrix entry's job (JSON, or @FILE) from `plan --matrix`: download the pinned sources with "
             "HF_READ_TOKEN (never HF_TOKEN) and build them")] = None,
    recipe: RecipeOption = None,
    endpoint: Annotated[Optional[str], typer.Option(help="Hub endpoint for --job")] = None,
    work: Annotated[Optional[Path], typer.Option(help="parent folder for scratch space", file_okay=False)] = None,
    keep_work: Annotated[bool, typer.Option(help="keep the scratch folder for debugging")] = False,
) -> None:
    """Classify, export, inspect and validate one draft/target pair into a bundle folder.

    Either from local folders (--draft and --target) or from the Hub (--job, the build job of the Actions fan-out).
    """
    from bot.build import SourceRef, build_pair
    from bot.recipe import load_recipe

    if job is not None:
        if draft is not None or target is not None:
            typer.echo("error: give either --job or --draft/--target, not both", err=True)
            raise typer.Exit(2)
        _build_job(job, out, recipe, endpoint, work, keep_work)
        return
    if draft is None or target is None:
        typer.echo("error: --draft and --target are required (or --job)", err=True)
        raise typer.Exit(2)
    try:
        bundle = build_pair(SourceRef(draft.resolve()), SourceRef(target.resolve()), out.resolve(),
                            load_recipe(recipe), keep_work=keep_work)
    except BotError as error:
        _fail(error)
    validation = bundle.provenance["validation"]
    typer.echo(f"validated: {bundle.root} (lossless, accept length {validation['accept_length']:.2f} at "
               f"k={validation['recommended_num_assistant_tokens']})")


def _build_job(job: str, out: Path, recipe: Path | None, endpoint: str | None, work: Path | None,
               keep_work: bool) -> None:
    """The build job: read token only; the write token is dropped from this process before anything runs."""
    import json
    import os

    from bot.actions import Actions
    from bot.fanout import BuildJob, JobError, build_job
    from bot.hub import Hub
    from bot.recipe import load_recipe
    from bot.report import FAILED, RunReport

    if os.environ.pop("HF_TOKEN", None):
        log.get().warning("HF_TOKEN is set in a build: ignored and removed (a build job should not hold it)")
    try:
        text = Path(job[1:]).read_text(encoding="utf-8") if job.startswith("@") else job
    except OSError as exc:
        typer.echo(f"error: cannot read {job[1:]}: {exc.strerror}", err=True)
        raise typer.Exit(2)
    try:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise JobError(f"--job is not JSON: {exc}", stage="job") from None
        parsed = BuildJob.from_dict(data.get("job", data) if isinstance(data, dict) else data)
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    reader = Hub(endpoint, os.environ.get("HF_READ_TOKEN"))
    outcome = build_job(reader, loaded, parsed, out.resolve(), work=work, keep_work=keep_work)
    actions = Actions.from_environ()
    report = RunReport(outcomes=[outcome])
    actions.report(report, title=f"build {parsed.source}", endpoint=reader.endpoint,
                   settings={"runner": os.environ.get("RUNNER_NAME", "local"), "recipe": loaded.name})
    actions.set_output("status", outcome.status)
    typer.echo(f"{outcome.status}: {parsed.source}@{parsed.revision[:7]} -> {out}"
               + (f" ({outcome.reason})" if outcome.reason else ""))
    raise typer.Exit(1 if outcome.status == FAILED else 0)  # a skip (say, a source turned gated) is no failure


@app.command("make-tiny")
def make_tiny_command(
    kind: Annotated[Optional[str], typer.Argument(help="the kind of pair (an unknown kind lists them all)")] = None,
    out: Annotated[Optional[Path], typer.Argument(help="folder that receives target/ and draft/")] = None,
    target_repo: Annotated[Optional[str], typer.Option(
        help="target repo id named in the draft's card (default: the family's tiny target name)")] = None,
    seed: int = 0,
    shape: Annotated[Optional[str], typer.Option(
        help="instead of a tiny kind, a random-weight pair of a real shape (qwen3-0.6b, qwen3-1.7b, qwen3-4b, "
             "qwen3-8b, qwen3.5-0.8b): real sizes, for scale benchmarks; then the only argument is OUT")] = None,
) -> None:
    """Write a tiny generated draft/target pair laid out like Hub checkouts (or, with --shape, a real-size one)."""
    if shape is not None:
        _make_shape(shape, out or (Path(kind) if kind else None), seed)
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


def _make_shape(shape: str, out: Path | None, seed: int) -> None:
    from tinymodels.shapes import SHAPES, make_shape

    if shape not in SHAPES or out is None:
        typer.echo(f"error: make-tiny --shape NAME OUT, NAME one of: {', '.join(SHAPES)}", err=True)
        raise typer.Exit(2)
    pair = make_shape(shape, out, seed=seed)
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


def _hubs(endpoint: str | None) -> tuple:
    """(reader, writer): HF_READ_TOKEN for discovery and downloads when set, HF_TOKEN for publishing."""
    import os

    from bot.hub import Hub

    write_token = os.environ.get("HF_TOKEN")
    read_token = os.environ.get("HF_READ_TOKEN") or write_token
    return Hub(endpoint, read_token), Hub(endpoint, write_token)


EndpointOption = Annotated[Optional[str], typer.Option(help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")]
OnlyOption = Annotated[Optional[str], typer.Option(help="only this source repo id (a dispatch for one model)")]
ForceOption = Annotated[bool, typer.Option(help="rebuild even when the published build is current")]


@app.command("plan")
def plan_command(
    recipe: RecipeOption = None,
    only: OnlyOption = None,
    force: ForceOption = False,
    dry_run: Annotated[bool, typer.Option(help="plan, but hand nothing on to build or publish")] = False,
    matrix: Annotated[bool, typer.Option(help="print GitHub matrix JSON ({\"include\": [...]}) on stdout")] = False,
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
    import os

    from bot.actions import Actions
    from bot.fanout import plan_matrix
    from bot.hub import Hub
    from bot.pipeline import RunOptions
    from bot.recipe import load_recipe

    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    reader = Hub(endpoint, os.environ.get("HF_READ_TOKEN") or os.environ.get("HF_TOKEN"))
    actions = Actions.from_environ()
    # stdout carries only the matrix JSON; logs and workflow commands go to stderr (the runner reads both).
    with contextlib.redirect_stdout(sys.stderr):
        planned = plan_matrix(reader, loaded, RunOptions(only=only, force=force, dry_run=dry_run))
        matrix_json = planned.matrix()
        count = len(matrix_json["include"])
        if out:
            out.write_text(json.dumps(planned.to_dict(), indent=2) + "\n", encoding="utf-8")
        actions.set_output("matrix", matrix_json)
        actions.set_output("count", str(count))
        # The publish job also reports: a source that failed in planning makes it run (and fail) too.
        has_work = count or planned.card_refresh or planned.report.failed
        actions.set_output("publish", "true" if not dry_run and has_work else "false")
        actions.report(planned.report, title="dflash-bot plan", endpoint=reader.endpoint,
                       settings={"recipe": loaded.name, "fingerprint": loaded.fingerprint(), "only": only or "all",
                                 "force": force, "dry run": dry_run, "builds": count,
                                 "card refreshes": len(planned.card_refresh)})
    if matrix:
        typer.echo(json.dumps(matrix_json))
    else:
        planned.report.print_table()
        typer.echo(f"{count} build(s) planned, {len(planned.card_refresh)} card refresh(es)")
    # With --matrix a source's failure is handed on in the plan record (the publish job reports it and fails), so
    # that one bad source never stops the builds of the others.
    raise typer.Exit(0 if matrix else planned.report.exit_code)


@app.command("run")
def run_command(
    recipe: RecipeOption = None,
    only: OnlyOption = None,
    force: ForceOption = False,
    dry_run: Annotated[bool, typer.Option(help="print the plan and change nothing")] = False,
    report: Annotated[Optional[Path], typer.Option(help="write the run report as JSON here")] = None,
    endpoint: EndpointOption = None,
    work: Annotated[Optional[Path], typer.Option(help="parent folder for scratch space", file_okay=False)] = None,
) -> None:
    """The scheduled job: discover, plan, build, publish, report."""
    from bot.pipeline import RunOptions, run
    from bot.recipe import load_recipe

    try:
        loaded = load_recipe(recipe)
    except BotError as error:
        _fail(error)
    reader, writer = _hubs(endpoint)
    result = run(loaded, reader, writer, RunOptions(only=only, force=force, dry_run=dry_run, work=work))
    from bot.actions import Actions

    Actions.from_environ().report(result, title="dflash-bot run", endpoint=reader.endpoint,
                                  settings={"recipe": loaded.name, "fingerprint": loaded.fingerprint(),
                                            "only": only or "all", "force": force})
    result.print_table()
    if report:
        result.write(report)
    raise typer.Exit(result.exit_code)


@app.command("publish")
def publish_command(
    bundle: Annotated[Optional[Path], typer.Option(help="bundle folder written by build", exists=True,
                                                   file_okay=False)] = None,
    bundles: Annotated[Optional[Path], typer.Option(help="folder of bundle folders (the downloaded artifacts)",
                                                    file_okay=False)] = None,
    plan: Annotated[Optional[Path], typer.Option(help="plan record from `plan --out`: report every planned "
                                                      "source and perform its card refreshes", exists=True,
                                                 dir_okay=False)] = None,
    report: Annotated[Optional[Path], typer.Option(help="write the run report as JSON here")] = None,
    recipe: RecipeOption = None,
    endpoint: EndpointOption = None,
) -> None:
    """Publish one bundle, or a run's bundles (re-checking the Hub first, so a stale bundle never overwrites newer
    work). Never loads a checkpoint."""
    from bot.publish import publish_bundle
    from bot.recipe import load_recipe

    _, writer = _hubs(endpoint)
    if bundle is not None and bundles is None and plan is None:
        try:
            result = publish_bundle(writer, bundle.resolve(), load_recipe(recipe))
        except BotError as error:
            _fail(error)
        typer.echo(f"{result.status}: {result.draft_repo}, {result.target_repo}")
        return
    if bundle is not None or (bundles is None and plan is None):
        typer.echo("error: give --bundle alone, or --bundles and/or --plan", err=True)
        raise typer.Exit(2)
    from bot.actions import Actions
    from bot.fanout import load_plan, publish_run

    try:
        loaded = load_recipe(recipe)
        planned = load_plan(plan) if plan else None
    except BotError as error:
        _fail(error)
    result = publish_run(writer, loaded, bundles.resolve() if bundles else None, planned)
    Actions.from_environ().report(result, title="dflash-bot run", endpoint=writer.endpoint,
                                  settings={"recipe": loaded.name, "fingerprint": loaded.fingerprint()})
    result.print_table()
    if report:
        result.write(report)
    raise typer.Exit(result.exit_code)


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
