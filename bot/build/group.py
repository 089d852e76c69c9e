"""The build stage: verify → export → inspect → validate → bundle, for one target and the drafts of it.

Discovery already classified and cross-checked every pair from the Hub's metadata
(`bot.discover.candidates.Candidate`); the build only verifies that the downloaded files are what discovery saw, then
does the heavy work. One target export serves every draft of it; the target and draft exports run side by side, and
each draft's validation starts as soon as its export is done. Each draft's outcome is independent: one broken draft
never stops its siblings.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar

from bot import __version__
from bot.build.bundle import Bundle, local_path_markers, source_files, write_bundle
from bot.build.check_ir import DraftIrReport, TargetIrReport
from bot.build.export import TASK_LLM, ExportRequest, ExportResult, export_model, target_task
from bot.build.inspect_child import inspect_draft_in_child, inspect_target_in_child
from bot.build.quality import QualityReport, measure_quality, quality_gate
from bot.build.quantization import (
    Int4Settings,
    calibration_unavailable,
    recommended_int4,
    weight_format_args,
    with_calibration,
)
from bot.build.validate import BASELINE_FILE, ValidationReport, validate_pair
from bot.build.validate_per_row import PerRowValidation, validate_per_row_pair
from bot.build.weight_formats import FailedFormat, FormatChoice, FormatResult, choose_draft_format
from bot.core import log, record
from bot.core.errors import BotError, Failure
from bot.core.profiles import DEFAULT_PROFILE, toolchain_for
from bot.core.recipe import Recipe
from bot.core.toolchain import Toolchain
from bot.discover.candidates import Candidate
from bot.discover.checkpoints import DraftSpec, TargetSpec, check_weights, classify_draft, load_config, read_target
from bot.discover.fetch import safe_copy
from bot.discover.source_card import card_license
from bot.plan.reuse import ReusedTarget, check_reused
from bot.plan.sizing import estimate_build, gb, local_runner
from bot.sandbox.resources import StageResources, measure

T = TypeVar("T")


@dataclass(frozen=True)
class Checkout:
    """A checkpoint on disk and, when it came from the Hub, where from."""

    path: Path
    repo_id: str | None = None
    revision: str | None = None

    @property
    def name(self) -> str:
        return self.repo_id or self.path.name


@dataclass(frozen=True)
class DraftBuild:
    """One draft to build against the group's target: discovery's facts, its files, and its bundle folder."""

    candidate: Candidate
    checkout: Checkout
    out: Path


@dataclass(frozen=True)
class VerifiedPair:
    """The configs of the downloaded files, after checking they match what discovery saw."""

    draft: DraftSpec
    target: TargetSpec


@dataclass(frozen=True)
class DraftOutcome:
    """What happened to one draft: a bundle (passed or failed its gates) or the error that stopped it."""

    candidate: Candidate
    bundle: Bundle | None
    error: BotError | None

    @property
    def ok(self) -> bool:
        return self.bundle is not None and self.bundle.passed and self.error is None


def verify_pair(candidate: Candidate, draft: Checkout, target: Checkout, *, target_is_ir: bool = False) -> VerifiedPair:
    """Check that the downloaded files are the ones discovery classified (kind, target family, weight bytes).

    With `target_is_ir` the target folder is a published int4 IR (`bot.plan.reuse`): its config is checked, its weight
    bytes cannot be (the record it came with names the target revision).

    Raises:
        Skip: a config or weight file is broken (the source's defect).
        Failure: the files differ from what discovery saw (the repo changed under the pinned revision, or a
            download went wrong), naming both values.
    """
    draft_spec = classify_draft(load_config(draft.path, subject=draft.name), subject=draft.name)
    target_spec = read_target(load_config(target.path, subject=target.name), subject=target.name)
    seen = {
        "draft kind": (candidate.kind, draft_spec.kind),
        "target model_type": (candidate.target_model_type, target_spec.model_type),
        "target is a VLM": (candidate.target_is_vlm, target_spec.is_vlm),
        "draft weight bytes": (candidate.draft_bytes, check_weights(draft.path, subject=draft.name)),
    }
    if not target_is_ir:
        seen["target weight bytes"] = (candidate.target_bytes, check_weights(target.path, subject=target.name))
    differ = [
        f"{what}: discovery saw {before}, the download has {after}"
        for what, (before, after) in seen.items()
        if before != after
    ]
    if differ:
        raise Failure(
            "downloaded files differ from what discovery saw (" + "; ".join(differ) + ")",
            subject=draft.name,
            stage="verify",
        )
    return VerifiedPair(draft_spec, target_spec)


def build_group(
    target: Checkout,
    drafts: list[DraftBuild],
    recipe: Recipe,
    *,
    work: Path | None = None,
    keep_work: bool = False,
    toolchain: Toolchain | None = None,
    reused: ReusedTarget | None = None,
) -> list[DraftOutcome]:
    """Build every draft of one target into its own bundle folder, exporting the target once.

    Args:
        target: the target checkpoint shared by all drafts (with `reused`: the published target's IR folder).
        drafts: the drafts, each with discovery's candidate and its bundle folder.
        recipe: export and validation settings.
        work: scratch folder (a fresh temporary one by default); removed on every exit unless `keep_work`.
        toolchain: the toolchain to build with (default: the target family's profile; `toolchain check` passes a
            candidate environment's).
        reused: the published target IR to build against instead of exporting the target (`bot.plan.reuse`).
    """
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-", dir=work))
    try:
        model_type = drafts[0].candidate.target_model_type
        try:
            # The target's family picks the toolchain profile (its environment is created on first use).
            toolchain = toolchain or toolchain_for(model_type)
        except BotError as error:
            failure = Failure(error.message, subject=target.name, stage="toolchain")  # infrastructure, not a skip
            log.step("%s", failure.one_line())
            return [DraftOutcome(d.candidate, None, failure) for d in drafts]
        if toolchain.profile != DEFAULT_PROFILE:
            log.step(
                "%s: toolchain profile %s (transformers %s)",
                target.name,
                toolchain.profile,
                toolchain.versions.get("transformers"),
            )
        reused_ir = None
        if reused is not None:
            try:
                task = target_task(drafts[0].candidate.target_is_vlm)
                published = check_reused(target.path, target.revision or "", recipe.export, task, toolchain)
            except BotError as error:
                log.step("%s", error.at(subject=target.name).one_line())
                return [DraftOutcome(d.candidate, None, error) for d in drafts]
            (target.path / record.PROVENANCE_FILE).unlink()  # the new record is written by publish
            reused_ir = ReusedIr(published, reused.pinned)
        schedule = plan_schedule(drafts, recipe, scratch, target_reused=reused is not None)
        with measure(scratch) as whole:
            outcomes = _build_group(target, drafts, recipe, toolchain, scratch, schedule, reused_ir)
        total = whole.result
        assert total is not None  # set when the measured block ends
        return [_with_total(outcome, total) for outcome in outcomes]
    finally:
        if not keep_work:
            shutil.rmtree(scratch, ignore_errors=True)


def child_home(scratch: Path, name: str) -> Path:
    """The HOME, TMPDIR, XDG and HF folder of one export child of a group: its own, never shared."""
    return scratch / "homes" / name


@dataclass(frozen=True)
class Schedule:
    """How this machine runs the group (bot.plan.sizing): exports side by side only when both fit its memory."""

    parallel_exports: bool
    memory_budget_bytes: int
    estimate: str


def plan_schedule(drafts: list[DraftBuild], recipe: Recipe, scratch: Path, *, target_reused: bool = False) -> Schedule:
    """The export schedule and the memory budget of each child, from the fitted model and this machine."""
    runner = local_runner(scratch)
    estimate = estimate_build(
        sum(d.candidate.draft_bytes for d in drafts),
        drafts[0].candidate.target_bytes,
        runner,
        recipe.runners.sizing,
        target_reused=target_reused,
    )
    log.step("schedule: %s on this machine (%s memory available)", estimate.describe(), gb(runner.max_memory_bytes))
    return Schedule(estimate.parallel_exports, runner.max_memory_bytes, estimate.describe())


def _with_total(outcome: DraftOutcome, whole: StageResources) -> DraftOutcome:
    """Add the whole group build's cost (the exports, checks and validations of all its drafts) to a bundle."""
    if outcome.bundle is None:
        return outcome
    built = outcome.bundle.record
    resources = {
        **built.resources,
        "build": record.StageResources(
            seconds=round(whole.seconds, 1), peak_rss_bytes=whole.peak_rss_bytes, peak_disk_bytes=whole.peak_disk_bytes
        ),
    }
    updated = built.model_copy(update={"resources": resources})
    record.write(updated, outcome.bundle.root)
    return DraftOutcome(outcome.candidate, replace(outcome.bundle, record=updated), outcome.error)


def _build_group(
    target: Checkout,
    drafts: list[DraftBuild],
    recipe: Recipe,
    toolchain: Toolchain,
    scratch: Path,
    schedule: Schedule,
    reused: ReusedIr | None,
) -> list[DraftOutcome]:
    outcomes: dict[int, DraftOutcome] = {}
    verified: dict[int, VerifiedPair] = {}
    with log.group(f"verify {len(drafts)} draft(s) for {target.name}"):
        for index, draft in enumerate(drafts):
            try:
                verified[index] = pair = verify_pair(
                    draft.candidate, draft.checkout, target, target_is_ir=reused is not None
                )
                log.step(
                    "%s: %s draft (%s format), target %s %s",
                    draft.checkout.name,
                    pair.draft.kind,
                    draft.candidate.draft_format,
                    pair.target.model_type,
                    "VLM" if pair.target.is_vlm else "LLM",
                )
            except BotError as error:
                outcomes[index] = DraftOutcome(draft.candidate, None, error.at(subject=draft.checkout.name))
                log.step("%s", error.one_line())
    if not verified:
        return [outcomes[i] for i in range(len(drafts))]

    target_spec = next(iter(verified.values())).target
    ir_root, logs = scratch / "ir", scratch / "logs"
    task = target_task(target_spec.is_vlm)
    target_quality: _Once[QualityReport] = _Once()
    provenance: Future[TargetProvenance] = Future()
    if reused is None:
        src = safe_copy(target.path, scratch / "src" / "target", subject=target.name)
        target_request = ExportRequest("target", src, ir_root / "target", task, trust_remote_code=False)
    else:
        src = target.path  # the published IR folder: our own output, read as data and never exported again
        log.step("%s: int4 IR reused from %s (no target export, quality from its record)", target.name, reused.pinned)
        published = reused.record
        provenance.set_result(
            TargetProvenance(
                {"license": published.target.license, "license_link": published.target.license_link},
                published.export.target_int4,
                reused.pinned,
            )
        )
        target_quality.get(lambda: reused.quality())
    formats = list(recipe.export.draft_weight_formats)
    # Exports are separate processes; on two cores a third one still overlaps Python start-up and I/O, and each
    # draft's validation starts as soon as its own export (and the target's) is done.
    workers = min(3, 1 + len(verified)) if schedule.parallel_exports else 1
    with (
        ThreadPoolExecutor(max_workers=workers) as exporters,
        ThreadPoolExecutor(max_workers=len(verified)) as finishers,
        log.group(f"build {target.name} and {len(verified)} draft(s): export, inspect, validate, bundle"),
    ):

        def run_export(request: ExportRequest, quantization: list[str] | None) -> ExportResult:
            return export_model(
                request,
                recipe.export,
                log_dir=logs,
                home=child_home(scratch, request.name_or_role),
                python=toolchain.python,
                memory_budget_bytes=schedule.memory_budget_bytes,
                quantization=quantization,
            )

        def submit(request: ExportRequest, quantization: list[str] | None) -> Future[ExportResult]:
            return exporters.submit(run_export, request, quantization)

        if reused is None:

            def export_target() -> ExportResult:
                # The int4 settings are read here, in the export's own task (a table read that may fall back to
                # importing optimum-intel, seconds): the draft exports start meanwhile, and the provenance gets the
                # settings the export used.
                try:
                    int4 = target_int4(target, recipe, toolchain)
                except BaseException as error:
                    provenance.set_exception(error)
                    raise
                provenance.set_result(
                    TargetProvenance(
                        _license(src, target.repo_id), record._Open(**int4.as_provenance()) if int4 else None, None
                    )
                )
                return run_export(target_request, int4.cli_args() if int4 else None)

            target_future = exporters.submit(export_target)
        else:
            target_future = Future()
            target_future.set_result(ExportResult("target", target.path, 0.0, logs / "target.log"))
        target_report: _Once[TargetIrReport] = _Once()
        all_exports: list[Future[ExportResult]] = [target_future]
        finishing: dict[int, Future[DraftOutcome]] = {}
        for index, pair in verified.items():
            draft = drafts[index]
            draft_src = safe_copy(draft.checkout.path, scratch / "src" / f"draft-{index}", subject=draft.checkout.name)
            draft_futures: dict[str, Future[ExportResult]] = {}
            for fmt in formats:  # each weight format of the draft (the recipe's draft_weight_formats)
                request = ExportRequest(
                    "draft",
                    draft_src,
                    ir_root / f"draft-{index}-{fmt}",
                    TASK_LLM,
                    trust_remote_code=True,
                    name=f"draft-{index}-{fmt}",
                )
                draft_futures[fmt] = submit(request, weight_format_args(fmt, recipe.export))
            all_exports += draft_futures.values()
            job = _DraftJob(
                index,
                draft,
                pair,
                draft_src,
                draft_futures,
                target,
                src,
                task,
                target_future,
                target_report,
                schedule,
                target_quality,
                all_exports,
                provenance,
                reused,
            )
            finishing[index] = finishers.submit(_finish_draft, job, recipe, toolchain, scratch)
        for index, future in finishing.items():
            outcomes[index] = future.result()
    return [outcomes[i] for i in range(len(drafts))]


class _Once(Generic[T]):
    """A value computed by whichever draft needs it first (the target is inspected and measured once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: T | None = None

    def get(self, compute: Callable[[], T]) -> T:
        with self._lock:
            if self._value is None:
                self._value = compute()
            return self._value


@dataclass(frozen=True)
class ReusedIr:
    """The published target IR a build uses instead of exporting the target (`bot.plan.reuse`), and its record."""

    record: record.TargetRecord
    pinned: str  # repo@commit

    def quality(self) -> QualityReport:
        """The quality figures measured when the target was built (not measured again: same IR, same original)."""
        if self.record.quality is None:
            return QualityReport.not_measured(f"not measured when {self.pinned} was built")
        measured = QualityReport.from_dict(self.record.quality.model_dump())
        return replace(measured, seconds=None)


@dataclass(frozen=True)
class TargetProvenance:
    """What the records say about the target beyond its checkpoint: license, int4 settings, reuse."""

    license: dict[str, str | None]
    int4: record._Open | None
    reused_from: str | None


@dataclass(frozen=True)
class _DraftJob:
    index: int
    draft: DraftBuild
    pair: VerifiedPair
    draft_src: Path
    draft_exports: dict[str, Future[ExportResult]]  # weight format -> its export
    target: Checkout
    target_src: Path
    target_task: str
    target_export: Future[ExportResult]
    target_report: _Once[TargetIrReport]
    schedule: Schedule
    target_quality: _Once[QualityReport]
    all_exports: list[Future[ExportResult]]
    target_provenance: Future[TargetProvenance]  # known once the target's int4 settings are read
    reused: ReusedIr | None

    def target_sources(self) -> record.FileList:
        """The target checkpoint's files the target IR was built from (a reused IR: as its record lists them)."""
        if self.reused is not None:
            return dict(self.reused.record.source_files or {})
        return source_files(self.target.path)

    def exports_done(self) -> None:
        """Wait for every export of the group, failed ones included."""
        for future in self.all_exports:
            with contextlib.suppress(BotError):
                future.result()


def _step(stage: str, action: Callable[[], object]):
    """Run one step; an error from it names the step (`export-draft`, `inspect-target`, ...)."""
    try:
        return action()
    except BotError as error:
        error.stage = stage
        raise


@dataclass(frozen=True)
class _Measured:
    """One weight format of a draft: its export, its IR check and its validation."""

    weight_format: str
    export: ExportResult
    report: DraftIrReport
    validation: ValidationReport
    validate_seconds: float


def _finish_draft(job: _DraftJob, recipe: Recipe, toolchain: Toolchain, scratch: Path) -> DraftOutcome:
    """Inspect, measure and validate one draft once its exports and the target's are done; bundle the weight
    format that measured best."""
    name, pair = job.draft.checkout.name, job.pair
    try:
        try:
            target_export: ExportResult = _step("export-target", job.target_export.result)
        except BotError as error:
            raise error.at(subject=job.target.name) from None

        def inspect() -> TargetIrReport:
            report = inspect_target_in_child(
                target_export.ir_dir,
                pair.target,
                pair.draft,
                work=scratch / "inspect-target",
                timeout_s=recipe.validation.timeout_s,
                memory_budget_bytes=job.schedule.memory_budget_bytes,
            )
            log.step(
                "%s: %d attention layers -> %d PagedAttention ops",
                job.target.name,
                report.attention_layers,
                report.paged_attention.paged_attention_ops,
            )
            if report.linear_attention_state:
                log.step(
                    "%s: %d linear-attention layers, state %s",
                    job.target.name,
                    report.linear_attention_layers,
                    report.linear_attention_state,
                )
            return report

        target_report = _step("inspect-target", lambda: job.target_report.get(inspect))
        quality = job.target_quality.get(lambda: _target_quality(job, target_export, recipe, toolchain, scratch))
        # The validations (a build's memory peak at real sizes) start once every export is done.
        job.exports_done()
        results: list[_Measured | FailedFormat] = []
        for fmt, future in job.draft_exports.items():
            try:
                results.append(_measure_format(job, fmt, future, target_export, recipe, toolchain, scratch))
            except BotError as error:
                if len(job.draft_exports) == 1:
                    raise  # the only format: its failure is the draft's
                results.append(_failed_format(job, fmt, error, scratch, toolchain))
        measured = [r for r in results if isinstance(r, _Measured)]
        failed = [r for r in results if isinstance(r, FailedFormat)]
        if not measured:
            reasons = "; ".join(f"{f.weight_format}: {f.reason}" for f in failed)
            raise Failure(f"no weight format of the draft could be measured ({reasons})", subject=name, stage="build")
        chosen, choice = _choose(measured, failed)
        log.step("%s: %s", name, choice.reason if choice else f"{chosen.weight_format} draft")
        concurrent = None
        if chosen.report.format == "per-row":
            # Continuous batching with several requests: what the per-row format is for (skipped, with the reason,
            # while the installed GenAI lacks per-row support).
            concurrent = _step(
                "validate",
                lambda: validate_per_row_pair(
                    target_export.ir_dir,
                    chosen.export.ir_dir,
                    recipe.validation,
                    work=scratch / f"validate-concurrent-{job.index}",
                    python=toolchain.python,
                ),
            )
        validation = chosen.validation
        quality_failure = quality_gate(quality, recipe.validation.min_top1_agreement)
        target_provenance = job.target_provenance.result()  # set before the target export ran
        built = build_record(
            job,
            recipe,
            toolchain,
            chosen.report,
            target_report,
            validation,
            chosen.export.seconds,
            target_export.seconds,
            concurrent,
        )
        failed_gates = [*built.failed_gates, *([quality_failure] if quality_failure else [])]
        built = built.model_copy(
            update={
                "status": "failed" if failed_gates else built.status,
                "failed_gates": failed_gates,
                "quality": record._Open(
                    **quality.as_provenance(),
                    gate={
                        "min_top1_agreement": recipe.validation.min_top1_agreement,
                        "passed": quality_failure is None,
                    },
                ),
                "draft_formats": record._Open(**choice.as_provenance()) if choice else None,
                "export": built.export.model_copy(
                    update={
                        "draft_weight_format": chosen.weight_format,
                        "target_int4": target_provenance.int4,
                        "target_reused_from": target_provenance.reused_from,
                    }
                ),
                "resources": {
                    "export-draft": record.StageResources(
                        seconds=round(chosen.export.seconds, 1), peak_rss_bytes=chosen.export.peak_rss_bytes or None
                    ),
                    **(
                        {}
                        if target_provenance.reused_from
                        else {
                            "export-target": record.StageResources(
                                seconds=round(target_export.seconds, 1),
                                peak_rss_bytes=target_export.peak_rss_bytes or None,
                            )
                        }
                    ),
                    "validate": record.StageResources(seconds=round(chosen.validate_seconds, 1)),
                    **({"quality": record.StageResources(seconds=quality.seconds)} if quality.seconds else {}),
                },
            }
        )
        bundle = _step(
            "bundle",
            lambda: write_bundle(
                job.draft.out,
                chosen.export.ir_dir,
                target_export.ir_dir,
                job.draft_src,
                job.target_src,
                built,
                scratch,
                *_environments(toolchain),
                sources=(source_files(job.draft.checkout.path), job.target_sources()),
            ),
        )
        log.step("%s: bundle %s (%s)", name, job.draft.out, built.status)
        return DraftOutcome(
            job.draft.candidate,
            bundle,
            None
            if bundle.passed
            else Failure(
                "; ".join(failed_gates),
                subject=name,
                stage="quality" if failed_gates == [quality_failure] else "validate",
            ),
        )
    except BotError as error:
        log.step("%s", error.one_line())
        return DraftOutcome(job.draft.candidate, None, error.at(subject=name, stage="build"))


def _target_quality(
    job: _DraftJob, target_export: ExportResult, recipe: Recipe, toolchain: Toolchain, scratch: Path
) -> QualityReport:
    """The int4 target against its original weights, once per target, after every export of the group (the
    original model is never loaded beside an exporter)."""
    job.exports_done()
    try:
        report = measure_quality(
            job.target_src,
            target_export.ir_dir,
            recipe.validation.prompts,
            recipe.validation.max_new_tokens,
            work=scratch / "quality",
            python=toolchain.python,
            timeout_s=recipe.validation.timeout_s,
            memory_budget_bytes=job.schedule.memory_budget_bytes,
        )
    except BotError as error:
        report = QualityReport.not_measured(f"the measurement failed: {error.message}")
    if report.measured:
        log.step(
            "%s: quality against the original: top-1 agreement %.3f, mean KL %.4g over %d tokens",
            job.target.name,
            report.top1_agreement,
            report.mean_kl,
            report.tokens,
        )
    else:
        log.step("%s: quality not measured: %s", job.target.name, report.reason)
    return report


def _failed_format(
    job: _DraftJob, weight_format: str, error: BotError, scratch: Path, toolchain: Toolchain
) -> FailedFormat:
    """What failed for one weight format, and why, while another format stands in (recorded and on the card)."""
    reason = _public(f"{error.stage or 'build'}: {error.message}", scratch, toolchain)
    log.step("%s: %s failed, other formats go on: %s", job.draft.checkout.name, weight_format, reason)
    return FailedFormat(weight_format, reason)


def _public(text: str, scratch: Path, toolchain: Toolchain) -> str:
    """A message fit for a record and a card: this machine's work folder and environments left out."""
    for marker in local_path_markers(scratch, *_environments(toolchain)):
        text = text.replace(marker, "…")
    return text[:300]


def _measure_format(
    job: _DraftJob,
    weight_format: str,
    future: Future[ExportResult],
    target_export: ExportResult,
    recipe: Recipe,
    toolchain: Toolchain,
    scratch: Path,
) -> _Measured:
    """Inspect and validate one weight format of the draft once its export is done.

    Raises:
        BotError: its export, inspection or validation failed (named by `_step`).
    """
    name = job.draft.checkout.name
    draft_export: ExportResult = _step("export-draft", future.result)
    report: DraftIrReport = _step(
        "inspect-draft",
        lambda: inspect_draft_in_child(
            draft_export.ir_dir,
            job.pair.draft,
            work=scratch / f"inspect-{job.index}-{weight_format}",
            timeout_s=recipe.validation.timeout_s,
            memory_budget_bytes=job.schedule.memory_budget_bytes,
        ),
    )
    log.step(
        "%s: %s %s format, PagedAttention-ready: %s", name, weight_format, report.format, report.paged_attention.ready
    )
    started = time.monotonic()
    validation: ValidationReport = _step(
        "validate",
        lambda: validate_pair(
            target_export.ir_dir,
            draft_export.ir_dir,
            recipe.validation,
            work=scratch / f"validate-{job.index}-{weight_format}",
            is_vlm=job.pair.target.is_vlm,
            python=toolchain.python,
            memory_budget_bytes=job.schedule.memory_budget_bytes,
            baseline=_baseline(scratch, job.index),
        ),
    )  # plain greedy measured once for every format
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
    return _Measured(weight_format, draft_export, report, validation, time.monotonic() - started)


def _baseline(scratch: Path, index: int) -> Path | None:
    """The plain greedy baseline an earlier validation of this draft left in its own folder (read-only to the
    next one), or None for the first."""
    earlier = sorted(scratch.glob(f"validate-{index}-*/{BASELINE_FILE}"))
    return earlier[0] if earlier else None


def _choose(measured: list[_Measured], failed: list[FailedFormat]) -> tuple[_Measured, FormatChoice | None]:
    """The format to publish: the best measured speed-up among those that passed the gates (bot.build.weight_formats);
    with one format and none failed there is nothing to choose."""
    if len(measured) == 1 and not failed:
        return measured[0], None
    choice = choose_draft_format(
        [FormatResult.from_validation(m.weight_format, m.validation, m.export.ir_dir) for m in measured], failed
    )
    chosen = next((m for m in measured if m.weight_format == choice.chosen), measured[0])
    return chosen, choice


def build_record(
    job: _DraftJob,
    recipe: Recipe,
    toolchain: Toolchain,
    draft_report: DraftIrReport,
    target_report: TargetIrReport,
    validation: ValidationReport,
    draft_seconds: float,
    target_seconds: float,
    concurrent: PerRowValidation | None = None,
) -> record.BuildRecord:
    """The build's `openvino_export.json`, written whether or not the gates passed (a failed build is worth
    reading)."""
    checkout, target, pair = job.draft.checkout, job.target, job.pair
    return record.BuildRecord(
        bot_version=__version__,
        built_at=record.now(),
        status="validated" if validation.passed else "failed",
        failed_gates=validation.failed_gates(),
        draft=record.DraftInfo(
            kind=pair.draft.kind,
            format=draft_report.format,
            architecture=pair.draft.architecture,
            base_model_type=pair.draft.model_type,
        ),
        source=record.SourceRef(
            repo=checkout.repo_id, revision=checkout.revision, **_license(job.draft_src, checkout.repo_id)
        ),
        target=record.TargetRef(
            repo=target.repo_id,
            revision=target.revision,
            **job.target_provenance.result().license,
            model_type=pair.target.model_type,
            architecture=pair.target.architecture,
            is_vlm=pair.target.is_vlm,
        ),
        toolchain=record.ToolchainInfo.model_validate(
            {**toolchain.as_provenance(), "draft_format": draft_report.format}
        ),
        recipe=record.RecipeRef(name=recipe.name, fingerprint=recipe.fingerprint()),
        export=record.ExportInfo(
            **recipe.export.model_dump(exclude={"timeout_s", "draft_weight_formats"}),
            task=record.ExportTasks(draft=TASK_LLM, target=job.target_task),
            seconds=record.ExportSeconds(draft=round(draft_seconds, 1), target=round(target_seconds, 1)),
        ),
        inspect=record.Inspection(
            target=record.TargetInspect.model_validate(target_report.as_provenance()),
            draft=record.DraftInspect.model_validate(draft_report.as_provenance()),
        ),
        validation=record.Validation.model_validate(
            {**validation.as_provenance(), "concurrent": concurrent.as_provenance() if concurrent else None}
        ),
    )


def target_int4(target: Checkout, recipe: Recipe, toolchain: Toolchain) -> Int4Settings | None:
    """The target's int4 settings: optimum-intel's own default for the model id when it lists one, else the
    recipe's; data-aware options fall back to data-free (with a note) when their calibration data is out of reach.
    None when the recipe does not export int4."""
    if recipe.export.weight_format != "int4":
        return None
    settings = recommended_int4(target.repo_id, recipe.export, python=toolchain.python)
    settings = with_calibration(settings, calibration_unavailable(settings.dataset, python=toolchain.python))
    log.step(
        "%s: int4 settings from %s%s", target.name, settings.source, f" ({settings.note})" if settings.note else ""
    )
    return settings


def _environments(toolchain: Toolchain) -> list[Path]:
    """The profile environment the exports ran in, when it is not this one (its paths must not be published)."""
    return [Path(toolchain.python).parent.parent] if toolchain.python else []


def _license(folder: Path, repo_id: str | None) -> dict[str, str | None]:
    """The source card's license fields, validated by `bot.discover.source_card` (anything else is dropped)."""
    return {
        key: value if isinstance(value, str) else None for key, value in card_license(folder, repo_id=repo_id).items()
    }


def build_folders(
    draft: Checkout, target: Checkout, out: Path, recipe: Recipe, *, keep_work: bool = False
) -> DraftOutcome | BotError:
    """Classify a pair of local folders the way discovery does, then build it; a defect found before the build
    is returned as the error."""
    from bot.discover.candidates import classify_folders

    try:
        candidate = classify_folders(draft.path, target.path, recipe)
    except BotError as error:
        return error.at(subject=draft.name, stage="classify")
    (outcome,) = build_group(target, [DraftBuild(candidate, draft, out)], recipe, keep_work=keep_work)
    return outcome


def build_pair(draft: Checkout, target: Checkout, out: Path, recipe: Recipe, *, keep_work: bool = False) -> Bundle:
    """Build one pair from local folders; the `dflash-bot build --draft --target` command.

    Raises:
        BotError: the Skip or Failure that stopped the build (a bundle that failed a gate is still written).
    """
    outcome = build_folders(draft, target, out, recipe, keep_work=keep_work)
    if isinstance(outcome, BotError):
        raise outcome
    if outcome.error is not None:
        raise outcome.error
    assert outcome.bundle is not None
    return outcome.bundle
