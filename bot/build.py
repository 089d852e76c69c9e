"""The build stage for checkpoints on disk: classify → fetch → export → inspect → validate → bundle.

One target export serves every draft that drafts for it; the target and draft exports run side by side, and each
draft's validation starts as soon as its export is done. Each draft's outcome is independent: one broken draft
never stops its siblings.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bot import log
from bot.bundle import (
    Bundle,
    assert_no_local_paths,
    base_provenance,
    write_draft_folder,
    write_provenance,
    write_target_folder,
)
from bot.check_ir import TargetIrReport, inspect_draft, inspect_target
from bot.checkpoints import (
    DraftSpec,
    TargetSpec,
    check_weights,
    classify_draft,
    cross_check,
    load_config,
    read_target,
    require_exportable,
)
from bot.errors import BotError, Failure, Skip
from bot.export import TASK_LLM, TASK_VLM, ExportRequest, ExportResult, export_model
from bot.fetch import safe_copy
from bot.profiles import DEFAULT_PROFILE, check_transformers, toolchain_for
from bot.recipe import Recipe
from bot.source_card import card_license
from bot.toolchain import Toolchain
from bot.validate import validate_pair


@dataclass(frozen=True)
class SourceRef:
    """A checkpoint on disk and, when it came from the Hub, where from."""

    path: Path
    repo_id: str | None = None
    revision: str | None = None

    @property
    def name(self) -> str:
        return self.repo_id or self.path.name

    def as_provenance(self) -> dict:
        return {"repo": self.repo_id, "revision": self.revision}


@dataclass(frozen=True)
class ClassifiedPair:
    draft: DraftSpec
    target: TargetSpec
    draft_format: str
    weight_bytes: int


@dataclass(frozen=True)
class DraftOutcome:
    """What happened to one draft: a bundle (passed or failed its gates) or the error that stopped it."""

    draft: SourceRef
    bundle: Bundle | None
    error: BotError | None

    @property
    def ok(self) -> bool:
        return self.bundle is not None and self.bundle.passed and self.error is None


def classify_pair(draft: SourceRef, target: SourceRef, recipe: Recipe, toolchain: Toolchain) -> ClassifiedPair:
    """Everything that can be known before an export (DESIGN §4).

    Raises:
        Skip: naming the first defect of the draft, the target or the pair.
    """
    draft_config = load_config(draft.path, subject=draft.name)
    draft_spec = classify_draft(draft_config, subject=draft.name)
    draft_format = require_exportable(draft_spec, toolchain, subject=draft.name)
    target_spec = read_target(load_config(target.path, subject=target.name), subject=target.name)
    # optimum-intel gates model types by a transformers range pip does not enforce: a mismatch is a skip naming
    # the range, found here rather than as an ImportError deep inside the export.
    check_transformers(target_spec.model_type, toolchain.versions.get("transformers", "not installed"),
                       profile=toolchain.profile, subject=target.name)
    cross_check(draft_spec, target_spec, subject=draft.name, target_name=target.name)
    weight_bytes = check_weights(draft.path, subject=draft.name) + check_weights(target.path, subject=target.name)
    if weight_bytes > recipe.watch.max_checkpoint_bytes:
        raise Skip(f"draft + target weights are {weight_bytes} bytes, over the recipe's max_checkpoint_bytes "
                   f"{recipe.watch.max_checkpoint_bytes}", subject=draft.name, stage="classify")
    return ClassifiedPair(draft_spec, target_spec, draft_format, weight_bytes)


def build_group(target: SourceRef, drafts: list[tuple[SourceRef, Path]], recipe: Recipe, *,
                work: Path | None = None, keep_work: bool = False) -> list[DraftOutcome]:
    """Build every draft of one target into its own bundle folder, exporting the target once.

    Args:
        target: the target checkpoint shared by all drafts.
        drafts: (draft checkpoint, bundle output folder) pairs.
        recipe: export and validation settings.
        work: scratch folder (a fresh temporary one by default); removed on every exit unless `keep_work`.
    """
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-", dir=work))
    try:
        try:
            # The target's family picks the toolchain profile (its environment is created on first use).
            toolchain = toolchain_for(_model_type(target))
        except BotError as error:
            log.step("%s", error.one_line())
            return [DraftOutcome(draft, None, error.at(subject=target.name, stage="toolchain")) for draft, _ in drafts]
        if toolchain.profile != DEFAULT_PROFILE:
            log.step("%s: toolchain profile %s (transformers %s)", target.name, toolchain.profile,
                     toolchain.versions.get("transformers"))
        return _build_group(target, drafts, recipe, toolchain, scratch)
    finally:
        if not keep_work:
            shutil.rmtree(scratch, ignore_errors=True)


def _model_type(target: SourceRef) -> str | None:
    """The target's model_type, or None when its config is unreadable (classification reports why)."""
    try:
        return str(load_config(target.path, subject=target.name).get("model_type") or "") or None
    except BotError:
        return None


