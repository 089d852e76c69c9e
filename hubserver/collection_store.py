"""Collections of the local Hub: titled, ordered lists of repos with notes, as `huggingface_hub` manages them.

Persisted like the repo store: one JSON file per collection under `data_dir/collections/<id>.json`, written to a
temp file, fsynced and renamed, so a crash leaves the old or the new collection, never half of one. A collection
is addressed by its slug `{namespace}/{slugified-title}-{id}`; only the id identifies it (a renamed collection
keeps its id, and the Hub accepts the old slug), as on huggingface.co.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import errors
from .storage import now_iso, write_json_atomic

NOTE_MAX_CHARS = 500  # the Hub's limit on an item's note
THEMES = ("orange", "blue", "green", "purple", "pink", "indigo")
ITEM_TYPES = ("model", "dataset", "space", "paper", "collection")
_ID_RE = re.compile(r"-([0-9a-f]{24})$")


def slugify(title: str) -> str:
    """The title part of a slug: lower case, runs of anything but letters and digits become one `-`."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "collection"


def new_object_id() -> str:
    """A 24-hex-digit id, the shape of the Hub's (MongoDB) object ids."""
    return secrets.token_hex(12)


def id_from_slug(slug: str) -> str | None:
    """The collection id at the end of a slug's last segment, or None when the slug has none."""
    found = _ID_RE.search(slug)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Item:
    """One entry of a collection: what it points to (type + id) and the note shown under it."""

    object_id: str
    item_type: str
    item_id: str
    position: int
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "_id": self.object_id,
            "type": self.item_type,
            "id": self.item_id,
            "position": self.position,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Item:
        return cls(
            object_id=data["_id"],
            item_type=data["type"],
            item_id=data["id"],
            position=data["position"],
            note=data.get("note"),
        )


@dataclass(frozen=True)
class StoredCollection:
    """A collection's settings and items. Replaced as a whole on every change."""

    id: str
    namespace: str
    title: str
    description: str | None
    private: bool
    theme: str
    last_updated: str
    items: tuple[Item, ...] = field(default_factory=tuple)

    @property
    def slug(self) -> str:
        return f"{self.namespace}/{slugify(self.title)}-{self.id}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "title": self.title,
            "description": self.description,
            "private": self.private,
            "theme": self.theme,
            "lastUpdated": self.last_updated,
            "items": [item.to_json() for item in self.items],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredCollection:
        return cls(
            id=data["id"],
            namespace=data["namespace"],
            title=data["title"],
            description=data.get("description"),
            private=data["private"],
            theme=data["theme"],
            last_updated=data["lastUpdated"],
            items=tuple(Item.from_json(i) for i in data["items"]),
        )


