"""What every command shares before its stage runs: the settings read once, the `--endpoint` applied, the option
types, and the checks of options that name things (`--only`, the build extra).

Nothing here imports huggingface_hub at module level: `bot.cli.main` switches telemetry off first (see
`bot/cli/__init__.py`), so the stages and the Hub client are imported inside the functions that run after it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional
from urllib.parse import urlsplit

import typer

from bot.core import log
from bot.core.errors import BotError, UsageError

if TYPE_CHECKING:
    from bot.core.settings import Settings

RecipeOption = Annotated[
    Optional[Path],
    typer.Option("--recipe", help="recipe YAML (default: workflows/dflash.yaml)", exists=True, dir_okay=False),
]
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
ReportOption = Annotated[Optional[Path], typer.Option(help="write the run report as JSON here")]
WorkOption = Annotated[Optional[Path], typer.Option(help="parent folder for scratch space", file_okay=False)]

# The export toolchain is the `build` extra (pyproject.toml): a plain `pip install dflash-ov-bot` runs `try`, `status`,
# `inspect` and `hub serve`; every command that exports, builds or publishes asks for the extra by name first.
BUILD_EXTRA = (
    "torch", "optimum-intel", "optimum", "nncf", "transformers", "tokenizers", "safetensors", "einops", "diffusers",
    "matplotlib",
)  # fmt: skip


def needs_build_extra(command: str, distributions: Sequence[str] = BUILD_EXTRA) -> None:
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


def setup(ctx: typer.Context, verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    """Read the settings from the environment (the one read), mask the tokens, set up the log."""
    from bot.core.settings import Settings
    from bot.run.actions import Actions

    try:
        settings = Settings.from_env(os.environ)  # the one read of the environment
    except ValueError as exc:  # a misspelt DFLASH_BOT_SANDBOX: refused before anything runs
        raise UsageError(str(exc)) from None
    Actions(settings).mask_tokens()  # before anything could print a token
    log.setup(verbose, on_actions=settings.on_actions)
    ctx.obj = settings


def env_settings(ctx: typer.Context) -> Settings:
    """The settings `setup` read from the environment (the defaults when a test invokes a command alone)."""
    from bot.core.settings import Settings

    return ctx.obj if isinstance(ctx.obj, Settings) else Settings()


def hub_settings(ctx: typer.Context, endpoint: str | None = None) -> Settings:
    """The run's settings, with a `--endpoint` option applied; sets up the Hub client for that endpoint."""
    from bot.hub.transport import configure_client

    settings = env_settings(ctx)
    if endpoint:
        settings = replace(settings, endpoint=endpoint.rstrip("/"))
    check_endpoint(settings.endpoint, "--endpoint" if endpoint else "HF_ENDPOINT")
    configure_client(settings.endpoint)
    return settings


def check_endpoint(endpoint: str, name: str) -> None:
    """Refuse an endpoint that is no http(s) URL at once (without a scheme the client retried for seconds and
    then failed with a protocol error that never named the variable)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{name}={endpoint!r} is not an http(s) URL: use e.g. https://huggingface.co")


def only_repo(only: str | None) -> str | None:
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
