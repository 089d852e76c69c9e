"""`dflash-bot demo`: the whole job against a local Hub with generated checkpoints (`bot.run.demo`)."""

from __future__ import annotations

import typer

from bot.cli.context import env_settings, needs_build_extra


def demo(ctx: typer.Context) -> None:
    """Start a local Hub with generated checkpoints, run the job twice, print the report and the card."""
    needs_build_extra("demo")
    from bot.run.demo import run_demo

    raise typer.Exit(run_demo(settings=env_settings(ctx)))
