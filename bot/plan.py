"""Decide what to build from what is already published: the Hub is the state (DESIGN §2).

Each candidate costs one small request, its output repo's `openvino_export.json`. A build happens only for a new
source revision, a changed recipe fingerprint, a changed toolchain or draft format, or `--force`; a changed card
template alone re-renders the card without rebuilding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bot.checkpoints import DraftSpec, require_exportable
from bot.errors import Skip
from bot.hub import Hub, RepoListing
from bot.recipe import Recipe
from bot.toolchain import TRACKED_PACKAGES, Toolchain

BUILD, CARD_ONLY, UP_TO_DATE = "build", "card", "up-to-date"
PROVENANCE_FILE = "openvino_export.json"


@dataclass(frozen=True)
class Decision:
    """What to do with one listed source, and why."""

    listing: RepoListing
    action: str  # build | card | up-to-date
    reasons: tuple[str, ...]
    draft_repo: str
    published: dict | None  # the output repo's provenance, when there is one


def output_name(template: str, namespace: str, repo_id: str, key: str) -> str:
    return f"{namespace}/{template.format(**{key: repo_id.split('/')[-1]})}"


def draft_output_repo(recipe: Recipe, source_repo: str) -> str:
    return output_name(recipe.publish.draft_name, recipe.publish.namespace, source_repo, "source_name")


def target_output_repo(recipe: Recipe, target_repo: str) -> str:
    return output_name(recipe.publish.target_name, recipe.publish.namespace, target_repo, "target_name")


def toolchain_changes(published: dict, toolchain: Toolchain) -> list[str]:
    """Tracked package versions that differ between the published build and this environment."""
    before = published.get("toolchain", {})
    return [f"{name} {before.get(name)} -> {toolchain.versions[name]}" for name in TRACKED_PACKAGES
            if before.get(name) != toolchain.versions[name]]


def expected_format(published: dict, toolchain: Toolchain) -> str | None:
    """The draft format this toolchain would export for the published kind (None if it cannot export it)."""
    draft = published.get("draft", {})
    spec = DraftSpec.of_kind(draft.get("kind", "unknown"), draft.get("architecture", ""),
                             draft.get("base_model_type", ""))
    try:
        return require_exportable(spec, toolchain)
    except Skip:
        return None


def decide(listing: RepoListing, published: dict | None, recipe: Recipe, toolchain: Toolchain,
           card_fingerprint: str, *, force: bool = False) -> Decision:
    """Compare a listed source with its published provenance (pure: no Hub call)."""
    draft_repo = draft_output_repo(recipe, listing.repo_id)
    if force:
        return Decision(listing, BUILD, ("forced",), draft_repo, published)
    if published is None:
        return Decision(listing, BUILD, ("new",), draft_repo, None)
    reasons = []
    if published.get("source", {}).get("revision") != listing.sha:
        reasons.append(f"source changed ({_short(published.get('source', {}).get('revision'))} -> "
                       f"{_short(listing.sha)})")
    if published.get("recipe_fingerprint") != recipe.fingerprint():
        reasons.append("recipe changed")
    reasons += [f"toolchain changed ({change})" for change in toolchain_changes(published, toolchain)]
    published_format = published.get("draft", {}).get("format")
    now_format = expected_format(published, toolchain)
    if now_format is not None and now_format != published_format:
        reasons.append(f"draft format changed ({published_format} -> {now_format})")
    if reasons:
        return Decision(listing, BUILD, tuple(reasons), draft_repo, published)
    if published.get("card", {}).get("template_fingerprint") != card_fingerprint:
        return Decision(listing, CARD_ONLY, ("card template changed",), draft_repo, published)
    return Decision(listing, UP_TO_DATE, (), draft_repo, published)


def read_published(hub: Hub, repo_id: str) -> dict | None:
    """The provenance of a published output repo (one GET), or None when there is none or it is unreadable."""
    try:
        data = hub.read_file(repo_id, PROVENANCE_FILE)
    except Skip:
        return None  # over the size limit (e.g. a card bomb expanded into it): rebuilt, never a permanent skip
    if data is None:
        return None
    try:
        provenance = json.loads(data)
    except ValueError:
        return None  # a damaged record is rebuilt rather than trusted
    return provenance if isinstance(provenance, dict) else None


def _short(sha: str | None) -> str:
    return (sha or "none")[:7]
