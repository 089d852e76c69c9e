"""`dflash-bot status`: the status repo's page, in the terminal."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from bot.cli.context import EndpointOption, RecipeOption, hub_settings


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
    from bot.hub.client import Hub
    from bot.status.page import show_status

    settings = hub_settings(ctx, endpoint)
    repo_id = repo or load_recipe(recipe).status_repo_id
    raise typer.Exit(show_status(Hub(settings.endpoint, settings.reader_token), repo_id, as_json=as_json))
