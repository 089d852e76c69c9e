"""`dflash-bot hub serve`: the local Hub-compatible server (`hubserver`), for tests, the demo and offline work."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bot.core.errors import UsageError

hub_app = typer.Typer(no_args_is_help=True, help="The local Hub-compatible server (tests, demo, offline work).")


@hub_app.command("serve")
def hub_serve(
    port: Annotated[int, typer.Option(help="loopback port (0: pick a free one)")] = 0,
    data: Annotated[Path, typer.Option(help="folder holding the hub's state")] = Path("hub-data"),
    user: Annotated[str, typer.Option(help="the user the token belongs to")] = "bot",
    token: Annotated[str, typer.Option(help="write token (may write to any namespace)", envvar="HUB_TOKEN")] = "",
    faults: Annotated[Optional[Path], typer.Option(help="JSON file of fault rules", exists=True)] = None,
    org: Annotated[
        Optional[list[str]],
        typer.Option(help="an organisation the user is an admin of (repeat for more), e.g. the recipe's namespace"),
    ] = None,
) -> None:
    """Serve a Hub-compatible API on loopback until interrupted."""
    from hubserver import load_rules, serve

    if not token:
        raise UsageError("--token (or HUB_TOKEN) is required")
    serve(
        port=port,
        data_dir=data,
        user=user,
        token=token,
        faults=load_rules(faults) if faults else (),
        orgs=tuple(org or ()),
    )
