"""File downloads: `/{repo}/resolve/{revision}/{path}` (GET and HEAD), with the headers hf_hub_download checks.

The client needs `X-Repo-Commit` (which commit the revision meant), a quoted `ETag` (git sha1 for regular files,
sha256 for LFS files: it names the cached blob) and `Content-Length`; a missing one makes it refuse the file.
Range requests are served, since resumed downloads and safetensors header reads use them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from . import errors
from .protocol import GIT_PREFIX, SEG, Request, Response, RouteTable

if TYPE_CHECKING:
    from .app import HubApp

routes = RouteTable()

_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The [start, end) a single-range `Range` header asks for; None to send the whole file.

    Raises:
        HubError: 416 when the range lies outside the file.
    """
    if not header:
        return None
    match = _RANGE_RE.match(header.strip())
    if match is None:
        return None  # multiple ranges or another unit: answering with the whole file is allowed
    first, last = match.groups()
    if first == "" and last == "":
        return None
    if first == "":
        start, end = max(size - int(last), 0), size
    else:
        start = int(first)
        end = min(int(last) + 1, size) if last else size
    if start >= size or start >= end:
        raise errors.HubError(416, "Requested range not satisfiable", headers={"Content-Range": f"bytes */{size}"})
    return start, end


@routes.route("GET HEAD", rf"/{GIT_PREFIX}{SEG}/{SEG}/resolve/{SEG}/(.+)")
def resolve(hub: HubApp, req: Request) -> Response:
    prefix, namespace, name, revision, path = req.params
    repo_type = prefix[:-1] if prefix else "model"
    repo = hub.visible_repo(req, repo_type, f"{namespace}/{name}")
    if not hub.accounts.can_download(req.caller, repo):
        raise errors.gated(repo.repo_id, authenticated=req.caller.user is not None)
    commit = hub.store.resolve(repo, revision)
    entry = commit.files.get(path)
    if entry is None:
        raise errors.entry_not_found(path, commit.id)
    headers = {
        "X-Repo-Commit": commit.id,
        "ETag": f'"{entry.etag}"',
        "Accept-Ranges": "bytes",
        "Content-Type": "application/octet-stream",
    }
    byte_range = parse_range(req.headers.get("Range"), entry.size)
    if byte_range is None:
        return Response(headers=headers, file=hub.store.blob_path(entry.sha256), file_range=(0, entry.size))
    start, end = byte_range
    headers["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
    return Response(status=206, headers=headers, file=hub.store.blob_path(entry.sha256), file_range=(start, end))
