"""One draft's finish, once its exports and the target's are done: inspect and validate each weight format, choose
the one to publish, run the per-row concurrent gate, and write the repo folders.

A draft at work is a `DraftWork`: the group's record of the draft (`bot.builder.draft_build.DraftBuild`) with the
handles its threads need (working copy, exports, the group's target); the finish adds what it measured to the same
record.
Its build record is constructed from that once the whole group's cost is known (`bot.builder.draft_record`), so
`openvino_export.json` is written once.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

from bot.builder.bundle import StagedBundle, source_files, stage_bundle
from bot.builder.draft_build import DraftBuild, GroupContext, VerifiedPair, run_step
from bot.builder.export import ExportResult
from bot.builder.inspect_child import inspect_draft_in_child
from bot.builder.target import GroupTarget, ir_digests
from bot.builder.validate import BASELINE_FILE, validate_pair
from bot.builder.validate_per_row import validate_per_row_pair
from bot.builder.weight_formats import FailedFormat, FormatChoice, FormatResult, choose_draft_format
from bot.core import log
from bot.core.errors import BotError, Failure, Stage
from bot.core.record_checks import ConcurrentValidation, DraftInspect, Validation


@dataclass(frozen=True, kw_only=True)
class MeasuredFormat:
    """One weight format of a draft: its export, its IR check and its validation."""

    weight_format: str
    export: ExportResult
    ir_digests: dict[str, str]  # its IR files' sha256, taken before the checks (`bot.builder.target.ir_digests`)
    inspection: DraftInspect
    validation: Validation
    validate_seconds: float


@dataclass(frozen=True, kw_only=True)
class DraftWork:
    """One draft at work in the group: the draft, its verified configs, its working copy, its exports by weight
    format and the group's target; `finish_draft` adds what it measured. The target's own facts (its export,
    check, quality) stay the target's (`GroupTarget`, each found once for the group), never copied per draft."""

    draft: DraftBuild
    index: int
    pair: VerifiedPair
    src: Path  # the working copy the exports read
    exports: dict[str, Future[ExportResult]]  # weight format -> its export
    target: GroupTarget
    # Added by `finish_draft` (None before it ran): the format to publish, how it was chosen (None: one format, nothing
    # to choose), the per-row concurrent gate (per-row drafts only), the repo folders written.
    chosen: MeasuredFormat | None = None
    choice: FormatChoice | None = None
    concurrent: ConcurrentValidation | None = None
    staged: StagedBundle | None = None

    @property
    def name(self) -> str:
        return self.draft.checkout.name


def finish_draft(work: DraftWork, ctx: GroupContext) -> DraftWork | DraftBuild:
    """Inspect, measure and validate one draft once its exports and the target's are done; write the repo folders
    of the weight format that measured best.

    Args:
        work: the draft, its exports and the group's target.
        ctx: the group's recipe, toolchain, scratch folder and schedule.

    Returns:
        The draft's work with what it measured added, or the draft stopped by the error (a draft's error never
        stops its siblings).
    """
    try:
        target_export = work.target.exported()
        work.target.inspection(work.pair.draft)  # the target's check, run once for the group: its failure stops this
        work.target.quality()
        work.target.exports_done()  # validations (a build's memory peak at real sizes) start once all exports are done
        chosen, choice = _measure_formats(work, target_export, ctx)
        concurrent = _concurrent(work, chosen, target_export, ctx)
        staged = run_step(Stage.BUNDLE, lambda: _stage(work, chosen, target_export))
        work.target.facts.result()  # set before the target export ran
    except BotError as error:
        log.step("%s", error.one_line())
        return work.draft.stopped(error, Stage.BUILD)
    return replace(work, chosen=chosen, choice=choice, concurrent=concurrent, staged=staged)


def _stage(work: DraftWork, chosen: MeasuredFormat, target_export: ExportResult) -> StagedBundle:
    return stage_bundle(
        work.draft.out,
        chosen.export.ir_dir,
        target_export.ir_dir,
        work.src,
        work.target.src,
        sources=(source_files(work.draft.checkout.path), work.target.sources()),
        official_files=work.target.official_ir.files if work.target.official_ir is not None else None,
        from_source=work.target.from_source,
        validated=(chosen.ir_digests, work.target.validated_ir()),
    )


def _measure_formats(
    work: DraftWork, target_export: ExportResult, ctx: GroupContext
) -> tuple[MeasuredFormat, FormatChoice | None]:
    """Every weight format of the draft measured, and the one to publish.

    Raises:
        BotError: the only format failed, or no format could be measured.
    """
    results: list[MeasuredFormat | FailedFormat] = []
    for weight_format, future in work.exports.items():
        try:
            results.append(_measure_format(work, weight_format, future, target_export, ctx))
        except BotError as error:
            if len(work.exports) == 1:
                raise  # the only format: its failure is the draft's
            results.append(_failed_format(work, weight_format, error, ctx))
    measured = [r for r in results if isinstance(r, MeasuredFormat)]
    failed = [r for r in results if isinstance(r, FailedFormat)]
    if not measured:
        reasons = "; ".join(f"{f.weight_format}: {f.reason}" for f in failed)
        raise Failure(
            f"no weight format of the draft could be measured ({reasons})", subject=work.name, stage=Stage.BUILD
        )
    chosen, choice = _choose(measured, failed, work.draft.job.published_format, ctx.recipe.publish.format_switch_margin)
    log.step("%s: %s", work.name, choice.reason if choice else f"{chosen.weight_format} draft")
    return chosen, choice


