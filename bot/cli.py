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
    from bot.hubserver import serve

    if not token:
        typer.echo("error: --token (or HUB_TOKEN) is required", err=True)
        raise typer.Exit(2)
    serve(port=port, data_dir=data, user=user, token=token, faults=faults)


def main() -> int:
    try:
        app()
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
