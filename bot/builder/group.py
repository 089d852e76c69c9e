"""The build stage: verify → export → inspect → validate → bundle, for one target and the drafts of it.

Discovery already classified and cross-checked every pair from the Hub's metadata
(`bot.discover.candidates.Candidate`); the build only verifies that the downloaded files are what discovery saw, then
does the heavy work. One target export serves every draft of it (`bot.builder.target`); the target and draft exports
run side by side, and each draft is finished in its own thread as soon as the exports are done (`bot.builder.draft`).
Each draft's outcome is independent: one broken draft never stops its siblings. Once the whole group is done, each
draft's record is constructed and written into its bundle, once (`bot.builder.draft_record`).

One draft is one `bot.builder.draft_build.DraftBuild` (the plan's `BuildJob`, its files, its bundle folder) from the
call to the result, each step adding what it found: while its threads run it is held in a
`bot.builder.draft.DraftWork` (its exports and the group's target), and it ends with its bundle or the error that
stopped it.

This module is the entry point (`build_group`, and `build_folders` / `build_pair` for local folders) and schedules
the exports.
"""

from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from bot.builder.bundle import Bundle
from bot.builder.draft import DraftWork, finish_draft
from bot.builder.draft_build import Checkout, DraftBuild, GroupContext, Schedule, VerifiedPair, child_home
from bot.builder.draft_record import seal_draft
from bot.builder.export import ExportRequest, ExportResult
from bot.builder.official_target import OfficialCheck
from bot.builder.quantization import weight_format_args
from bot.builder.target import GroupTarget, ReusedIr, start_target
from bot.core import log
from bot.core.errors import BotError, Failure, InfrastructureFailure, Stage
from bot.core.exporter import TASK_LLM, target_task
from bot.core.profiles import DEFAULT_PROFILE, toolchain_for
from bot.core.recipe import Recipe
from bot.core.record import PROVENANCE_FILE
from bot.core.runners import RunnerClass
from bot.core.settings import Settings
from bot.core.toolchain import Toolchain
from bot.discover.candidates import Candidate, classify_folders
from bot.discover.checkpoints import classify_draft, load_config, read_target
from bot.discover.fetch import safe_copy
from bot.discover.weights import check_weights
from bot.plan.job import BuildJob
from bot.plan.reuse import ReusedTarget, check_reused
from bot.plan.sizing import BuildEstimate, BuildTime, estimate_for, gb, local_runner, pair_of
from bot.sandbox.confinement import Confinement, confinement
from bot.sandbox.resources import measure

# The records callers hand in and get back are defined in bot.builder.draft_build; they are part of this entry point.
__all__ = [
    "Checkout",
    "DraftBuild",
    "build_folders",
    "build_group",
    "build_pair",
    "child_home",
    "estimate_group",
    "plan_schedule",
    "verify_pair",
]


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
            stage=Stage.VERIFY,
        )
    return VerifiedPair(draft=draft_spec, target=target_spec)


def build_group(
    target: Checkout,
    drafts: list[DraftBuild],
    recipe: Recipe,
    *,
    work: Path | None = None,
    keep_work: bool = False,
    toolchain: Toolchain | None = None,
    reused: ReusedTarget | None = None,
    settings: Settings | None = None,
    estimate: BuildEstimate | None = None,
    official: OfficialCheck | None = None,
) -> list[DraftBuild]:
    """Build every draft of one target into its own bundle folder, exporting the target once.

    Args:
        target: the target checkpoint shared by all drafts (with `reused`: the published target's IR folder).
        drafts: the drafts, each with its job (the plan's, or `BuildJob.local`) and its bundle folder.
        recipe: export and validation settings.
        work: scratch folder (a fresh temporary one by default); removed on every exit unless `keep_work`.
        toolchain: the toolchain to build with (default: the target family's profile; `toolchain check` passes a
            candidate environment's).
        reused: the published target IR to build against instead of exporting the target (`bot.plan.reuse`).
        settings: where profile environments live and which OS confinement the children get (the CLI's;
            default: `Settings()`, every layer).
        estimate: the group's estimate on this machine when the caller already made it for its disk check
            (`bot.run.pipeline`); made here otherwise.
        official: the group's official target as checked (`bot.builder.official_target.check_official`): when it serves,
            `target` is its IR folder and no target is exported; either way the drafts' records name it.

    Returns:
        Each draft, in the order given, with its bundle (which may have failed a gate) or the error.
    """
    settings = settings or Settings()
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-", dir=work))
    try:
        try:
            toolchain = toolchain or _profile_toolchain(target, drafts[0].job.candidate.target_model_type, settings)
            reused_ir = _reused_ir(target, drafts[0], recipe, toolchain, reused) if reused else None
        except BotError as error:
            log.step("%s", error.one_line())
            return [replace(d, error=error) for d in drafts]
        served = official is not None and official.ir is not None  # an official IR: no target export either
        schedule = plan_schedule(
            drafts, recipe, scratch, target_reused=reused is not None or served, settings=settings, estimate=estimate
        )
        ctx = GroupContext(recipe=recipe, toolchain=toolchain, scratch=scratch, schedule=schedule)
        with measure(scratch) as whole:
            results = _build_drafts(target, drafts, ctx, reused_ir, official)
        group_cost = whole.result
        assert group_cost is not None  # set when the measured block ends
        return [r if isinstance(r, DraftBuild) else seal_draft(r, ctx, group_cost) for r in results]
    finally:
        if not keep_work:
            shutil.rmtree(scratch, ignore_errors=True)


