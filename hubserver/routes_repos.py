"""Repo-level API: create, settings, listings, info, refs, history, trees and tags: what the bot's client calls
(bot/hub/) and the tests that inspect its results use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import auth, errors
from .protocol import REPO, REPO_TYPE, SEG, Request, Response, RouteTable
from .storage import REPO_TYPES, Repo
from .views import check_expand, commit_json, expanded, listing_item, refs_json, repo_info_json, repo_url, tree_json

if TYPE_CHECKING:
    from .app import HubApp

routes = RouteTable()

_SORT_FIELDS = {"lastModified", "createdAt", "id", "downloads", "likes", "trendingScore"}
_GATED_VALUES = ("auto", "manual", False)


def singular(plural: str) -> str:
    """`models` -> `model`, as URL segments name repo types."""
    return plural[:-1]


def _repo_id_from_body(req: Request, body: dict[str, Any]) -> tuple[str, str]:
    """(repo_type, repo_id) from a create/delete body: `organization` defaults to the caller's own namespace."""
    repo_type = body.get("type") or "model"
    if repo_type not in REPO_TYPES:
        raise errors.bad_request(f"Invalid repo type {repo_type!r}")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise errors.bad_request("Missing repo name")
    namespace = body.get("organization") or req.caller.user
    return repo_type, f"{namespace}/{name}"


@routes.route("POST", "/api/repos/create")
def create_repo(hub: HubApp, req: Request) -> Response:
    body = req.json_object()
    if req.caller.user is None:
        raise errors.unauthorized()
    repo_type, repo_id = _repo_id_from_body(req, body)
    hub.accounts.require_write(req.caller, repo_id.split("/")[0], f"create a {repo_type} repo")
    private = body.get("visibility") == "private" or bool(body.get("private"))
    repo, created = hub.store.create_repo(
        repo_type, repo_id, private=private, author=req.caller.user, sdk=body.get("sdk")
    )
    url = repo_url(req.base_url, repo.repo_type, repo.repo_id)
    if not created:
        # `create_repo(exist_ok=True)` reads `url` from this 409 body.
        raise errors.conflict(f"You already created this {repo_type} repo", url=url)
    return Response.json({"url": url, "name": repo_id, "id": repo_id})


@routes.route("DELETE", "/api/repos/delete")
def delete_repo(hub: HubApp, req: Request) -> Response:
    """What a maintainer does by hand; the status-repo tests delete one to see the bot rebuild it."""
    body = req.json_object()
    repo_type, repo_id = _repo_id_from_body(req, body)
    repo = hub.writable_repo(req, repo_type, repo_id)
    hub.store.delete_repo(repo.repo_type, repo.repo_id)
    return Response.json({})


@routes.route("PUT", rf"/api/{REPO}/settings")
def update_settings(hub: HubApp, req: Request) -> Response:
    kind, namespace, name = req.params
    repo = hub.writable_repo(req, singular(kind), f"{namespace}/{name}")
    body = req.json_object()
    private = body.get("private")
    if body.get("visibility") is not None:
        if body["visibility"] not in ("private", "public"):
            raise errors.bad_request(f"Invalid visibility {body['visibility']!r}")
        private = body["visibility"] == "private"
    gated = body.get("gated")
    if "gated" in body and gated not in _GATED_VALUES:
        raise errors.bad_request(f"Invalid gated value {gated!r}: expected 'auto', 'manual' or false")
    updated = hub.store.update_repo(
        repo, private=None if private is None else bool(private), gated=gated if "gated" in body else None
    )
    return Response.json({"private": updated.private, "gated": updated.gated})


