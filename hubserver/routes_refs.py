"""Branches, tag deletion, `paths-info`, and the Hub's answer to a repo id without a namespace.

Shapes and statuses follow huggingface_hub 1.21.0's calls: `create_branch` POSTs `{"startingPoint": rev}` to
`/api/{t}/{repo}/branch/{branch}` and treats 409 as "exists" (`exist_ok`); `delete_branch` and `delete_tag` send
DELETE to `…/branch/{branch}` and `…/tag/{tag}`; `get_paths_info` POSTs the form fields `paths` (repeated) and
`expand` to `…/paths-info/{rev}` and parses a list of tree entries (missing paths are left out, not an error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from . import errors
from .protocol import GIT_PREFIX, REPO, REPO_TYPE, SEG, Request, Response, RouteTable
from .storage import Commit, HubStore, Repo
from .views import file_json, folder_json, folders_of

if TYPE_CHECKING:
    from .app import HubApp

routes = RouteTable()


def _writable(hub: HubApp, req: Request) -> tuple[Repo, str]:
    kind, namespace, name, ref = req.params
    return hub.writable_repo(req, kind[:-1], f"{namespace}/{name}"), ref


@routes.route("POST", rf"/api/{REPO}/branch/{SEG}")
def create_branch(hub: HubApp, req: Request) -> Response:
    repo, branch = _writable(hub, req)
    starting_point = req.json_object().get("startingPoint")
    if starting_point is not None and not isinstance(starting_point, str):
        raise errors.bad_request("`startingPoint` must be a revision")
    hub.store.create_branch(repo, branch, hub.revision(repo, starting_point))
    return Response.json({})


@routes.route("DELETE", rf"/api/{REPO}/branch/{SEG}")
def delete_branch(hub: HubApp, req: Request) -> Response:
    repo, branch = _writable(hub, req)
    hub.store.delete_branch(repo, branch)
    return Response.json({})


@routes.route("DELETE", rf"/api/{REPO}/tag/{SEG}")
def delete_tag(hub: HubApp, req: Request) -> Response:
    repo, tag = _writable(hub, req)
    hub.store.delete_tag(repo, tag)
    return Response.json({})


@routes.route("POST", rf"/api/{REPO}/paths-info/{SEG}")
def paths_info(hub: HubApp, req: Request) -> Response:
    """One tree entry per existing path (file or folder); with `expand`, each file's `lastCommit` too."""
    kind, namespace, name, revision = req.params
    repo = hub.visible_repo(req, kind[:-1], f"{namespace}/{name}")
    commit = hub.revision(repo, revision)
    form = _form(req)
    expand = (form.get("expand") or ["false"])[-1].lower() in ("1", "true")
    files = dict(commit.files)
    folders = folders_of(files)
    entries: list[dict[str, Any]] = []
    for raw in dict.fromkeys(form.get("paths", [])):
        path = raw.strip("/")
        if path in files:
            entry = file_json(path, files[path])
            if expand:
                entry["lastCommit"] = _last_commit(hub.store, repo, commit, path)
            entries.append(entry)
        elif path in folders:
            entries.append(folder_json(path, files))
    return Response.json(entries)


def _form(req: Request) -> dict[str, list[str]]:
    """The client sends a form (`data=`); a JSON object with the same keys is accepted too."""
    raw = req.body.read()
    if "json" in (req.headers.get("Content-Type") or ""):
        data = req.json_object()
        return {key: value if isinstance(value, list) else [str(value)] for key, value in data.items()}
    return parse_qs(raw.decode("utf-8", errors="replace"), keep_blank_values=True)


def _last_commit(store: HubStore, repo: Repo, start: Commit, path: str) -> dict[str, str]:
    """The newest commit (from `start` back) that set `path` to its content at `start`."""
    oid = start.files[path].oid
    last = start
    for commit in store.history(repo, start):
        entry = commit.files.get(path)
        if entry is None or entry.oid != oid:
            break
        last = commit
    return {"id": last.id, "title": last.title, "date": last.date}


def _no_namespace(name: str) -> errors.HubError:
    """What the Hub answers for an id without a namespace that names no (legacy) repo: RepoNotFound, so
    huggingface_hub raises RepositoryNotFoundError (not a bare 404)."""
    return errors.repo_not_found(name)


@routes.route("GET HEAD", rf"/api/{REPO_TYPE}/{SEG}(?:/revision/{SEG})?")
def repo_info_without_namespace(hub: HubApp, req: Request) -> Response:
    raise _no_namespace(req.params[1])


@routes.route("GET HEAD", rf"/{GIT_PREFIX}{SEG}/resolve/{SEG}/(.+)")
def resolve_without_namespace(hub: HubApp, req: Request) -> Response:
    raise _no_namespace(req.params[1])
