"""`dflash-bot inspect` (an IR folder's checks) and `dflash-bot try` (a published pair measured on this machine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from bot.cli.context import EndpointOption, hub_settings
from bot.core.errors import Failure, Stage, UsageError

if TYPE_CHECKING:
    from bot.hub.client import Hub


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
    from bot.hub.client import Hub
    from bot.run.preflight import reader_token_name
    from bot.run.try_pair import DEFAULT_CACHE, TryOptions, render, stdout_console, to_json, try_pair

    settings = hub_settings(ctx, endpoint)
    options = TryOptions(draft_repo, revision, device, tuple(prompt or ()), max_new_tokens, cache_dir or DEFAULT_CACHE)
    reader = Hub(settings.endpoint, settings.reader_token, token_name=reader_token_name(settings))
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