def _measure_format(
    work: DraftWork, weight_format: str, future: Future[ExportResult], target_export: ExportResult, ctx: GroupContext
) -> MeasuredFormat:
    """Inspect and validate one weight format of the draft once its export is done.

    Raises:
        BotError: its export, inspection or validation failed (named by `run_step`).
    """
    draft_export = run_step(Stage.EXPORT_DRAFT, future.result)
    validated = ir_digests(draft_export.ir_dir)  # before anything reads it: held against the bundle
    inspection = run_step(
        Stage.INSPECT_DRAFT,
        lambda: inspect_draft_in_child(
            draft_export.ir_dir,
            work.pair.draft,
            work=ctx.scratch / f"inspect-{work.index}-{weight_format}",
            timeout_s=ctx.recipe.validation.timeout_s,
            memory_budget_bytes=ctx.schedule.memory_budget_bytes,
            layers=ctx.schedule.sandbox_layers,
        ),
    )
    log.step(
        "%s: %s %s format, PagedAttention-ready: %s",
        work.name,
        weight_format,
        inspection.format,
        inspection.paged_attention_ready,
    )
    started = time.monotonic()
    validation = run_step(
        Stage.VALIDATE,
        lambda: validate_pair(
            target_export.ir_dir,
            draft_export.ir_dir,
            ctx.recipe.validation,
            work=ctx.scratch / f"validate-{work.index}-{weight_format}",
            is_vlm=work.pair.target.is_vlm,
            linear_attention=work.pair.target.linear_attention,
            python=ctx.toolchain.python,
            memory_budget_bytes=ctx.schedule.memory_budget_bytes,
            baseline=_baseline(ctx.scratch, work.index),  # plain greedy measured once for every format
            layers=ctx.schedule.sandbox_layers,
        ),
    )
    _log_sweep(work.name, weight_format, validation)
    return MeasuredFormat(
        weight_format=weight_format,
        export=draft_export,
        ir_digests=validated,
        inspection=inspection,
        validation=validation,
        validate_seconds=time.monotonic() - started,
    )


def _log_sweep(name: str, weight_format: str, validation: Validation) -> None:
    for run in validation.runs:
        log.step(
            "%s: %s k=%-2d accept length %.2f  %.1f tok/s (plain %.1f, x%.2f)",
            name,
            weight_format,
            run.num_assistant_tokens,
            run.accept_length,
            run.tokens_per_s,
            run.baseline_tokens_per_s,
            run.speedup,
        )
    if validation.speedup_note:
        log.step("%s: %s", name, validation.speedup_note)


def _failed_format(work: DraftWork, weight_format: str, error: BotError, ctx: GroupContext) -> FailedFormat:
    """What failed for one weight format, and why, while another format stands in (recorded and on the card)."""
    reason = ctx.public(f"{error.stage or Stage.BUILD}: {error.message}")
    log.step("%s: %s failed, other formats go on: %s", work.name, weight_format, reason)
    return FailedFormat(weight_format=weight_format, reason=reason)


def _baseline(scratch: Path, index: int) -> Path | None:
    """The plain greedy baseline an earlier validation of this draft left in its own folder (read-only to the
    next one), or None for the first."""
    earlier = sorted(scratch.glob(f"validate-{index}-*/{BASELINE_FILE}"))
    return earlier[0] if earlier else None


def _choose(
    measured: list[MeasuredFormat], failed: list[FailedFormat], published: str | None, margin: float
) -> tuple[MeasuredFormat, FormatChoice | None]:
    """The format to publish: the best measured speed-up among those that passed the gates, the published format
    unless another beats it by `margin` (bot.builder.weight_formats); with one format and none failed there is
    nothing to choose."""
    if len(measured) == 1 and not failed:
        return measured[0], None
    choice = choose_draft_format(
        [FormatResult.from_validation(m.weight_format, m.validation, m.export.ir_dir) for m in measured],
        failed,
        published=published,
        margin=margin,
    )
    chosen = next((m for m in measured if m.weight_format == choice.chosen), measured[0])
    return chosen, choice


def _concurrent(
    work: DraftWork, chosen: MeasuredFormat, target_export: ExportResult, ctx: GroupContext
) -> ConcurrentValidation | None:
    """Per-row drafts: continuous batching with several requests, what the format is for.

    Raises:
        Skip: the installed GenAI lacks per-row support (the reason names what is missing).
        Failure: the concurrent validation failed.
    """
    if chosen.inspection.format != "per-row":
        return None
    return run_step(
        Stage.VALIDATE,
        lambda: validate_per_row_pair(
            target_export.ir_dir,
            chosen.export.ir_dir,
            ctx.recipe.validation,
            work=ctx.scratch / f"validate-concurrent-{work.index}",
            python=ctx.toolchain.python,
            layers=ctx.schedule.sandbox_layers,
        ),
    )
