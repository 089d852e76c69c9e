"""Collections API, as huggingface_hub 1.21.0 calls it (`create_collection`, `get_collection`, `list_collections`,
`update_collection_metadata`, `delete_collection`, `add_collection_item`, `update_collection_item`,
`delete_collection_item`):

    GET    /api/collections                          ?owner=&item=models/ns/name&sort=&limit=  (4 items each)
    POST   /api/collections                          {title, namespace, description?, private?}; 409 + slug
    GET    /api/collections/{ns}/{slug}              the collection with every item
    PATCH  /api/collections/{ns}/{slug}              {title?, description?, private?, theme?, position?}
    DELETE /api/collections/{ns}/{slug}
    POST   /api/collections/{ns}/{slug}/items        {item: {id, type}, note?}; 409 for a duplicate, 404 no repo
    PATCH  /api/collections/{ns}/{slug}/items/{id}   {note?, position?}
    DELETE /api/collections/{ns}/{slug}/items/{id}

Response shapes follow huggingface.co: `owner` is an object, an item's `note` is `{text, html}`, and items whose
repo was deleted or is invisible to the caller are left out.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from . import auth, errors
from .collection_store import ITEM_TYPES, StoredCollection
from .protocol import SEG, Request, Response, RouteTable
from .views import repo_info_json

if TYPE_CHECKING:
    from .app import HubApp

routes = RouteTable()

_REPO_ITEM_TYPES = ("model", "dataset", "space")
_LISTING_ITEMS = 4  # the Hub truncates each collection's items to 4 in listings
_SORTS = ("lastModified", "trending", "upvotes")
COLLECTION = rf"/api/collections/{SEG}/{SEG}"


def _visible(hub: HubApp, req: Request, collection: StoredCollection) -> bool:
    caller = req.caller
    return not collection.private or caller.admin or collection.namespace in caller.namespaces


def _readable(hub: HubApp, req: Request) -> StoredCollection:
    namespace, rest = req.params[0], req.params[1]
    collection = hub.collections.find(f"{namespace}/{rest}")
    if not _visible(hub, req, collection):
        raise errors.HubError(404, f"Collection {namespace}/{rest} not found")
    return collection


def _writable(hub: HubApp, req: Request) -> StoredCollection:
    if req.caller.user is None:
        raise errors.unauthorized()
    collection = _readable(hub, req)
    hub.accounts.require_write(
        req.caller, collection.namespace, f"change the collection {collection.slug}", auth.COLLECTION_WRITE
    )
    return collection


def _owner(hub: HubApp, namespace: str) -> dict[str, Any]:
    kind = "user" if namespace == hub.accounts.main_user else "org"
    return {
        "_id": namespace,
        "name": namespace,
        "fullname": namespace,
        "type": kind,
        "avatarUrl": "",
        "isHf": False,
        "isHfAdmin": False,
        "isMod": False,
        "isPro": False,
        "isEnterprise": False,
    }


def _item_json(hub: HubApp, req: Request, item: Any) -> dict[str, Any] | None:
    """An item as the Hub shows it, or None when it points to a repo the caller cannot see (or that is gone)."""
    data: dict[str, Any] = {
        "_id": item.object_id,
        "id": item.item_id,
        "type": item.item_type,
        "position": item.position,
    }
    if item.note:
        data["note"] = {"text": item.note, "html": html.escape(item.note)}
    if item.item_type in _REPO_ITEM_TYPES:
        repo = hub.store.get_repo(item.item_type, item.item_id)
        if repo is None or not hub.accounts.can_see(req.caller, repo):
            return None
        head = hub.store.get_commit(repo, repo.head)
        info = repo_info_json(repo, head, hub.metadata.get(head))
        data.update(
            {
                key: info[key]
                for key in ("author", "private", "gated", "lastModified", "likes", "downloads")
                if key in info
            }
        )
        data.update({"repoType": item.item_type, "isLikedByUser": False})
        if "pipeline_tag" in info:
            data["pipeline_tag"] = info["pipeline_tag"]
    return data


def collection_json(
    hub: HubApp, req: Request, collection: StoredCollection, *, listing: bool = False
) -> dict[str, Any]:
    """The collection as `huggingface_hub.Collection` parses it.

    A listing leaves `position` out (the client numbers listed collections itself and would get it twice)
    and keeps the first 4 items only.
    """
    items = [
        shown
        for item in sorted(collection.items, key=lambda i: i.position)
        if (shown := _item_json(hub, req, item)) is not None
    ]
    data: dict[str, Any] = {
        "slug": collection.slug,
        "title": collection.title,
        "description": collection.description,
        "owner": _owner(hub, collection.namespace),
        "items": items[:_LISTING_ITEMS] if listing else items,
        "lastUpdated": collection.last_updated,
        "theme": collection.theme,
        "private": collection.private,
        "upvotes": 0,
        "isUpvotedByUser": False,
        "gating": False,
        "shareUrl": f"{req.base_url}/collections/{collection.slug}",
    }
    if not listing:
        mine = [c.id for c in hub.collections.all() if c.namespace == collection.namespace]
        data["position"] = mine.index(collection.id) if collection.id in mine else 0
    return data


@routes.route("GET", "/api/collections")
def list_collections(hub: HubApp, req: Request) -> Response:
    owners = set(req.args("owner"))
    wanted_items = req.args("item")
    sort = req.arg("sort")
    if sort is not None and sort not in _SORTS:
        raise errors.bad_request(f"Invalid sort {sort!r}: expected one of {list(_SORTS)}")
    found = []
    for collection in hub.collections.all():  # lastModified order; trending/upvotes are all 0 here
        if not _visible(hub, req, collection) or (owners and collection.namespace not in owners):
            continue
        present = {f"{item.item_type}s/{item.item_id}" for item in collection.items}
        if not all(wanted in present for wanted in wanted_items):
            continue
        found.append(collection)
    limit = req.arg("limit")
    if limit is not None:
        if not limit.isdigit():
            raise errors.bad_request(f"Invalid limit {limit!r}")
        found = found[: int(limit)]
    return hub.paginate(req, found, key=lambda c: c.id, render=lambda c: collection_json(hub, req, c, listing=True))


@routes.route("POST", "/api/collections")
def create_collection(hub: HubApp, req: Request) -> Response:
    if req.caller.user is None:
        raise errors.unauthorized()
    body = req.json_object()
    title, namespace = body.get("title"), body.get("namespace") or req.caller.user
    if not isinstance(title, str) or not isinstance(namespace, str):
        raise errors.bad_request("Expected {title: str, namespace: str, description?: str, private?: bool}")
    hub.accounts.require_write(req.caller, namespace, "create a collection", auth.COLLECTION_WRITE)
    description = body.get("description")
    collection = hub.collections.create(
        namespace,
        title,
        description=description if isinstance(description, str) else None,
        private=bool(body.get("private")),
    )
    return Response.json(collection_json(hub, req, collection))


@routes.route("GET", COLLECTION)
def get_collection(hub: HubApp, req: Request) -> Response:
    return Response.json(collection_json(hub, req, _readable(hub, req)))


@routes.route("PATCH", COLLECTION)
def update_collection(hub: HubApp, req: Request) -> Response:
    collection = _writable(hub, req)
    body = req.json_object()
    position = body.get("position")
    if position is not None and not isinstance(position, int):
        raise errors.bad_request("position must be an integer")
    changes = {key: body.get(key) for key in ("title", "description", "theme")}
    if body.get("private") is not None:
        changes["private"] = bool(body["private"])
    updated = hub.collections.update(collection, **changes)
    return Response.json({"success": True, "data": collection_json(hub, req, updated)})


@routes.route("DELETE", COLLECTION)
def delete_collection(hub: HubApp, req: Request) -> Response:
    hub.collections.delete(_writable(hub, req))
    return Response.json({})


@routes.route("POST", rf"{COLLECTION}/items")
def add_item(hub: HubApp, req: Request) -> Response:
    collection = _writable(hub, req)
    body = req.json_object()
    item = body.get("item")
    note = body.get("note")
    if not isinstance(item, dict) or not isinstance(item.get("id"), str) or item.get("type") not in ITEM_TYPES:
        raise errors.bad_request(f"Expected {{item: {{id: str, type: one of {list(ITEM_TYPES)}}}, note?: str}}")
    if note is not None and not isinstance(note, str):
        raise errors.bad_request("note must be a string")
    if item["type"] in _REPO_ITEM_TYPES:
        repo = hub.store.get_repo(item["type"], item["id"])
        if repo is None or not hub.accounts.can_see(req.caller, repo):
            raise errors.repo_not_found(item["id"])
    elif item["type"] == "collection":
        hub.collections.find(item["id"])
    updated = hub.collections.add_item(collection, item["type"], item["id"], note)
    return Response.json(collection_json(hub, req, updated))


@routes.route("PATCH", rf"{COLLECTION}/items/{SEG}")
def update_item(hub: HubApp, req: Request) -> Response:
    collection = _writable(hub, req)
    body = req.json_object()
    note, position = body.get("note"), body.get("position")
    if note is not None and not isinstance(note, str):
        raise errors.bad_request("note must be a string")
    if position is not None and not isinstance(position, int):
        raise errors.bad_request("position must be an integer")
    updated = hub.collections.update_item(collection, req.params[2], note=note, position=position)
    return Response.json({"success": True, "data": collection_json(hub, req, updated)})


@routes.route("DELETE", rf"{COLLECTION}/items/{SEG}")
def delete_item(hub: HubApp, req: Request) -> Response:
    hub.collections.delete_item(_writable(hub, req), req.params[2])
    return Response.json({"success": True})