@routes.route("GET", f"/api/{REPO_TYPE}")
def list_repos(hub: HubApp, req: Request) -> Response:
    """Filters (`author`, `search`, `filter`), sort (descending, as the Hub sorts), `limit`, the fields `expand`
    names, then pages of `page_size` linked by `Link` headers."""
    repo_type = singular(req.params[0])
    author = req.arg("author")
    searches = [value.lower() for value in req.args("search")]
    wanted_tags = req.args("filter")
    infos = []
    for repo in hub.store.repos(repo_type):
        if not hub.accounts.can_see(req.caller, repo):
            continue
        commit = hub.store.get_commit(repo, repo.head)
        info = repo_info_json(repo, commit, hub.metadata.get(commit))
        tags = set(info["tags"])
        if author and repo.namespace.lower() != author.lower():
            continue
        if not all(search in repo.repo_id.lower() for search in searches):
            continue
        if not all(tag in tags for tag in wanted_tags):
            continue
        infos.append(info)
    sort = req.arg("sort")
    if sort is not None:
        if sort not in _SORT_FIELDS:
            raise errors.bad_request(f"Invalid sort {sort!r}: expected one of {sorted(_SORT_FIELDS)}")
        infos.sort(key=lambda info: info["id"])
        infos.sort(key=lambda info: info[sort], reverse=True)
    else:
        infos.sort(key=lambda info: info["id"])
    limit = req.arg("limit")
    if limit is not None:
        if not limit.isdigit():
            raise errors.bad_request(f"Invalid limit {limit!r}")
        infos = infos[: int(limit)]
    expand = req.args("expand")
    check_expand(expand, repo_type, listing=True)
    return hub.paginate(
        req, infos, key=lambda info: info["id"], render=lambda info: listing_item(info, repo_type, expand=expand)
    )


@routes.route("GET", rf"/api/{REPO}(?:/revision/{SEG})?")
def repo_info(hub: HubApp, req: Request) -> Response:
    kind, namespace, name, revision = req.params
    repo = hub.visible_repo(req, singular(kind), f"{namespace}/{name}")
    expand = req.args("expand")
    check_expand(expand, repo.repo_type, listing=False)
    commit = hub.revision(repo, revision)
    info = repo_info_json(repo, commit, hub.metadata.get(commit), blobs=req.flag("blobs"))
    return Response.json(expanded(info, expand) if expand else info)


@routes.route("GET", rf"/api/{REPO}/refs")
def list_refs(hub: HubApp, req: Request) -> Response:
    kind, namespace, name = req.params
    repo = hub.visible_repo(req, singular(kind), f"{namespace}/{name}")
    return Response.json(refs_json(repo))


@routes.route("GET", rf"/api/{REPO}/commits/{SEG}")
def list_commits(hub: HubApp, req: Request) -> Response:
    kind, namespace, name, revision = req.params
    repo = hub.visible_repo(req, singular(kind), f"{namespace}/{name}")
    history = list(hub.store.history(repo, hub.revision(repo, revision)))
    return hub.paginate(req, history, key=lambda commit: commit.id, render=commit_json)


@routes.route("GET", rf"/api/{REPO}/tree/{SEG}(?:/(.*))?")
def list_tree(hub: HubApp, req: Request) -> Response:
    kind, namespace, name, revision, folder = req.params
    repo = hub.visible_repo(req, singular(kind), f"{namespace}/{name}")
    commit = hub.revision(repo, revision)
    entries = tree_json(commit, folder.strip("/"), recursive=req.flag("recursive"))
    if entries is None:
        raise errors.entry_not_found(folder, commit.id)
    return hub.paginate(req, entries, key=lambda entry: entry["path"], render=lambda entry: entry)


def _writable(hub: HubApp, req: Request) -> tuple[Repo, str]:
    kind, namespace, name, ref = req.params
    return hub.writable_repo(req, singular(kind), f"{namespace}/{name}"), ref


@routes.route("POST", rf"/api/{REPO}/tag/{SEG}")
def create_tag(hub: HubApp, req: Request) -> Response:
    repo, revision = _writable(hub, req)
    tag = req.json_object().get("tag")
    if not isinstance(tag, str) or not tag:
        raise errors.bad_request("Missing tag name")
    hub.store.create_tag(repo, tag, hub.revision(repo, revision))
    return Response.json({})


@routes.route("GET", "/api/whoami-v2")
def whoami(hub: HubApp, req: Request) -> Response:
    """Who the token belongs to (`HfApi.whoami`): the name its commits are authored by, its organisations and
    roles, the token's role and scopes (`hubserver.auth.whoami`)."""
    if req.caller.user is None:
        raise errors.unauthorized()
    return Response.json(auth.whoami(req.caller))
