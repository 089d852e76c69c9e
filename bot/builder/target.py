"""The group's target: exported once (or its published IR reused, or an official IR used as it is), inspected once, and
measured against its original weights once; every draft of the group reads the same results through one
`GroupTarget`."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from bot.builder.bundle import TARGET_CONFIGS, source_files
from bot.builder.draft_build import Checkout, GroupContext, run_step
from bot.builder.export import ExportRequest, ExportResult
from bot.builder.inspect_child import inspect_target_in_child
from bot.builder.official_target import OfficialCheck, OfficialIr
from bot.builder.quality import QualityReport, measure_quality
from bot.builder.quantization import Int4Settings, calibration_unavailable, recommended_int4, with_calibration
from bot.core import log
from bot.core.errors import BotError, Stage
from bot.core.exporter import target_task
from bot.core.hashes import hash_file
from bot.core.recipe import Recipe
from bot.core.record import FileList, OfficialTarget, TargetRecord
from bot.core.record_checks import TargetInspect
from bot.core.toolchain import Toolchain
from bot.discover.checkpoints import DraftSpec, TargetSpec
from bot.discover.fetch import safe_copy
from bot.discover.source_card import card_license

T = TypeVar("T")

# The files a target export copies from its source (byte for byte, or re-saved with local junk such as `is_local`):
# the tokenizer and the chat template. The bundle takes them from the builder's working copy as read before any child
# ran (`source_snapshot`), never from the export folder: a child without file confinement (no Landlock) could rewrite
# the output, its TMPDIR or the working copy itself (issue 29).
_NOT_TOKENIZER_FILES = frozenset(
    {"config.json", "generation_config.json", "openvino_config.json"}
    | {name for name in TARGET_CONFIGS if "processor_config" in name}
)
SOURCE_TOKENIZER_FILES = tuple(name for name in TARGET_CONFIGS if name not in _NOT_TOKENIZER_FILES)
IR_SUFFIXES = (".xml", ".bin")


def source_snapshot(src: Path) -> dict[str, bytes]:
    """The tokenizer files and chat template of the target's working copy (`SOURCE_TOKENIZER_FILES`), read now.

    A source that keeps its template in `tokenizer_config.json` (the export writes it out as `chat_template.jinja`)
    gets that text as its `chat_template.jinja`.
    """
    snapshot = {
        name: (src / name).read_bytes()
        for name in SOURCE_TOKENIZER_FILES
        if (src / name).is_file() and not (src / name).is_symlink()
    }
    if "chat_template.jinja" not in snapshot and "tokenizer_config.json" in snapshot:
        with contextlib.suppress(ValueError, AttributeError):
            template = json.loads(snapshot["tokenizer_config.json"]).get("chat_template")
            if isinstance(template, str):
                snapshot["chat_template.jinja"] = template.encode("utf-8")
    return snapshot


def ir_digests(ir_dir: Path) -> dict[str, str]:
    """The sha256 of every IR file (`.xml`, `.bin`) of an export folder: taken before the IR is inspected or
    validated, held against what is bundled (`bot.builder.bundle.check_validated`)."""
    return {
        path.name: hash_file(path).file.sha256
        for path in sorted(ir_dir.iterdir())
        if path.suffix in IR_SUFFIXES and path.is_file() and not path.is_symlink()
    }


class Once(Generic[T]):
    """A value computed by whichever draft needs it first (the target is inspected and measured once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: T | None = None

    def get(self, compute: Callable[[], T]) -> T:
        with self._lock:
            if self._value is None:
                self._value = compute()
            return self._value


@dataclass(frozen=True, kw_only=True)
class TargetFacts:
    """What the records say about the target beyond its checkpoint: its license, its int4 settings, its reuse."""

    license: dict[str, str | None]
    int4: dict | None  # the settings the target was exported with (`Int4Settings.as_provenance`)
    reused_from: str | None  # the published target repo@commit whose IR was reused


@dataclass(frozen=True)
class ReusedIr:
    """The published target IR a build uses instead of exporting the target (`bot.plan.reuse`), and its record."""

    record: TargetRecord
    pinned: str  # repo@commit

    def quality(self) -> QualityReport:
        """The quality figures measured when the target was built (not measured again: same IR, same original)."""
        if self.record.quality is None:
            return QualityReport.not_measured(f"not measured when {self.pinned} was built")
        measured = QualityReport.from_record(self.record.quality.model_dump())
        return measured.model_copy(update={"seconds": None})

    def facts(self) -> TargetFacts:
        published = self.record
        int4 = published.export.target_int4
        return TargetFacts(
            license={"license": published.target.license, "license_link": published.target.license_link},
            int4=int4.model_dump() if int4 is not None else None,
            reused_from=self.pinned,
        )


class GroupTarget:
    """The target of one group, shared by the threads that finish its drafts: each result is computed once.

    `export` and `facts` are futures: the drafts' exports start while the target's runs. `all_exports` holds every
    export of the group (the target's first), so a step that needs the machine to itself can wait for them.
    `official` is the group's official target as the builder checked it (`bot.builder.official_target`): when it serves,
    it is the target IR (checked already, not measured against the original weights); when refused, its record
    goes into each draft's record with the reason.
    """

    def __init__(
        self,
        *,
        checkout: Checkout,
        spec: TargetSpec,
        src: Path,
        reused: ReusedIr | None,
        ctx: GroupContext,
        export: Future[ExportResult],
        facts: Future[TargetFacts],
        official: OfficialCheck | None = None,
        from_source: dict[str, bytes] | None = None,
    ) -> None:
        self.checkout, self.spec, self.src, self.reused, self._ctx = checkout, spec, src, reused, ctx
        self.official = official
        # an exported target: its tokenizer files and chat template as read before any child ran (`source_snapshot`)
        self.from_source = from_source
        self.task = target_task(spec.is_vlm)
        self.export, self.facts = export, facts
        self.all_exports: list[Future[ExportResult]] = [export]
        self._inspection: Once[TargetInspect] = Once()
        self._quality: Once[QualityReport] = Once()
        self._validated: Once[dict[str, str]] = Once()

    @property
    def name(self) -> str:
        return self.checkout.name

    @property
    def official_ir(self) -> OfficialIr | None:
        """The official target IR the group is validated against (None: the target is exported or reused)."""
        return self.official.ir if self.official is not None else None

    @property
    def official_record(self) -> OfficialTarget | None:
        """The official target the build tried, used or not (None: none was pinned)."""
        return self.official.record if self.official is not None else None

    @property
    def exported_here(self) -> bool:
        """Whether this build exports the target (neither a reused nor an official IR)."""
        return self.reused is None and self.official_ir is None

    def exported(self) -> ExportResult:
        """The target's export, once done.

        Raises:
            BotError: the export failed (stage `export-target`, subject the target).
        """
        try:
            result = run_step(Stage.EXPORT_TARGET, self.export.result)
        except BotError as error:
            raise error.at(subject=self.name) from None
        self.validated_ir()  # hashed before the first check reads it
        return result

    def validated_ir(self) -> dict[str, str]:
        """The sha256 of the target IR's files, taken once its export is done and before it is inspected or
        validated (an official IR is not bundled: nothing to hold)."""
        if self.official_ir is not None:
            return {}
        return self._validated.get(lambda: ir_digests(self.export.result().ir_dir))

    def inspection(self, draft: DraftSpec) -> TargetInspect:
        """The target IR's check, run once, for the first draft that asks (its hidden-state taps are checked).

        Raises:
            BotError: the check failed (stage `inspect-target`).
        """
        return run_step(Stage.INSPECT_TARGET, lambda: self._inspection.get(lambda: self._inspect(draft)))

    def quality(self) -> QualityReport:
        """The int4 target against its original weights, measured once (a reused IR: its record's figures)."""
        return self._quality.get(self._measure_quality)

    def exports_done(self) -> None:
        """Wait for every export of the group, failed ones included."""
        for future in self.all_exports:
            with contextlib.suppress(BotError):
                future.result()

    def sources(self) -> FileList:
        """The target checkpoint's files the target IR was built from (a reused IR: as its record lists them)."""
        if self.reused is not None:
            return dict(self.reused.record.source_files or {})
        if self.official_ir is not None:
            return dict(self.official_ir.sources)
        return source_files(self.checkout.path)

    def _inspect(self, draft: DraftSpec) -> TargetInspect:
        if self.official_ir is not None:
            return self.official_ir.inspection  # checked with every draft's taps before the group started
        report = inspect_target_in_child(
            self.export.result().ir_dir,
            self.spec,
            draft,
            work=self._ctx.scratch / "inspect-target",
            timeout_s=self._ctx.recipe.validation.timeout_s,
            memory_budget_bytes=self._ctx.schedule.memory_budget_bytes,
            layers=self._ctx.schedule.sandbox_layers,
        )
        log.step(
            "%s: %d attention layers -> %d PagedAttention ops",
            self.name,
            report.attention_layers,
            report.paged_attention_ops,
        )
        if report.linear_attention_state:
            log.step(
                "%s: %d linear-attention layers, state %s",
                self.name,
                report.linear_attention_layers,
                report.linear_attention_state,
            )
        return report

    def _measure_quality(self) -> QualityReport:
        """After every export of the group: the original model is never loaded beside an exporter."""
        if self.reused is not None:
            return self.reused.quality()
        if self.official_ir is not None:
            return QualityReport.not_measured(
                f"the official target {self.official_ir.short} is used as published; the bot did not export it"
            )
        self.exports_done()
        validation = self._ctx.recipe.validation
        try:
            report = measure_quality(
                self.src,
                self.exported().ir_dir,
                validation.prompts,
                validation.max_new_tokens,
                work=self._ctx.scratch / "quality",
                python=self._ctx.toolchain.python,
                timeout_s=validation.timeout_s,
                memory_budget_bytes=self._ctx.schedule.memory_budget_bytes,
                layers=self._ctx.schedule.sandbox_layers,
            )
        except BotError as error:
            report = QualityReport.not_measured(f"the measurement failed: {error.message}")
        if report.measured:
            log.step(
                "%s: quality against the original: top-1 agreement %.3f, mean KL %.4g over %d tokens",
                self.name,
                report.top1_agreement,
                report.mean_kl,
                report.tokens,
            )
        else:
            log.step("%s: quality not measured: %s", self.name, report.reason)
        return report


def start_target(
    checkout: Checkout,
    spec: TargetSpec,
    reused: ReusedIr | None,
    ctx: GroupContext,
    exporters: ThreadPoolExecutor,
    official: OfficialCheck | None = None,
) -> GroupTarget:
    """Copy the target checkpoint and submit its export, or take the reused or official IR as exported.

    Raises:
        BotError: the working copy could not be made (`bot.discover.fetch.safe_copy`).
    """
    facts: Future[TargetFacts] = Future()
    if official is not None and official.ir is not None:
        return _official_target(checkout, spec, official, ctx)
    if reused is not None:
        # the published IR folder: our own output, read as data and never exported again
        log.step("%s: int4 IR reused from %s (no target export, quality from its record)", checkout.name, reused.pinned)
        facts.set_result(reused.facts())
        export: Future[ExportResult] = Future()
        export.set_result(ExportResult(role="target", ir_dir=checkout.path, log=ctx.scratch / "logs" / "target.log"))
        return GroupTarget(
            checkout=checkout, spec=spec, src=checkout.path, reused=reused, ctx=ctx, export=export, facts=facts
        )
    src = safe_copy(checkout.path, ctx.scratch / "src" / "target", subject=checkout.name)
    from_source = source_snapshot(src)  # before any child of the group runs
    request = ExportRequest(
        role="target",
        source=src,
        output=ctx.scratch / "ir" / "target",
        task=target_task(spec.is_vlm),
        trust_remote_code=False,
    )
    export = exporters.submit(_export_target, request, checkout, ctx, facts)
    return GroupTarget(
        checkout=checkout,
        spec=spec,
        src=src,
        reused=None,
        ctx=ctx,
        export=export,
        facts=facts,
        official=official,
        from_source=from_source,
    )


def _official_target(checkout: Checkout, spec: TargetSpec, official: OfficialCheck, ctx: GroupContext) -> GroupTarget:
    """The official IR folder as the group's target: untrusted input, read only by the sandboxed children."""
    assert official.ir is not None
    log.step("%s: the official target %s is the target IR (no target export)", checkout.name, official.ir.short)
    facts: Future[TargetFacts] = Future()
    facts.set_result(TargetFacts(license=dict(official.ir.license), int4=None, reused_from=None))
    export: Future[ExportResult] = Future()
    export.set_result(ExportResult(role="target", ir_dir=official.ir.path, log=ctx.scratch / "logs" / "target.log"))
    return GroupTarget(
        checkout=checkout,
        spec=spec,
        src=official.ir.path,
        reused=None,
        ctx=ctx,
        export=export,
        facts=facts,
        official=official,
    )


def _export_target(
    request: ExportRequest, checkout: Checkout, ctx: GroupContext, facts: Future[TargetFacts]
) -> ExportResult:
    """The int4 settings are read here, in the export's own task (a table read that may fall back to importing
    optimum-intel, seconds): the draft exports start meanwhile, and the record gets the settings the export used."""
    try:
        int4 = target_int4(checkout, ctx.recipe, ctx.toolchain)
    except BaseException as error:
        facts.set_exception(error)
        raise
    facts.set_result(
        TargetFacts(
            license=license_fields(request.source, checkout.repo_id),
            int4=int4.as_provenance() if int4 else None,
            reused_from=None,
        )
    )
    return ctx.export(request, int4.cli_args() if int4 else None)


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


def license_fields(folder: Path, repo_id: str | None) -> dict[str, str | None]:
    """The source card's license fields, validated by `bot.discover.source_card` (anything else is dropped)."""
    return {
        key: value if isinstance(value, str) else None for key, value in card_license(folder, repo_id=repo_id).items()
    }