def _profile_toolchain(target: Checkout, model_type: str, settings: Settings) -> Toolchain:
    """The target family's toolchain profile (its environment is created on first use).

    Raises:
        InfrastructureFailure: no environment for the profile (not the source's defect, so never a skip).
    """
    try:
        toolchain = toolchain_for(model_type, root=settings.profiles_dir)
    except BotError as error:
        raise InfrastructureFailure(error.message, subject=target.name, stage=Stage.TOOLCHAIN) from None
    if toolchain.profile != DEFAULT_PROFILE:
        transformers = toolchain.versions.get("transformers")
        log.step("%s: toolchain profile %s (transformers %s)", target.name, toolchain.profile, transformers)
    return toolchain


def _reused_ir(
    target: Checkout, first: DraftBuild, recipe: Recipe, toolchain: Toolchain, reused: ReusedTarget
) -> ReusedIr:
    """The downloaded published target IR, checked against this builder's toolchain and the record's hashes.

    Raises:
        BotError: it is not the IR the plan chose (`bot.plan.reuse.check_reused`).
    """
    try:
        task = target_task(first.job.candidate.target_is_vlm)
        published = check_reused(target.path, target.revision or "", recipe.export, task, toolchain)
    except BotError as error:
        raise error.at(subject=target.name) from None
    (target.path / PROVENANCE_FILE).unlink()  # the new record is written by publish
    return ReusedIr(record=published, pinned=reused.pinned)


def plan_schedule(
    drafts: list[DraftBuild],
    recipe: Recipe,
    scratch: Path,
    *,
    target_reused: bool = False,
    settings: Settings | None = None,
    estimate: BuildEstimate | None = None,
) -> Schedule:
    """The export schedule and the memory budget of each child, from the fitted model and this machine."""
    runner = local_runner(scratch)
    estimate = estimate or estimate_group(
        [d.job.candidate for d in drafts], recipe, runner, target_reused=target_reused
    )
    log.step("schedule: %s on this machine (%s memory available)", estimate.describe(), gb(runner.max_memory_bytes))
    layers = (settings or Settings()).sandbox_layers
    return Schedule(
        parallel_exports=estimate.parallel_exports and exports_side_by_side(confinement(layers)),
        memory_budget_bytes=runner.max_memory_bytes,
        estimate=estimate.describe(),
        sandbox_layers=layers,
    )


def exports_side_by_side(state: Confinement) -> bool:
    """Whether two exports may run at once under this confinement: only where something keeps each child from
    signalling the other (`Confinement.signal_guard`); otherwise they run one after the other, and the log says so."""
    guard = state.signal_guard()
    if guard is None:
        log.step(
            "schedule: exports run one after the other: nothing here keeps a child from signalling its sibling "
            "(no PID namespace, Landlock ABI %d has no signal scope, no seccomp)",
            state.landlock_abi,
        )
        return False
    log.step("schedule: children kept from signalling each other by %s", guard)
    return True


def estimate_group(
    drafts: list[Candidate], recipe: Recipe, runner: RunnerClass, *, target_reused: bool
) -> BuildEstimate:
    """The fitted model's schedule and peaks for one target group on `runner` (`bot.plan.sizing.estimate_for`: the
    target family's lines, the bytes its export loads, the recipe's headroom)."""
    pair = pair_of(drafts, target_reused=target_reused)
    return estimate_for(pair, runner, recipe.runners, BuildTime.of(recipe))


