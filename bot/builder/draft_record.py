"""A draft's build record (`openvino_export.json`), constructed once from what its build found, with its status
decided once and the repos its job publishes to, and written once with its bundle (`bot.builder.bundle.seal_bundle`):
the publisher commits it as written.

The record is made after the whole group is done, because it also holds the group's cost (`resources.build`); a
failed build gets a record too (a failed gate is worth reading).
"""

from __future__ import annotations

from bot import __version__
from bot.builder.bundle import seal_bundle
from bot.builder.draft import FinishedDraft
from bot.builder.export import ExportResult
from bot.builder.jobs import DraftOutcome, GroupContext, run_step
from bot.builder.quality import quality_gate
from bot.builder.target import license_fields
from bot.core import log
from bot.core.errors import BotError, Failure, Stage
from bot.core.exporter import TASK_LLM
from bot.core.fingerprints import template_fingerprint
from bot.core.record import (
    BuildRecord,
    CardInfo,
    DraftInfo,
    ExportInfo,
    ExportSeconds,
    ExportTasks,
    RecipeRef,
    SourceRef,
    StageResources,
    TargetRef,
    ToolchainInfo,
    now,
)
from bot.core.record_checks import Inspection


def sealed_outcome(finished: FinishedDraft, ctx: GroupContext, group_cost: StageResources) -> DraftOutcome:
    """The draft's record, written into its bundle; a bundle that failed a gate comes with the failure naming it.

    Args:
        finished: what the draft's build found, its repo folders written.
        ctx: the group's recipe, toolchain and scratch folder.
        group_cost: what the whole group build cost (every draft's exports, checks and validations).
    """
    job = finished.job
    try:
        built = build_record(finished, ctx, group_cost)
        bundle = run_step(Stage.BUNDLE, lambda: seal_bundle(finished.staged, built, ctx.scratch, *ctx.environments()))
    except BotError as error:
        log.step("%s", error.one_line())
        return DraftOutcome(draft=job.draft, bundle=None, error=error.at(subject=job.name, stage=Stage.BUILD))
    log.step("%s: bundle %s (%s)", job.name, bundle.root, built.status)
    if bundle.passed:
        return DraftOutcome(draft=job.draft, bundle=bundle, error=None)
    # Only the quality gate failed when GenAI's gates passed.
    stage = Stage.QUALITY if built.validation.passed else Stage.VALIDATE
    failure = Failure("; ".join(built.failed_gates), subject=job.name, stage=stage)
    return DraftOutcome(draft=job.draft, bundle=bundle, error=failure)


def build_record(finished: FinishedDraft, ctx: GroupContext, group_cost: StageResources) -> BuildRecord:
    """The build's `openvino_export.json`: every part from the step that found it, the status from every gate."""
    job, chosen, recipe = finished.job, finished.chosen, ctx.recipe
    checkout, target, pair = job.draft.checkout, job.target.checkout, job.pair
    official = job.target.official_record
    # The quality gate guards a target the bot publishes; an official target is used as its publisher made it.
    served = job.target.official_ir is not None
    quality_failure = None if served else quality_gate(finished.quality, recipe.validation.min_top1_agreement)
    failed_gates = [*chosen.validation.failed_gates(), *([quality_failure] if quality_failure else [])]
    quality_gate_record = {
        "min_top1_agreement": recipe.validation.min_top1_agreement,
        "passed": quality_failure is None,
    }
    planned = job.draft.job  # None: local folders, never published
    return BuildRecord(
        bot_version=__version__,
        built_at=now(),
        status="failed" if failed_gates else "validated",
        failed_gates=failed_gates,
        draft=DraftInfo(
            kind=pair.draft.kind,
            format=chosen.inspection.format,
            architecture=pair.draft.architecture,
            base_model_type=pair.draft.model_type,
        ),
        source=SourceRef(
            repo=checkout.repo_id, revision=checkout.revision, **license_fields(job.src, checkout.repo_id)
        ),
        target=TargetRef(
            repo=target.repo_id,
            revision=target.revision,
            **finished.target_facts.license,
            model_type=pair.target.model_type,
            architecture=pair.target.architecture,
            is_vlm=pair.target.is_vlm,
        ),
        toolchain=ToolchainInfo.of(ctx.toolchain, chosen.inspection.format),
        recipe=RecipeRef(name=recipe.name, fingerprint=recipe.fingerprint()),
        export=_export_info(finished, ctx),
        inspect=Inspection(target=finished.target_inspection, draft=chosen.inspection),
        validation=chosen.validation.model_copy(update={"concurrent": finished.concurrent}),
        resources=_resources(finished, group_cost),
        quality={**finished.quality.model_dump(mode="json"), "gate": quality_gate_record},
        draft_formats=finished.choice.as_provenance() if finished.choice else None,
        files=finished.staged.files,
        official_target=official,
        # Set here, once: the record is published as written (`bot.publish.publisher` holds it to its job's repos
        # and its own templates, and never stamps it again).
        repos=planned.repos_for(chosen.weight_format, official) if planned is not None else None,
        card=CardInfo(template_fingerprint=template_fingerprint()) if planned is not None else None,
        approved_by=planned.candidate.approved_by if planned is not None else None,
    )


def _export_info(finished: FinishedDraft, ctx: GroupContext) -> ExportInfo:
    """The recipe's export settings as the IRs were exported, with what the target and the chosen format used."""
    facts = finished.target_facts
    return ExportInfo(
        **ctx.recipe.export.compression().model_dump(),
        task=ExportTasks(draft=TASK_LLM, target=finished.job.target.task),
        seconds=ExportSeconds(
            draft=round(finished.chosen.export.resources.seconds, 1),
            target=round(finished.target_export.resources.seconds, 1),
        ),
        target_reused_from=facts.reused_from,
        target_int4=facts.int4,
        draft_weight_format=finished.chosen.weight_format,
    )


def _resources(finished: FinishedDraft, group_cost: StageResources) -> dict[str, StageResources]:
    """What each stage of this draft cost, and its group (docs/design.md §8: the sizing model is checked on these)."""
    draft_export, target_export = finished.chosen.export, finished.target_export
    resources = {"export-draft": _export_cost(draft_export)}
    if finished.job.target.exported_here:
        resources["export-target"] = _export_cost(target_export)
    resources["validate"] = StageResources(seconds=round(finished.chosen.validate_seconds, 1))
    if finished.quality.seconds:
        resources["quality"] = StageResources(seconds=finished.quality.seconds)
    resources["build"] = group_cost.model_copy(update={"seconds": round(group_cost.seconds, 1)})
    return resources


def _export_cost(export: ExportResult) -> StageResources:
    """An export's time and its process tree's memory peaks (0: not measured, left out)."""
    cost = export.resources
    return StageResources(
        seconds=round(cost.seconds, 1),
        peak_rss_bytes=cost.peak_rss_bytes or None,
        peak_anon_bytes=cost.peak_anon_bytes or None,
        peak_file_bytes=cost.peak_file_bytes or None,
    )
