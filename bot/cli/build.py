"""`dflash-bot build` (a local pair, or one build job of a plan) and `dflash-bot make-tiny` (generated pairs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bot.cli.context import RecipeOption, WorkOption, env_settings, hub_settings, needs_build_extra
from bot.core.errors import UsageError


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
    work: WorkOption = None,
    keep_work: Annotated[bool, typer.Option(help="keep the scratch folder for debugging")] = False,
) -> None:
    """Classify, export, inspect and validate one draft/target pair into a bundle folder.

    Either from local folders (--draft and --target) or from the Hub (--job, the build job of the Actions fan-out).
    """
    needs_build_extra("build")
    from bot.builder.draft_build import Checkout
    from bot.builder.group import build_pair
    from bot.core.recipe import load_recipe

    if job is not None:
        if draft is not None or target is not None:
            raise UsageError("give either --job or --draft/--target, not both")
        _build_planned(ctx, endpoint, job, out, recipe, work, keep_work)
        return
    if draft is None or target is None:
        raise UsageError("--draft and --target are required (or --job)")
    bundle = build_pair(
        Checkout(draft.resolve()),
        Checkout(target.resolve()),
        out.resolve(),
        load_recipe(recipe),
        keep_work=keep_work,
        settings=env_settings(ctx),
    )
    validation = bundle.record.validation
    typer.echo(
        f"validated: {bundle.root} (lossless, accept length {validation.accept_length:.2f} at "
        f"k={validation.recommended_num_assistant_tokens})"
    )


def _build_planned(
    ctx: typer.Context,
    endpoint: str | None,
    job: str,
    out: Path,
    recipe: Path | None,
    work: Path | None,
    keep_work: bool,
) -> None:
    """The builder (an Actions build job, or the process `run` starts per target group): read token only; the
    write token is dropped from this process before anything runs."""
    from bot.core.recipe import load_recipe
    from bot.run.commands import build_planned, drop_write_token
    from bot.run.fanout import parse_jobs

    settings = drop_write_token(hub_settings(ctx, endpoint))
    try:
        text = Path(job[1:]).read_text(encoding="utf-8") if job.startswith("@") else job
    except OSError as exc:
        raise UsageError(f"cannot read {job[1:]}: {exc.strerror}") from None
    jobs = parse_jobs(text)
    report = build_planned(settings, load_recipe(recipe), jobs, out.resolve(), work=work, keep_work=keep_work)
    for outcome in report.outcomes:
        typer.echo(
            f"{outcome.status}: {outcome.source}@{(outcome.revision or '')[:7]} -> {out}"
            + (f" ({outcome.reason})" if outcome.reason else "")
        )
    raise typer.Exit(report.exit_code)  # a skip (a source turned gated) is no failure


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
            "qwen3-8b, qwen3.5-0.8b, qwen3-coder-30b-a3b, qwen3.5-35b-a3b, qwen3.5-27b, gemma-4-31b; NAME@N: cut to N "
            "layers): real sizes, for scale benchmarks; then the only argument is OUT"
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
    needs_build_extra("make-tiny", ("torch", "safetensors"))
    if shape is not None:
        _make_shape(shape, out or (Path(kind) if kind else None), seed, sparse)
        return
    from tinymodels import TINY_KINDS, make_tiny  # imports torch

    if kind is None or out is None:
        raise UsageError("make-tiny needs KIND and OUT (or --shape NAME OUT)")
    if kind not in TINY_KINDS:
        raise UsageError(f"unknown kind '{kind}'; choose from: {', '.join(TINY_KINDS)}")
    pair = make_tiny(kind, out, target_repo=target_repo, seed=seed)
    typer.echo(f"{kind}: target {pair.target}, draft {pair.draft}")


def _make_shape(shape: str, out: Path | None, seed: int, sparse: bool) -> None:
    from tinymodels.shapes import SHAPES, make_shape, shape_named  # imports torch

    if out is None:
        raise UsageError(f"make-tiny --shape NAME OUT, NAME one of: {', '.join(SHAPES)} (NAME@N: cut to N layers)")
    try:
        shape_named(shape)
    except ValueError as error:
        raise UsageError(str(error)) from None
    pair = make_shape(shape, out, seed=seed, sparse=sparse)
    typer.echo(f"{shape}: target {pair.target}, draft {pair.draft}")
