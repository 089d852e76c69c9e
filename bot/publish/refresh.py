"""Card refresh: a published build's cards rendered again after a template change, with no rebuild and no weights.

Only the card files are committed (`README.md`, the record naming the new templates, the draft's chart), each
commit on the repo as read (`parent_commit`); a draft repo that holds another build since the plan read it keeps
its own cards. Publishing a build itself is `bot.publish.publisher`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bot.core import log, record
from bot.core.errors import Failure, Stage
from bot.core.fingerprints import template_fingerprint
from bot.core.outcome import Status
from bot.core.record import BuildRecord
from bot.hub.client import Hub
from bot.publish.card import render_draft_card, render_target_card
from bot.publish.charts import ACCEPTANCE_CHART, write_acceptance_chart
from bot.publish.publisher import CARD_FILES, PublishResult


def refresh_cards(hub: Hub, published: BuildRecord, *, private: bool) -> PublishResult:
    """Re-render the cards from the published records after a template change: no rebuild, no weights.

    Returns:
        PUBLISHED when a card changed (a commit was made), UP_TO_DATE when both were already current.
    """
    if published.repos is None:
        raise Failure(
            "the published record names no repos to refresh", subject=published.source.repo, stage=Stage.PUBLISH
        )
    repos, card_fp = published.repos, template_fingerprint()
    # Render from the record at the commit the card will be committed on: a build published since the plan read
    # `published` has its own fresh cards, and must not get this one's record back.
    head = hub.files_or_none(repos.draft)
    current = hub.draft_record(repos.draft, revision=head.sha) if head is not None else None
    if current is None or current.inputs().changes_to(published.inputs()):
        log.step("%s holds another build since it was planned: its cards are its own", repos.draft)
        return PublishResult(Status.UP_TO_DATE, repos, [])
    refreshed = current.published_as(repos, card_fp)
    commits: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="dflash-bot-card-") as tmp:
        folder = Path(tmp)
        record.write(refreshed, folder)
        write_acceptance_chart(folder, refreshed.validation)
        (folder / "README.md").write_text(render_draft_card(refreshed), encoding="utf-8")
        result = hub.publish_folder(
            repos.draft,
            folder,
            message="Update model card",
            private=private,
            only=(*CARD_FILES, ACCEPTANCE_CHART),
            seen=head,
        )
        if result.commit:
            commits.append((repos.draft, result.commit))
        target_head = hub.files_or_none(repos.target)
        target = hub.target_record(repos.target, revision=target_head.sha) if target_head is not None else None
        if target is not None and target.card.template_fingerprint != card_fp:
            (folder / ACCEPTANCE_CHART).unlink()
            target = target.model_copy(update={"card": record.CardInfo(template_fingerprint=card_fp)})
            record.write(target, folder)
            (folder / "README.md").write_text(render_target_card(target, target_repo=repos.target), encoding="utf-8")
            result = hub.publish_folder(
                repos.target, folder, message="Update model card", private=private, only=CARD_FILES, seen=target_head
            )
            if result.commit:
                commits.append((repos.target, result.commit))
    return PublishResult(Status.PUBLISHED if commits else Status.UP_TO_DATE, repos, commits)
