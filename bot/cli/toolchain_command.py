"""`dflash-bot toolchain check`: newer releases of the OpenVINO stack, tried on tiny pairs (`bot.run.upstream`)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from bot.cli.context import env_settings, needs_build_extra

toolchain_app = typer.Typer(
    no_args_is_help=True, help="Follow upstream: newer toolchain releases, tried on tiny pairs."
)


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
    needs_build_extra("toolchain check")
    from bot.run import upstream

    settings = env_settings(ctx)
    pinned = upstream.pinned_files() if write else None  # an installed bot has no checkout to pin in: said first
    # stdout carries only the table or the JSON; progress and workflow commands of the builds go to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        report = upstream.check(build=build, settings=settings)
    if markdown:
        markdown.write_text(upstream.table(report, markdown=True), encoding="utf-8")
    typer.echo(json.dumps(report.as_dict(), indent=2) if as_json else upstream.table(report))
    if pinned is not None and report.newer and report.passed:
        changed = upstream.apply_pins(report, profiles_file=pinned[0], pyproject=pinned[1])
        typer.echo(f"pinned the candidate in: {', '.join(changed) or 'nothing to change'}", err=True)
    raise typer.Exit(report.exit_code)
