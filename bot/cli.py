"""`dflash-bot`: a thin typed CLI over the pipeline stages.

Expected failures (a Skip or Failure) end with one line naming the checkpoint, the stage and the cause, and the
error's exit code; only a bug prints a traceback.
"""

from __future__ import annotations

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
    log.setup(verbose)


@app.command()
def build(
    draft: Annotated[Path, typer.Option(help="draft checkpoint folder", file_okay=False)],
    target: Annotated[Path, typer.Option(help="target checkpoint folder", file_okay=False)],
    out: Annotated[Path, typer.Option(help="bundle folder to write")],
    recipe: RecipeOption = None,
    keep_work: Annotated[bool, typer.Option(help="keep the scratch folder for debugging")] = False,
) -> None:
    """Classify, export, inspect and validate one draft/target pair into a bundle folder."""
    from bot.build import SourceRef, build_pair
    from bot.recipe import load_recipe

    try:
        bundle = build_pair(SourceRef(draft.resolve()), SourceRef(target.resolve()), out.resolve(),
                            load_recipe(recipe), keep_work=keep_work)
    except BotError as error:
        _fail(error)
    validation = bundle.provenance["validation"]
    typer.echo(f"validated: {bundle.root} (lossless, accept length {validation['accept_length']:.2f} at "
               f"k={validation['recommended_num_assistant_tokens']})")


@app.command("make-tiny")
def make_tiny_command(
    kind: Annotated[str, typer.Argument(help="one of the kinds listed by --list")],
    out: Annotated[Path, typer.Argument(help="folder that receives target/ and draft/")],
    target_repo: Annotated[str, typer.Option(help="target repo id named in the draft's card")] = "Qwen/Qwen3-Tiny",
    seed: int = 0,
) -> None:
    """Write a tiny generated draft/target pair laid out like Hub checkouts."""
    from bot.tiny import TINY_KINDS, make_tiny

    if kind not in TINY_KINDS:
        typer.echo(f"error: unknown kind '{kind}'; choose from: {', '.join(TINY_KINDS)}", err=True)
        raise typer.Exit(2)
    pair = make_tiny(kind, out, target_repo=target_repo, seed=seed)
    typer.echo(f"{kind}: target {pair.target}, draft {pair.draft}")


@hub_app.command("serve")
def hub_serve(
    port: Annotated[int, typer.Option(help="loopback port (0: pick a free one)")] = 0,
    data: Annotated[Path, typer.Option(help="folder holding the hub's state")] = Path("hub-data"),
    user: Annotated[str, typer.Option(help="the user the token belongs to")] = "bot",
    token: Annotated[str, typer.Option(help="write token (may write to any namespace)", envvar="HUB_TOKEN")] = "",
    faults: Annotated[Optional[Path], typer.Option(help="JSON file of fault rules", exists=True)] = None,
) -> None:
    """Serve a Hub-compatible API on loopback until interrupted."""
    from bot.hubserver import load_rules, serve

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


@app.command("run")
def run_command(
    recipe: RecipeOption = None,
    only: Annotated[Optional[str], typer.Option(help="build only this source repo id")] = None,
    force: Annotated[bool, typer.Option(help="rebuild even when the published build is current")] = False,
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
    result.print_table()
    if report:
        result.write(report)
    raise typer.Exit(result.exit_code)


@app.command("publish")
def publish_command(
    bundle: Annotated[Path, typer.Option(help="bundle folder written by build", exists=True, file_okay=False)],
    recipe: RecipeOption = None,
    endpoint: EndpointOption = None,
) -> None:
    """Publish one bundle (re-checking the Hub first, so a stale bundle never overwrites newer work)."""
    from bot.publish import publish_bundle
    from bot.recipe import load_recipe

    _, writer = _hubs(endpoint)
    try:
        result = publish_bundle(writer, bundle.resolve(), load_recipe(recipe))
    except BotError as error:
        _fail(error)
    typer.echo(f"{result.status}: {result.draft_repo}, {result.target_repo}")


@app.command()
def demo() -> None:
    """Start a local Hub with generated checkpoints, run the job twice, print the report and the card."""
    from bot.demo import run_demo

    raise typer.Exit(run_demo())


def main() -> int:
    try:
        app()
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