def _build_drafts(
    target: Checkout,
    drafts: list[DraftBuild],
    ctx: GroupContext,
    reused: ReusedIr | None,
    official: OfficialCheck | None = None,
) -> list[DraftWork | DraftBuild]:
    """Verify every draft, start every export, and finish each draft in its own thread."""
    target_is_ir = reused is not None or (official is not None and official.ir is not None)
    verified, results = _verify_all(target, drafts, target_is_ir=target_is_ir)
    if not verified:
        return [results[i] for i in range(len(drafts))]
    # Exports are separate processes; on two cores a third one still overlaps Python start-up and I/O.
    workers = min(3, 1 + len(verified)) if ctx.schedule.parallel_exports else 1
    with (
        ThreadPoolExecutor(max_workers=workers) as exporters,
        ThreadPoolExecutor(max_workers=len(verified)) as finishers,
        log.group(f"build {target.name} and {len(verified)} draft(s): export, inspect, validate, bundle"),
    ):
        group_target = start_target(target, next(iter(verified.values())).target, reused, ctx, exporters, official)
        started = [
            _start_draft(index, drafts[index], pair, group_target, ctx, exporters) for index, pair in verified.items()
        ]
        # Every export is submitted before any draft is finished: each finish waits for all of them.
        finishing = {work.index: finishers.submit(finish_draft, work, ctx) for work in started}
        for index, future in finishing.items():
            results[index] = future.result()
    return [results[i] for i in range(len(drafts))]


def _verify_all(
    target: Checkout, drafts: list[DraftBuild], *, target_is_ir: bool
) -> tuple[dict[int, VerifiedPair], dict[int, DraftWork | DraftBuild]]:
    """(the verified pairs, the outcomes of the drafts that failed verification), by the drafts' index."""
    verified: dict[int, VerifiedPair] = {}
    failed: dict[int, DraftWork | DraftBuild] = {}
    with log.group(f"verify {len(drafts)} draft(s) for {target.name}"):
        for index, draft in enumerate(drafts):
            try:
                pair = verify_pair(draft.job.candidate, draft.checkout, target, target_is_ir=target_is_ir)
            except BotError as error:
                failed[index] = draft.stopped(error)
                log.step("%s", error.one_line())
                continue
            verified[index] = pair
            kind = "VLM" if pair.target.is_vlm else "LLM"
            log.step(
                "%s: %s draft (%s format), target %s %s",
                draft.checkout.name,
                pair.draft.kind,
                draft.job.candidate.draft_format,
                pair.target.model_type,
                kind,
            )
    return verified, failed


def _start_draft(
    index: int,
    draft: DraftBuild,
    pair: VerifiedPair,
    target: GroupTarget,
    ctx: GroupContext,
    exporters: ThreadPoolExecutor,
) -> DraftWork:
    """Copy the draft and submit one export per weight format of the recipe (`export.draft_weight_formats`)."""
    src = safe_copy(draft.checkout.path, ctx.scratch / "src" / f"draft-{index}", subject=draft.checkout.name)
    exports: dict[str, Future[ExportResult]] = {}
    for weight_format in ctx.recipe.export.draft_weight_formats:
        request = ExportRequest(
            role="draft",
            source=src,
            output=ctx.scratch / "ir" / f"draft-{index}-{weight_format}",
            task=TASK_LLM,
            trust_remote_code=True,
            name=f"draft-{index}-{weight_format}",
        )
        exports[weight_format] = exporters.submit(
            ctx.export, request, weight_format_args(weight_format, ctx.recipe.export)
        )
    target.all_exports.extend(exports.values())
    return DraftWork(draft=draft, index=index, pair=pair, src=src, exports=exports, target=target)


def build_folders(
    draft: Checkout,
    target: Checkout,
    out: Path,
    recipe: Recipe,
    *,
    keep_work: bool = False,
    settings: Settings | None = None,
) -> DraftBuild | BotError:
    """Classify a pair of local folders the way discovery does, then build it; a defect found before the build
    is returned as the error."""
    settings = settings or Settings()
    try:
        candidate = classify_folders(draft.path, target.path, recipe, profiles_dir=settings.profiles_dir)
    except BotError as error:
        return error.at(subject=draft.name, stage=Stage.CLASSIFY)
    (outcome,) = build_group(
        target, [DraftBuild(BuildJob.local(candidate), draft, out)], recipe, keep_work=keep_work, settings=settings
    )
    return outcome


def build_pair(
    draft: Checkout,
    target: Checkout,
    out: Path,
    recipe: Recipe,
    *,
    keep_work: bool = False,
    settings: Settings | None = None,
) -> Bundle:
    """Build one pair from local folders; the `dflash-bot build --draft --target` command.

    Raises:
        BotError: the Skip or Failure that stopped the build (a bundle that failed a gate is still written).
    """
    outcome = build_folders(draft, target, out, recipe, keep_work=keep_work, settings=settings)
    if isinstance(outcome, BotError):
        raise outcome
    if outcome.error is not None:
        raise outcome.error
    assert outcome.bundle is not None
    return outcome.bundle
