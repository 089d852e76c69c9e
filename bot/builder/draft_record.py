"""A draft's build record (`openvino_export.json`), constructed once from what its build found, with its status
decided once and the repos its job publishes to, and written once with its bundle (`bot.builder.bundle.seal_bundle`):
the publisher commits it as written.

The record is made after the whole group is done, because it also holds the group's cost (`resources.build`); a
failed build gets a record too (a failed gate is worth reading).
"""

from __future__ import annotations

from dataclasses import replace

from bot import __version__
from bot.builder.bundle import StagedBundle, seal_bundle
from bot.builder.draft import DraftWork, MeasuredFormat
from bot.builder.draft_build import DraftBuild, GroupContext, run_step
from bot.builder.export import ExportResult
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


def seal_draft(work: DraftWork, ctx: GroupContext, group_cost: StageResources) -> DraftBuild:
    """The draft with its bundle, its record written into it; a bundle that failed a gate comes with the failure
    naming it.

    Args:
        work: the draft as `bot.builder.draft.finish_draft` left it (measured, its repo folders written).
        ctx: the group's recipe, toolchain and scratch folder.
        group_cost: what the whole group build cost (every draft's exports, checks and validations).
    """
    chosen, staged = work.chosen, work.staged
    assert chosen is not None and staged is not None  # added by finish_draft, which returned the work
    try:
        built = build_record(work, chosen, staged, ctx, group_cost)
        bundle = run_step(Stage.BUNDLE, lambda: seal_bundle(staged, built, ctx.scratch, *ctx.environments()))
    except BotError as error:
        log.step("%s", error.one_line())
        return work.draft.stopped(error, Stage.BUILD)
    log.step("%s: bundle %s (%s)", work.name, bundle.root, built.status)
    if bundle.passed:
        return replace(work.draft, bundle=bundle)
    # Only the quality gate failed when GenAI's gates passed.
    stage = Stage.QUALITY if built.validation.passed else Stage.VALIDATE
    return replace(
        work.draft, bundle=bundle, error=Failure("; ".join(built.failed_gates), subject=work.name, stage=stage)
    )


def build_record(
    work: DraftWork, chosen: MeasuredFormat, staged: StagedBundle, ctx: GroupContext, group_cost: StageResources
) -> BuildRecord:
    """The build's `openvino_export.json`: every part from the step that found it (the target's from the group's
    target, found once), the status from every gate."""
    recipe, job, target = ctx.recipe, work.draft.job, work.target
    checkout, pair = work.draft.checkout, work.pair
    official = target.official_record
    quality = target.quality()  # measured once for the group
    # The quality gate guards a target the bot publishes; an official target is used as its publisher made it.
    quality_failure = (
        None if target.official_ir is not None else quality_gate(quality, recipe.validation.min_top1_agreement)
    )
    failed_gates = [*chosen.validation.failed_gates(), *([quality_failure] if quality_failure else [])]
    quality_gate_record = {
        "min_top1_agreement": recipe.validation.min_top1_agreement,
        "passed": quality_failure is None,
    }
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
            repo=checkout.repo_id, revision=checkout.revision, **license_fields(work.src, checkout.repo_id)
        ),
        target=TargetRef(
            repo=target.checkout.repo_id,
            revision=target.checkout.revision,
            **target.facts.result().license,
            model_type=pair.target.model_type,
            architecture=pair.target.architecture,
            is_vlm=pair.target.is_vlm,
        ),
        toolchain=ToolchainInfo.of(ctx.toolchain, chosen.inspection.format),
        recipe=RecipeRef(name=recipe.name, fingerprint=recipe.fingerprint()),
        export=_export_info(work, chosen, ctx),
        inspect=Inspection(target=target.inspection(pair.draft), draft=chosen.inspection),
        validation=chosen.validation.model_copy(update={"concurrent": work.concurrent}),
        resources=_resources(work, chosen, group_cost),
        quality={**quality.model_dump(mode="json"), "gate": quality_gate_record},
        draft_formats=work.choice.as_provenance() if work.choice else None,
        files=staged.files,
        official_target=official,
        # Set here, once: the record is published as written (`bot.publish.publisher` holds it to its job's repos
        # and its own templates, and never stamps it again); a local build's job names none.
        repos=job.repos_for(chosen.weight_format, official) if job.planned else None,
        card=CardInfo(template_fingerprint=template_fingerprint()) if job.planned else None,
        approved_by=job.candidate.approved_by if job.planned else None,
    )


def _export_info(work: DraftWork, chosen: MeasuredFormat, ctx: GroupContext) -> ExportInfo:
    """The recipe's export settings as the IRs were exported, with what the target and the chosen format used."""
    facts = work.target.facts.result()
    return ExportInfo(
        **ctx.recipe.export.compression().model_dump(),
        task=ExportTasks(draft=TASK_LLM, target=work.target.task),
        seconds=ExportSeconds(
            draft=round(chosen.export.resources.seconds, 1),
            target=round(work.target.exported().resources.seconds, 1),
        ),
        target_reused_from=facts.reused_from,
        target_int4=facts.int4,
        draft_weight_format=chosen.weight_format,
    )


def _resources(work: DraftWork, chosen: MeasuredFormat, group_cost: StageResources) -> dict[str, StageResources]:
    """What each stage of this draft cost, and its group (docs/design.md §8: the sizing model is checked on these)."""
    resources = {"export-draft": _export_cost(chosen.export)}
    if work.target.exported_here:
        resources["export-target"] = _export_cost(work.target.exported())
    resources["validate"] = StageResources(seconds=round(chosen.validate_seconds, 1))
    quality = work.target.quality()
    if quality.seconds:
        resources["quality"] = StageResources(seconds=quality.seconds)
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
