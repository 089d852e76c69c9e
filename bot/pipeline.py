"""The scheduled job: discover → plan → build → publish → report, in one process (`dflash-bot run`).

Each candidate is independent: a skip or failure is recorded and the run goes on. The build stage runs its
exports and GenAI checks in child processes without any token (`bot.isolation`); this process downloads with the
read token and publishes with the write token, and never loads a checkpoint itself.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bot import discover, log, plan, profiles
from bot.build import DraftOutcome, SourceRef, build_group
from bot.card import template_fingerprint
from bot.errors import BotError, Skip
from bot.fetch import ALLOWED_PATTERNS, require_free_disk
from bot.hub import REQUESTS, Hub, RepoListing
from bot.publish import PublishResult, publish_bundle, refresh_cards
from bot.recipe import Recipe
from bot.report import FAILED, PLANNED, PUBLISHED, SKIPPED, UP_TO_DATE, Outcome, RunReport
from bot.toolchain import Toolchain, detect


DISK_FACTOR = 3


@dataclass(frozen=True)
class RunOptions:
    only: str | None = None
    force: bool = False
    dry_run: bool = False
    work: Path | None = None
    keep_work: bool = False


def plan_run(reader: Hub, recipe: Recipe, options: RunOptions, report: RunReport
             ) -> tuple[list[plan.Decision], list[discover.Candidate]]:
    """Discover and plan: decisions for every listed source, and resolved candidates for those to build."""
    toolchain = detect()
    with log.group("discover"):
        listings, skips = discover.list_sources(reader, recipe, toolchain)
        if options.only:
            skips = [s for s in skips if s.repo_id == options.only]
            listings = [l for l in listings if l.repo_id == options.only]
            if not listings and not skips:
                try:
                    listings = [_listing_for(reader, options.only)]
                except BotError as error:
                    report.outcomes.append(Outcome(options.only, None, _status(error), error.message))
        for skip in skips:
            report.outcomes.append(Outcome(skip.repo_id, skip.revision, SKIPPED, skip.reason))
        log.step("%d candidate(s), %d ruled out by the listing", len(listings), len(skips))

    card_fp = template_fingerprint()
    decisions, candidates = [], []
    toolchains: dict[str | None, Toolchain] = {}

    def built_with(published: dict | None) -> Toolchain:
        """The toolchain a published build is compared with: its target family's profile, not this process's."""
        model_type = (published or {}).get("target", {}).get("model_type")
        if model_type not in toolchains:
            try:
                toolchains[model_type] = profiles.toolchain_for(model_type)
            except Skip:
                toolchains[model_type] = toolchain  # resolve() reports the missing profile with its reason
        return toolchains[model_type]

    with log.group("plan"):
        for listing in listings:
            try:
                published = plan.read_published(reader, plan.draft_output_repo(recipe, listing.repo_id))
                decision = plan.decide(listing, published, recipe, built_with(published), card_fp,
                                       force=options.force)
            except BotError as error:
                report.outcomes.append(Outcome(listing.repo_id, listing.sha, _status(error), error.message))
                continue
            decisions.append(decision)
            if decision.action == plan.UP_TO_DATE:
                report.outcomes.append(Outcome(listing.repo_id, listing.sha, UP_TO_DATE, "",
                                               _repos(decision.published)))
            elif decision.action == plan.BUILD:
                try:
                    candidates.append(discover.resolve(reader, listing, recipe, toolchain))
                except BotError as error:
                    report.outcomes.append(Outcome(listing.repo_id, listing.sha, _status(error), error.message))
                    decisions.remove(decision)
            log.step("%s: %s %s", listing.repo_id, decision.action, "; ".join(decision.reasons))
    return decisions, candidates


def run(recipe: Recipe, reader: Hub, writer: Hub | None, options: RunOptions) -> RunReport:
    """Run the whole job once and return its report (never raises for one candidate's problem)."""
    report = RunReport(dry_run=options.dry_run)
    requests_before = REQUESTS.count
    decisions, candidates = plan_run(reader, recipe, options, report)
    by_repo = {c.repo_id: c for c in candidates}

    if options.dry_run:
        for decision in decisions:
            if decision.action != plan.UP_TO_DATE:
                candidate = by_repo.get(decision.listing.repo_id)
                detail = f" (target {candidate.target_repo})" if candidate else ""
                report.outcomes.append(Outcome(decision.listing.repo_id, decision.listing.sha, PLANNED,
                                               f"{decision.action}: {'; '.join(decision.reasons)}{detail}"))
        report.hub_requests = REQUESTS.count - requests_before
        return report

    for decision in decisions:
        if decision.action == plan.CARD_ONLY and decision.published is not None:
            _publish_step(report, decision.listing, lambda d=decision: refresh_cards(_need(writer), d.published,
                                                                                      recipe), "card refreshed")

    why = {d.listing.repo_id: "; ".join(d.reasons) for d in decisions}
    groups: dict[tuple[str, str], list[discover.Candidate]] = defaultdict(list)
    for candidate in candidates:
        groups[(candidate.target_repo, candidate.target_revision)].append(candidate)
    if options.work is not None:
        options.work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-run-", dir=options.work))
    try:
        for (target_repo, target_revision), members in groups.items():
            _build_and_publish(report, reader, writer, recipe, target_repo, target_revision, members, scratch,
                               options, why)
    finally:
        if not options.keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    report.hub_requests = REQUESTS.count - requests_before
    return report


def _build_and_publish(report: RunReport, reader: Hub, writer: Hub | None, recipe: Recipe, target_repo: str,
                       target_revision: str, members: list[discover.Candidate], scratch: Path,
                       options: RunOptions, why: dict[str, str]) -> None:
    fetch_failures, built = fetch_and_build(reader, recipe, target_repo, target_revision, members, scratch,
                                            keep_work=options.keep_work)
    report.outcomes.extend(fetch_failures)
    for outcome in built:
        listing_revision = outcome.draft.revision
        if outcome.error is not None:
            report.outcomes.append(Outcome(outcome.draft.name, listing_revision, _status(outcome.error),
                                           f"{outcome.error.stage}: {outcome.error.message}"))
            continue
        assert outcome.bundle is not None
        bundle_root = outcome.bundle.root
        with log.group(f"publish {outcome.draft.name}"):
            _publish_step(report, _Ref(outcome.draft.name, listing_revision),
                          lambda root=bundle_root: publish_bundle(_need(writer), root, recipe),
                          why.get(outcome.draft.name, ""))


def fetch_and_build(reader: Hub, recipe: Recipe, target_repo: str, target_revision: str,
                    members: list[discover.Candidate], scratch: Path, *, keep_work: bool = False
                    ) -> tuple[list[Outcome], list[DraftOutcome]]:
    """Download one target and its drafts with the reader, then build each draft into `scratch/.../bundles`.

    Used by `run` (then publishes) and by `dflash-bot build --job` (a matrix entry: the bundle goes to publish).

    Returns:
        (outcomes of sources that could not be downloaded, build outcomes of the downloaded drafts)
    """
    failures: list[Outcome] = []
    group_dir = scratch / _safe_name(target_repo)
    with log.group(f"fetch {target_repo} and {len(members)} draft(s)"):
        try:
            # Downloaded weights, the int4 IRs and the bundle copies: about three times the source weights.
            require_free_disk(scratch, DISK_FACTOR * max(c.weight_bytes for c in members), "download and export",
                              subject=target_repo)
            target_dir = reader.download(target_repo, target_revision, group_dir / "target", ALLOWED_PATTERNS)
        except BotError as error:
            return [Outcome(c.repo_id, c.revision, _status(error), f"target {target_repo}: {error.message}")
                    for c in members], []
        drafts: list[tuple[SourceRef, Path]] = []
        for index, candidate in enumerate(members):
            try:
                path = reader.download(candidate.repo_id, candidate.revision, group_dir / f"draft-{index}",
                                       ALLOWED_PATTERNS)
            except BotError as error:
                failures.append(Outcome(candidate.repo_id, candidate.revision, _status(error), error.message))
                continue
            drafts.append((SourceRef(path, candidate.repo_id, candidate.revision),
                           group_dir / "bundles" / f"draft-{index}"))
    if not drafts:
        return failures, []
    target = SourceRef(target_dir, target_repo, target_revision)
    return failures, build_group(target, drafts, recipe, work=scratch, keep_work=keep_work)


@dataclass(frozen=True)
class _Ref:
    repo_id: str
    sha: str | None


def _publish_step(report: RunReport, ref: RepoListing | _Ref, action, reason: str) -> None:
    try:
        result: PublishResult = action()
    except BotError as error:
        report.outcomes.append(Outcome(ref.repo_id, ref.sha, _status(error), error.message))
        return
    for repo, commit in result.commits.items():
        report.commits.append({"repo": repo, "commit": commit})
    status = UP_TO_DATE if result.status == UP_TO_DATE else PUBLISHED
    report.outcomes.append(Outcome(ref.repo_id, ref.sha, status, reason, [result.draft_repo, result.target_repo]))


def _need(writer: Hub | None) -> Hub:
    if writer is None or not writer.token:
        raise Skip("no write token (HF_TOKEN) configured: nothing can be published", stage="publish")
    return writer


def _listing_for(reader: Hub, repo_id: str) -> RepoListing:
    files = reader.repo_files(repo_id)
    return RepoListing(repo_id=repo_id, sha=files.sha, last_modified=None, tags=(), gated=files.gated,
                       private=files.private, architectures=(), model_type=None, card_data=files.card_data)


def _repos(published: dict | None) -> list[str]:
    repos = (published or {}).get("repos", {})
    return [r for r in (repos.get("draft"), repos.get("target")) if r]


def _status(error: BotError) -> str:
    return SKIPPED if isinstance(error, Skip) else FAILED


def _safe_name(repo_id: str) -> str:
    return repo_id.replace("/", "--")