def _build_group(target: SourceRef, drafts: list[tuple[SourceRef, Path]], recipe: Recipe, toolchain: Toolchain,
                 scratch: Path) -> list[DraftOutcome]:
    outcomes: dict[int, DraftOutcome] = {}
    classified: dict[int, ClassifiedPair] = {}
    with log.group(f"classify {len(drafts)} draft(s) for {target.name}"):
        for index, (draft, _) in enumerate(drafts):
            try:
                classified[index] = classify_pair(draft, target, recipe, toolchain)
                pair = classified[index]
                log.step("%s: %s draft (%s format), target %s %s", draft.name, pair.draft.kind, pair.draft_format,
                         pair.target.model_type, "VLM" if pair.target.is_vlm else "LLM")
            except BotError as error:
                outcomes[index] = DraftOutcome(draft, None, error.at(subject=draft.name, stage="classify"))
                log.step("%s", error.one_line())
    if not classified:
        return [outcomes[i] for i in range(len(drafts))]

    target_spec = next(iter(classified.values())).target
    src = safe_copy(target.path, scratch / "src" / "target", subject=target.name)
    ir_root, logs = scratch / "ir", scratch / "logs"
    target_request = ExportRequest("target", src, ir_root / "target", TASK_VLM if target_spec.is_vlm else TASK_LLM,
                                   trust_remote_code=False)
    # Exports are separate processes; on two cores a third one still overlaps Python start-up and I/O, and each
    # draft's validation starts as soon as its own export (and the target's) is done.
    with ThreadPoolExecutor(max_workers=min(3, 1 + len(classified))) as exporters, \
            ThreadPoolExecutor(max_workers=len(classified)) as finishers, \
            log.group(f"build {target.name} and {len(classified)} draft(s): export, inspect, validate, bundle"):
        target_future = exporters.submit(export_model, target_request, recipe.export, log_dir=logs,
                                         home=scratch / "hf", python=toolchain.python)
        target_report = _Once()
        finishing: dict[int, Future[DraftOutcome]] = {}
        for index, pair in classified.items():
            draft, out = drafts[index]
            draft_src = safe_copy(draft.path, scratch / "src" / f"draft-{index}", subject=draft.name)
            request = ExportRequest(f"draft-{index}", draft_src, ir_root / f"draft-{index}", TASK_LLM,
                                    trust_remote_code=True)
            draft_future = exporters.submit(export_model, request, recipe.export, log_dir=logs, home=scratch / "hf",
                                            python=toolchain.python)
            job = _DraftJob(index, draft, out, pair, draft_src, draft_future, target, src, target_request.task,
                            target_future, target_report)
            finishing[index] = finishers.submit(_finish_draft, job, recipe, toolchain, scratch)
        for index, future in finishing.items():
            outcomes[index] = future.result()
    return [outcomes[i] for i in range(len(drafts))]


