"""The Hub's answers about repos, tokens, commits and collections, as the bot's typed records.

`bot.hub` asks the Hub and hands what it read to these parsers: raw JSON and huggingface_hub's objects stop there,
and every stage above reads the frozen records below. The parsers take the client's objects by their attributes
(this module never imports huggingface_hub: the entry points switch its telemetry off before it is imported) and
read a field the Hub leaves out as empty rather than fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RepoListing:
    """A repo as a listing page shows it: enough to classify by architecture and to know its revision."""

    repo_id: str
    sha: str | None
    last_modified: str | None
    tags: tuple[str, ...]
    gated: bool
    private: bool
    architectures: tuple[str, ...]
    model_type: str | None
    card_data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RepoFiles:
    """A repo at one revision: its commit and file sizes."""

    repo_id: str
    sha: str
    sizes: dict[str, int]
    gated: bool
    private: bool
    card_data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TokenIdentity:
    """Who a token is and what it may do, from the Hub's `/api/whoami-v2` answer (`HfApi.whoami`).

    Attributes:
        user: the account's name (the author of the commits made with the token).
        fullname: its display name.
        role: the token's role: `read`, `write` or `fineGrained`.
        org_roles: each organisation of the user, with the user's role there (`admin`, `write`, `contributor`,
            `read`; empty when the Hub does not say).
        scopes: a fine-grained token's permissions per namespace (`repo.write`, `collection.write`, ...).
    """

    user: str
    fullname: str
    role: str
    org_roles: dict[str, str]
    scopes: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class CommitEntry:
    """One commit of a repo's history: its id, its first author (None: none listed) and its title."""

    commit: str
    author: str | None
    title: str


@dataclass(frozen=True)
class CollectionEntry:
    """One item of a Hub collection: `object_id` addresses it in updates and deletes."""

    object_id: str
    item_id: str
    item_type: str
    note: str | None


@dataclass(frozen=True)
class CollectionState:
    """A Hub collection as the bot needs it: where it is and what it holds."""

    slug: str
    url: str
    title: str
    items: tuple[CollectionEntry, ...]


def parse_identity(answer: dict) -> TokenIdentity:
    """The typed record of a `/api/whoami-v2` answer (fields the Hub leaves out read as empty)."""
    token = (answer.get("auth") or {}).get("accessToken") or {}
    org_roles = {
        str(org["name"]): str(org.get("roleInOrg") or "")
        for org in answer.get("orgs") or []
        if isinstance(org, dict) and org.get("name")
    }
    scopes: dict[str, tuple[str, ...]] = {}
    for scope in (token.get("fineGrained") or {}).get("scoped") or []:
        name = (scope.get("entity") or {}).get("name") if isinstance(scope, dict) else None
        if name:
            scopes[str(name)] = scopes.get(str(name), ()) + tuple(str(p) for p in scope.get("permissions") or [])
    return TokenIdentity(
        user=str(answer["name"]),
        fullname=str(answer.get("fullname") or answer["name"]),
        role=str(token.get("role") or "write"),
        org_roles=org_roles,
        scopes=scopes,
    )


def parse_listing(info: Any) -> RepoListing:
    """The typed record of one listing entry (huggingface_hub's `ModelInfo` of an `/api/models` item)."""
    config = info.config if isinstance(getattr(info, "config", None), dict) else {}
    architectures = config.get("architectures") or []
    return RepoListing(
        repo_id=info.id,
        sha=info.sha,
        last_modified=str(info.last_modified) if info.last_modified else None,
        tags=tuple(info.tags or ()),
        gated=bool(info.gated),
        private=bool(info.private),
        architectures=tuple(str(a) for a in architectures if isinstance(a, str)),
        model_type=config.get("model_type") if isinstance(config.get("model_type"), str) else None,
        card_data=card_dict(info),
    )


def card_dict(info: Any) -> dict:
    """The card metadata a `ModelInfo` carries, as a plain dict (empty when the answer has none)."""
    card = getattr(info, "card_data", None) or getattr(info, "cardData", None)
    if card is None:
        return {}
    return card.to_dict() if hasattr(card, "to_dict") else dict(card)


def parse_collection(collection: Any) -> CollectionState:
    """The typed record of a huggingface_hub `Collection` (what every collection call answers)."""
    items = tuple(
        CollectionEntry(object_id=i.item_object_id, item_id=i.item_id, item_type=i.item_type, note=i.note)
        for i in collection.items
    )
    return CollectionState(slug=collection.slug, url=collection.url, title=collection.title, items=items)


def parse_repo_files(repo_id: str, info: Any) -> RepoFiles:
    """The typed record of a `ModelInfo` read with `files_metadata` (`/api/models/{repo}/revision/{rev}`)."""
    return RepoFiles(
        repo_id=repo_id,
        sha=str(info.sha),  # the Hub always names the commit it answers for
        sizes={s.rfilename: int(s.size or 0) for s in info.siblings or []},
        gated=bool(info.gated),
        private=bool(info.private),
        card_data=card_dict(info),
    )


def parse_commit(item: object) -> CommitEntry:
    """The typed record of one item of `/api/models/{repo}/commits/{rev}` (a malformed item reads as empty)."""
    authors = item.get("authors") if isinstance(item, dict) else None
    first = authors[0] if isinstance(authors, list) and authors else None
    author = first.get("user") if isinstance(first, dict) else None
    return CommitEntry(
        commit=str(item.get("id") or "") if isinstance(item, dict) else "",
        author=str(author) if author else None,
        title=str(item.get("title") or "") if isinstance(item, dict) else "",
    )
