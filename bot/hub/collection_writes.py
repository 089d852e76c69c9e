"""The Hub collection the bot keeps of its published pairs (`bot.publish.collection`): made once, items added,
their notes updated, stale ones removed.
"""

from __future__ import annotations

from bot.core.errors import Stage
from bot.core.hub_records import CollectionEntry, CollectionState, parse_collection
from bot.hub.transport import Transport


class CollectionWrites(Transport):
    """A namespace's collection and its items (a write token's)."""

    def ensure_collection(
        self, title: str, namespace: str, *, description: str | None = None, private: bool = False
    ) -> CollectionState:
        """The namespace's collection of this title, created when missing (one POST; a GET when it exists)."""
        return self.call(
            Stage.COLLECTION,
            lambda: parse_collection(
                self.api.create_collection(
                    title, namespace=namespace, description=description, private=private, exists_ok=True
                )
            ),
            subject=f"collection {namespace}/{title}",
        )

    def add_collection_item(self, slug: str, repo_id: str, *, note: str | None) -> CollectionState:
        """Add a model repo to a collection; one already there is left as it is (`exists_ok`)."""
        return self.call(
            Stage.COLLECTION,
            lambda: parse_collection(self.api.add_collection_item(slug, repo_id, "model", note=note, exists_ok=True)),
            subject=slug,
        )

    def update_collection_note(self, slug: str, item: CollectionEntry, note: str) -> None:
        self.call(
            Stage.COLLECTION, lambda: self.api.update_collection_item(slug, item.object_id, note=note), subject=slug
        )

    def remove_collection_item(self, slug: str, item: CollectionEntry) -> None:
        self.call(
            Stage.COLLECTION,
            lambda: self.api.delete_collection_item(slug, item.object_id, missing_ok=True),
            subject=slug,
        )