class _Once:
    """The target IR report, computed by whichever draft needs it first (the target is inspected once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: TargetIrReport | None = None

    def get(self, compute) -> TargetIrReport:
        with self._lock:
            if self._value is None:
                self._value = compute()
            return self._value


@dataclass(frozen=True)
class _DraftJob:
    index: int
    draft: SourceRef
    out: Path
    pair: ClassifiedPair
    draft_src: Path
    draft_export: Future
    target: SourceRef
    target_src: Path
    target_task: str
    target_export: Future
    target_report: _Once


def _finish_draft(job: _DraftJob, recipe: Recipe, toolchain: Toolchain, scratch: Path) -> DraftOutcome:
    """Inspect, validate and bundle one draft once its export and the target's are done."""
    draft, pair = job.draft, job.pair
    try:
        try:
            target_export: ExportResult = job.target_export.result()
        except BotError as error:
            raise error.at(subject=job.target.name, stage="export") from None
        draft_export: ExportResult = job.draft_export.result()
        log.step("%s: exported in %.1fs (target %.1fs)", draft.name, draft_export.seconds, target_export.seconds)

        def inspect() -> TargetIrReport:
            report = inspect_target(target_export.ir_dir, pair.target, pair.draft)
            log.step("%s: %d attention layers -> %d PagedAttention ops", job.target.name, report.attention_layers,
                     report.paged_attention.paged_attention_ops)
            if report.linear_attention_state:
                log.step("%s: %d linear-attention layers, state %s", job.target.name, report.linear_attention_layers,
                         report.linear_attention_state)
            return report

        target_report = job.target_report.get(inspect)
        draft_report = inspect_draft(draft_export.ir_dir, pair.draft)
        log.step("%s: %s format, PagedAttention-ready: %s", draft.name, draft_report.format,
                 draft_report.paged_attention.ready)
        validation = validate_pair(target_export.ir_dir, draft_export.ir_dir, recipe.validation,
                                   work=scratch / f"validate-{job.index}", is_vlm=pair.target.is_vlm,
                                   python=toolchain.python)
        for run in validation.runs:
            log.step("%s: k=%-2d accept length %.2f  %.1f tok/s (plain %.1f, x%.2f)", draft.name,
                     run.num_assistant_tokens, run.accept_length, run.tokens_per_s, run.baseline_tokens_per_s,
                     run.speedup)
        log.step("%s: lossless %s; accept length %.2f (minimum %.2f)", draft.name, validation.lossless,
                 validation.accept_length, validation.min_accept_length)
        provenance = {
            **base_provenance(),
            "status": "validated" if validation.passed else "failed",
            "failed_gates": validation.failed_gates(),
            "draft": {"kind": pair.draft.kind, "format": draft_report.format,
                      "architecture": pair.draft.architecture, "base_model_type": pair.draft.model_type},
            "source": {**draft.as_provenance(), **card_license(job.draft_src, repo_id=draft.repo_id)},
            "target": {**job.target.as_provenance(), **card_license(job.target_src, repo_id=job.target.repo_id),
                       "model_type": pair.target.model_type, "architecture": pair.target.architecture,
                       "is_vlm": pair.target.is_vlm},
            "toolchain": {**toolchain.as_provenance(), "draft_format": draft_report.format},
            "recipe": {"name": recipe.name, "fingerprint": recipe.fingerprint()},
            "recipe_fingerprint": recipe.fingerprint(),
            "export": {**recipe.export.model_dump(exclude={"timeout_s"}),
                       "task": {"draft": TASK_LLM, "target": job.target_task},
                       "seconds": {"draft": round(draft_export.seconds, 1),
                                   "target": round(target_export.seconds, 1)}},
            "inspect": {"target": target_report.as_provenance(), "draft": draft_report.as_provenance()},
            "validation": validation.as_provenance(),
        }
        bundle = _write_bundle(job.out, draft_export.ir_dir, target_export.ir_dir, job.draft_src / "config.json",
                               provenance, scratch, target_source=job.target_src)
        log.step("%s: bundle %s (%s)", draft.name, job.out, provenance["status"])
        return DraftOutcome(draft, bundle, None if bundle.passed else Failure(
            "; ".join(validation.failed_gates()), subject=draft.name, stage="validate"))
    except BotError as error:
        log.step("%s", error.one_line())
        return DraftOutcome(draft, None, error.at(subject=draft.name, stage="build"))


def _write_bundle(out: Path, draft_ir: Path, target_ir: Path, draft_config: Path, provenance: dict,
                  scratch: Path, target_source: Path | None = None) -> Bundle:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    draft_dir = write_draft_folder(draft_ir, draft_config, out / "draft")
    target_dir = write_target_folder(target_ir, out / "target", target_source)
    write_provenance(out, provenance)
    assert_no_local_paths(out, scratch)
    return Bundle(root=out, draft_dir=draft_dir, target_dir=target_dir, provenance=provenance)


def build_pair(draft: SourceRef, target: SourceRef, out: Path, recipe: Recipe, *,
               keep_work: bool = False) -> Bundle:
    """Build one pair; the `dflash-bot build` command.

    Raises:
        BotError: the Skip or Failure that stopped the build (a bundle that failed a gate is still written).
    """
    (outcome,) = build_group(target, [(draft, out)], recipe, keep_work=keep_work)
    if outcome.error is not None:
        raise outcome.error
    assert outcome.bundle is not None
    return outcome.bundle