class CollectionStore:
    """Every collection of one data directory, in memory and written through on each change.

    Raises `errors.HubError` for what the HTTP layer answers as it is (404 unknown collection or item, 409 a
    duplicate title or item, 400 a note over 500 characters).
    """

    def __init__(self, data_dir: Path):
        self._dir = Path(data_dir) / "collections"
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._collections: dict[str, StoredCollection] = {}
        for path in sorted(self._dir.glob("*.json")):
            collection = StoredCollection.from_json(json.loads(path.read_text(encoding="utf-8")))
            self._collections[collection.id] = collection

    def all(self) -> list[StoredCollection]:
        """Every collection, most recently updated first (the Hub's default listing order)."""
        return sorted(self._collections.values(), key=lambda c: (c.last_updated, c.id), reverse=True)

    def find(self, slug: str) -> StoredCollection:
        """The collection a slug names: by its id, and only under the namespace the slug starts with.

        Raises:
            HubError: 404 when no collection has that id under that namespace.
        """
        namespace = slug.split("/", 1)[0]
        collection = self._collections.get(id_from_slug(slug) or "")
        if collection is None or collection.namespace != namespace:
            raise errors.HubError(404, f"Collection {slug} not found")
        return collection

    def by_title(self, namespace: str, title: str) -> StoredCollection | None:
        return next(
            (c for c in self._collections.values() if c.namespace == namespace and slugify(c.title) == slugify(title)),
            None,
        )

    def create(self, namespace: str, title: str, *, description: str | None, private: bool) -> StoredCollection:
        """A new, empty collection.

        Raises:
            HubError: 409 (with the existing `slug` in the body, which `create_collection(exists_ok=True)`
                reads) when the namespace already has a collection of that title.
        """
        if not title.strip():
            raise errors.bad_request("A collection needs a title")
        with self._lock:
            existing = self.by_title(namespace, title)
            if existing is not None:
                raise errors.conflict("Collection already exists", slug=existing.slug)
            collection = StoredCollection(
                id=new_object_id(),
                namespace=namespace,
                title=title,
                description=description,
                private=private,
                theme=THEMES[0],
                last_updated=now_iso(),
            )
            self._save(collection)
            return collection

    def update(self, collection: StoredCollection, **changes: Any) -> StoredCollection:
        """Change title, description, privacy, theme or the item order; None values are left alone."""
        with self._lock:
            current = self._current(collection)
            changes = {key: value for key, value in changes.items() if value is not None}
            if "theme" in changes and changes["theme"] not in THEMES:
                raise errors.bad_request(f"Invalid theme {changes['theme']!r}: expected one of {list(THEMES)}")
            if "title" in changes:
                other = self.by_title(current.namespace, changes["title"])
                if other is not None and other.id != current.id:
                    raise errors.conflict("Collection already exists", slug=other.slug)
            updated = replace(current, **changes, last_updated=now_iso())
            self._save(updated)
            return updated

    def delete(self, collection: StoredCollection) -> None:
        with self._lock:
            self._current(collection)
            del self._collections[collection.id]
            (self._dir / f"{collection.id}.json").unlink(missing_ok=True)

    def add_item(
        self, collection: StoredCollection, item_type: str, item_id: str, note: str | None
    ) -> StoredCollection:
        """Append an item at the last position.

        Raises:
            HubError: 409 when the collection already holds that item, 400 for a note over 500 characters.
        """
        check_note(note)
        with self._lock:
            current = self._current(collection)
            if any(i.item_type == item_type and i.item_id == item_id for i in current.items):
                raise errors.conflict(f"Item {item_type}/{item_id} is already in the collection")
            position = max((i.position for i in current.items), default=-1) + 1
            item = Item(
                object_id=new_object_id(), item_type=item_type, item_id=item_id, position=position, note=note or None
            )
            updated = replace(current, items=(*current.items, item), last_updated=now_iso())
            self._save(updated)
            return updated

    def update_item(
        self, collection: StoredCollection, object_id: str, *, note: str | None, position: int | None
    ) -> StoredCollection:
        """Change an item's note (an empty note removes it) and/or move it to `position`."""
        check_note(note)
        with self._lock:
            current = self._current(collection)
            items = sorted(current.items, key=lambda i: i.position)
            index = _index(items, object_id)
            item = items.pop(index)
            if note is not None:
                item = replace(item, note=note or None)
            items.insert(index if position is None else max(0, min(position, len(items))), item)
            renumbered = tuple(replace(i, position=n) for n, i in enumerate(items))
            updated = replace(current, items=renumbered, last_updated=now_iso())
            self._save(updated)
            return updated

    def delete_item(self, collection: StoredCollection, object_id: str) -> StoredCollection:
        with self._lock:
            current = self._current(collection)
            index = _index(list(current.items), object_id)
            items = current.items[:index] + current.items[index + 1 :]
            updated = replace(current, items=items, last_updated=now_iso())
            self._save(updated)
            return updated

    def _current(self, collection: StoredCollection) -> StoredCollection:
        current = self._collections.get(collection.id)
        if current is None:
            raise errors.HubError(404, f"Collection {collection.slug} not found")
        return current

    def _save(self, collection: StoredCollection) -> None:
        write_json_atomic(self._dir / f"{collection.id}.json", collection.to_json())
        self._collections[collection.id] = collection


def check_note(note: str | None) -> None:
    if note is not None and len(note) > NOTE_MAX_CHARS:
        raise errors.bad_request(f"The note is {len(note)} characters; the maximum is {NOTE_MAX_CHARS}")


def _index(items: list[Item], object_id: str) -> int:
    for index, item in enumerate(items):
        if item.object_id == object_id:
            return index
    raise errors.HubError(404, f"Item {object_id} not found in the collection")
