"""The recipe's Hub collection: every published draft repo and target repo, kept in sync by the publish step.

The collection is the downloader's index: a draft's note names its target and the figures at the recommended
`num_assistant_tokens`, a target's note names the drafts validated against it. Items are added with `exists_ok`,
changed notes are updated in place, and model items the bot no longer publishes are removed; items of other
kinds (a paper someone added by hand) are left alone.

Notes are plain text built from repo ids and figures: every id goes through `bot.core.safe_text.clean`, and a figure
that is not a finite number (a NaN from a damaged record) is written as "n/a", never as "nan".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.hub_records import CollectionEntry
from bot.core.recipe import PublishSettings
from bot.core.safe_text import clean
from bot.hub.client import Hub

NOTE_MAX_CHARS = 500  # the Hub refuses longer notes


@dataclass(frozen=True)
class PublishedPair:
    """One published draft and the target repo it was validated with, as the collection and status page show it.

    Filled from the status entries (`StatusEntry.pair`), which come from build records: the repos published
    (`draft_repo`, `target_repo`), the source repos they were made from (`source`, `target`), and the validation
    figures at the recommended `num_assistant_tokens`.
    """

    draft_repo: str
    target_repo: str
    source: str  # the draft's repo id it was built from
    target: str  # the target's repo id
    accept_length: float
    speedup: float
    recommended_k: int


@dataclass(frozen=True)
class CollectionResult:
    """What a sync did, for the run report and the step summary."""

    slug: str
    url: str
    added: tuple[str, ...]
    updated: tuple[str, ...]
    removed: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def draft_note(pair: PublishedPair) -> str:
    """The draft item's note: its target and what it earns there (plain text, at most 500 characters)."""
    return clip(
        f"Draft for {pair.target_repo} (from {pair.source}). Accept length {figure(pair.accept_length)} and "
        f"{figure(pair.speedup)}x speed-up over plain greedy at num_assistant_tokens={pair.recommended_k} "
        f"(OpenVINO GenAI, lossless)."
    )


def target_note(target_repo: str, pairs: Sequence[PublishedPair]) -> str:
    """The target item's note: where it comes from and which drafts were validated against it."""
    drafts = sorted({pair.draft_repo for pair in pairs if pair.target_repo == target_repo})
    source = next(pair.target for pair in pairs if pair.target_repo == target_repo)
    return clip(f"Target ({source}, int4) validated with: {', '.join(drafts)}.")


def figure(value: float) -> str:
    """A figure for a note: two decimals, or "n/a" when it is not a finite number."""
    return f"{value:.2f}" if math.isfinite(value) else "n/a"


def clip(note: str) -> str:
    """Visible text (`bot.core.safe_text.clean`) within the Hub's note limit."""
    note = clean(note)
    return note if len(note) <= NOTE_MAX_CHARS else note[: NOTE_MAX_CHARS - 1] + "…"


def desired_items(pairs: Sequence[PublishedPair]) -> dict[str, str]:
    """repo id -> note, drafts first (sorted), then their targets (sorted): the collection's intended content."""
    items = {pair.draft_repo: draft_note(pair) for pair in sorted(pairs, key=lambda p: p.draft_repo)}
    for target in sorted({pair.target_repo for pair in pairs}):
        items[target] = target_note(target, pairs)
    return items


def sync_collection(
    hub: Hub, settings: PublishSettings, published: Sequence[PublishedPair], *, title: str
) -> CollectionResult:
    """Make the recipe's collection hold exactly the published repos, with current notes.

    Costs one create call (plus a read when the collection exists), then one call per added, changed or removed
    item; call it only when the published pairs or their figures changed (see `status.collection_needs_sync`).

    Args:
        hub: a Hub holding the write token (publish stage).
        settings: the recipe's publish settings (collection namespace, description; `private`).
        published: every pair the bot publishes now, not only this run's.
        title: the collection's title (`Recipe.collection_title`: one per recipe unless the recipe names one).

    Returns:
        The collection's slug and URL and the repo ids added, re-noted and removed.

    Raises:
        Failure: the Hub refused or kept failing a collection call.
        Skip: a repo to add does not exist (it was deleted between publishing and this sync).
    """
    options = settings.collection
    state = hub.ensure_collection(
        title, settings.collection_namespace, description=options.description, private=settings.private
    )
    wanted = desired_items(published)
    present: dict[str, CollectionEntry] = {item.item_id: item for item in state.items if item.item_type == "model"}
    added, updated, removed = [], [], []
    for repo_id, note in wanted.items():
        item = present.get(repo_id)
        if item is None:
            hub.add_collection_item(state.slug, repo_id, note=note)
            added.append(repo_id)
        elif (item.note or "") != note:
            hub.update_collection_note(state.slug, item, note)
            updated.append(repo_id)
    for repo_id, item in sorted(present.items()):
        if repo_id not in wanted:
            hub.remove_collection_item(state.slug, item)
            removed.append(repo_id)
    return CollectionResult(
        slug=state.slug, url=state.url, added=tuple(added), updated=tuple(updated), removed=tuple(removed)
    )
