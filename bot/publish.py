"""Publish a validated bundle: one commit per repo, card and record included, target first (DESIGN §7).

This stage holds the write token and never loads a checkpoint: it renders Markdown and uploads files. The output
repos come from the build job (plan named them) and the record from memory. Before writing it re-reads the Hub,
so a stale bundle never overwrites newer work, a repo that holds another source's build is never overwritten, and
a second publisher of the same build reports "up-to-date". Every commit carries every file of the repo and
`parent_commit`, so a crash or a race leaves a repo at its previous commit or at the complete new one.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bot import log, record
from bot.bundle import Bundle
from bot.card import render_draft_card, render_target_card, template_fingerprint
from bot.errors import Failure, PreconditionFailed, Skip
from bot.hub import Hub
from bot.outcome import Status
from bot.record import PROVENANCE_FILE, BuildRecord, Repos, TargetRecord

_CARD_FILES = ("README.md", PROVENANCE_FILE)
_RACE_ATTEMPTS = 3


@dataclass(frozen=True)
class PublishResult:
    status: Status  # PUBLISHED (something was committed) or UP_TO_DATE
    repos: Repos
    commits: dict[str, str] = field(default_factory=dict)  # repo -> new commit id


def publish_bundle(hub: Hub, bundle: Bundle, repos: Repos, *, private: bool) -> PublishResult:
    """Publish one bundle to the draft and target repos named by its build job.

    Raises:
        Failure: the bundle failed a validation gate (never published), or the Hub refused the commits.
        Skip: an output repo holds newer work, or another source's build.
    """
    built = bundle.record
    source = built.source.repo
    if not built.passed:
        gates = "; ".join(built.failed_gates) or f"status {built.status}"
        raise Failure(f"bundle did not pass validation, not published ({gates})", subject=source, stage="publish")
    if not source or not built.target.repo:
        raise Failure("bundle was built from local folders: there is no source repo to publish under",
                      subject=str(bundle.root), stage="publish")
    card_fp = template_fingerprint()
    commits: dict[str, str] = {}
    for attempt in range(1, _RACE_ATTEMPTS + 1):
        try:
            status = _publish_once(hub, bundle, repos, card_fp, commits, private)
            return PublishResult(status, repos, commits)
        except PreconditionFailed:
            if attempt == _RACE_ATTEMPTS:
                raise
            # Another writer committed first: re-read the Hub and decide again (it may hold this very build).
            log.step("%s: lost a commit race (412), re-reading the Hub", source)
    raise AssertionError("unreachable")


def _publish_once(hub: Hub, bundle: Bundle, repos: Repos, card_fp: str, commits: dict[str, str],
                  private: bool) -> Status:
    built = bundle.record
    source = built.source.repo
    published = hub.draft_record(repos.draft)
    if published is not None:
        if published.source.repo != source:
            raise Skip(f"{repos.draft} holds a build of {published.source.repo}, not of {source}: not overwritten "
                       "(two sources map to one output repo; rename one in the recipe)", subject=source,
                       stage="publish")
        if not published.inputs().changes_to(built.inputs()):
            if published.card is not None and published.card.template_fingerprint == card_fp:
                log.step("%s already holds this build", repos.draft)
                return Status.UP_TO_DATE
        elif published.built_at > built.built_at and published.source.revision != built.source.revision:
            raise Skip(f"{repos.draft} already holds a newer build (source {str(published.source.revision)[:7]}); "
                       "this bundle is stale", subject=source, stage="publish")
    _publish_target(hub, bundle, repos, card_fp, commits, private)
    _publish_draft(hub, bundle, repos, card_fp, commits, private)
    return Status.PUBLISHED


def _publish_target(hub: Hub, bundle: Bundle, repos: Repos, card_fp: str, commits: dict[str, str],
                    private: bool) -> None:
    built = bundle.record
    published = hub.target_record(repos.target)
    if published is not None and published.target.repo != built.target.repo:
        raise Skip(f"{repos.target} holds an export of {published.target.repo}, not of {built.target.repo}: not "
                   "overwritten (two targets map to one output repo)", subject=built.source.repo, stage="publish")
    summary = built.summary(repos.draft)
    fresh = TargetRecord.from_build(built, [summary], card_fp)
    weights_current = published is not None and published.target_inputs() == fresh.target_inputs()
    target_record = published.with_draft(summary, card_fp) if published is not None and weights_current else fresh
    if published is not None and weights_current and published.draft_keys() == target_record.draft_keys() and \
            published.card.template_fingerprint == card_fp:
        log.step("%s is current", repos.target)
        return
    folder = bundle.target_dir
    record.write(target_record, folder)
    (folder / "README.md").write_text(render_target_card(target_record, target_repo=repos.target), encoding="utf-8")
    result = hub.publish_folder(repos.target, folder, message=_message("target", built.target),
                                private=private, only=_CARD_FILES if weights_current else None)
    if result.commit:
        commits[repos.target] = result.commit
        log.step("%s: commit %s (%s)", repos.target, result.commit[:7],
                 "card and record" if weights_current else f"{len(result.files)} files")
    hub.tag(repos.target, f"src-{str(built.target.revision)[:7]}", result.commit)


def _publish_draft(hub: Hub, bundle: Bundle, repos: Repos, card_fp: str, commits: dict[str, str],
                   private: bool) -> None:
    built = bundle.record.published_as(repos, card_fp)
    folder = bundle.draft_dir
    record.write(built, folder)
    (folder / "README.md").write_text(render_draft_card(built), encoding="utf-8")
    result = hub.publish_folder(repos.draft, folder, message=_message("draft", built.source), private=private)
    if result.commit:
        commits[repos.draft] = result.commit
        log.step("%s: commit %s (%d files)", repos.draft, result.commit[:7], len(result.files))
    hub.tag(repos.draft, f"src-{str(built.source.revision)[:7]}", result.commit)


def refresh_cards(hub: Hub, published: BuildRecord, *, private: bool) -> PublishResult:
    """Re-render the cards from the published records after a template change: no rebuild, no weights.

    Returns:
        PUBLISHED when a card changed (a commit was made), UP_TO_DATE when both were already current.
    """
    if published.repos is None:
        raise Failure("the published record names no repos to refresh", subject=published.source.repo,
                      stage="publish")
    repos, card_fp = published.repos, template_fingerprint()
    refreshed = published.published_as(repos, card_fp)
    commits: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dflash-bot-card-") as tmp:
        folder = Path(tmp)
        record.write(refreshed, folder)
        (folder / "README.md").write_text(render_draft_card(refreshed), encoding="utf-8")
        result = hub.publish_folder(repos.draft, folder, message="Update model card", private=private,
                                    only=_CARD_FILES)
        if result.commit:
            commits[repos.draft] = result.commit
        target = hub.target_record(repos.target)
        if target is not None and target.card.template_fingerprint != card_fp:
            target = target.model_copy(update={"card": record.CardInfo(template_fingerprint=card_fp)})
            record.write(target, folder)
            (folder / "README.md").write_text(render_target_card(target, target_repo=repos.target), encoding="utf-8")
            result = hub.publish_folder(repos.target, folder, message="Update model card", private=private,
                                        only=_CARD_FILES)
            if result.commit:
                commits[repos.target] = result.commit
    return PublishResult(Status.PUBLISHED if commits else Status.UP_TO_DATE, repos, commits)


def _message(role: str, ref: record.SourceRef) -> str:
    return f"Export {role} {ref.repo}@{str(ref.revision)[:7]} to OpenVINO int4 (dflash-bot)"
