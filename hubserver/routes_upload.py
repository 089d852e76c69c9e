"""The write path of `create_commit`, in the client's order: validate-yaml, preupload, LFS batch, upload, verify,
commit.

LFS uploads go to `PUT /_lfs/upload/{oid}?size=…&expires=…&signature=…` without credentials, as the Hub's
presigned storage URLs do: the batch endpoint signs the oid, size and expiry, and the upload route accepts any
number of PUTs of exactly that content until the URL expires. So two writers that announce the same object at
once both upload it (the store keeps one copy; whoever lands second finds it there), and a retried PUT works, as
on the real Hub; an unsigned, altered or expired URL is refused. The commit itself is all-or-nothing (see
`HubStore.commit`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from typing import TYPE_CHECKING, Any

from . import errors, gitignore
from .card_rules import check_metadata
from .gitobjects import LFS_SIZE_THRESHOLD, check_repo_path, lfs_patterns, looks_binary, needs_lfs
from .metadata import CardError, parse_front_matter
from .protocol import GIT_PREFIX, REPO, SEG, Request, Response, RouteTable
from .storage import REPO_TYPES, AddFile, CommitOp, DeleteFile, DeleteFolder, FileEntry
from .views import repo_url

if TYPE_CHECKING:
    from .app import HubApp

routes = RouteTable()

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_LFS_JSON = {"Content-Type": "application/vnd.git-lfs+json"}
_NO_PULL_REQUESTS = "Pull requests are not supported by the local hub"
UPLOAD_URL_LIFETIME = 3600  # seconds, what the batch answer states as `expires_in`
MAX_CARD_BYTES = 5 * 1024 * 1024  # larger READMEs are not parsed for metadata (metadata._MAX_PARSED_FILE)


@routes.route("POST", "/api/validate-yaml")
def validate_yaml(hub: HubApp, req: Request) -> Response:
    """The Hub's card check (`card_rules`): 400 with `errors` makes the client raise ValueError before it uploads
    anything (`HfApi._validate_yaml` joins the `errors` messages; `RepoCard.validate` asks for `text/plain` and
    raises the text)."""
    body = req.json_object()
    content = body.get("content")
    if not isinstance(content, str):
        raise errors.bad_request("Missing `content`")
    repo_type = body.get("repoType") or "model"
    if repo_type not in REPO_TYPES:
        raise errors.bad_request(f"Invalid repoType {repo_type!r}")
    problems, metadata = card_problems(hub, content, repo_type)
    warnings = [] if metadata or problems else ["Empty or missing yaml metadata in repo card"]
    if "text/plain" in (req.headers.get("Accept") or ""):
        text = "\n".join([f"- Error: {m}" for m in problems] + [f"- Warning: {m}" for m in warnings])
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        if problems:
            headers["X-Error-Message"] = _header_text(problems[0])
        return Response(status=400 if problems else 200, body=text.encode(), headers=headers)
    answer: dict[str, Any] = {
        "errors": [{"message": m} for m in problems],
        "warnings": [{"message": m} for m in warnings],
    }
    if not problems:
        return Response.json(answer)
    answer["error"] = "Invalid metadata in README.md: " + "; ".join(problems)
    return Response.json(answer, status=400, headers={"X-Error-Message": _header_text(answer["error"])})


def card_problems(hub: HubApp, content: str, repo_type: str) -> tuple[list[str], dict[str, Any] | None]:
    """The Hub's error messages for a README.md text (none when it is accepted), and its parsed metadata."""
    try:
        metadata = parse_front_matter(content)
    except CardError as exc:
        return [str(exc)], None
    if not metadata:
        return [], metadata
    problems = check_metadata(
        metadata, repo_type, model_exists=lambda repo_id: hub.store.get_repo("model", repo_id) is not None
    )
    return problems, metadata


def _header_text(message: str) -> str:
    return " ".join(message.split()).encode("latin-1", "replace").decode("latin-1")[:1000]


def _writable_branch(hub: HubApp, req: Request):
    """The repo a preupload or commit writes to, and its branch; pull requests are refused for both."""
    kind, namespace, name, branch = req.params
    repo = hub.writable_repo(req, kind[:-1], f"{namespace}/{name}")
    if req.flag("create_pr"):
        raise errors.bad_request(_NO_PULL_REQUESTS)
    return repo, branch


@routes.route("POST", rf"/api/{REPO}/preupload/{SEG}")
def preupload(hub: HubApp, req: Request) -> Response:
    """Upload mode per file, the remote `oid` of files already at that path so unchanged ones are skipped, and
    `shouldIgnore` by the `.gitignore` the client sends (`gitIgnore`, the one it commits) or else the branch's."""
    repo, branch = _writable_branch(hub, req)
    if branch not in repo.branches:
        raise errors.revision_not_found(branch)
    head = hub.store.get_commit(repo, repo.branches[branch])
    attributes = head.files.get(".gitattributes")
    patterns = lfs_patterns(hub.store.read_blob(attributes.sha256).decode(errors="replace")) if attributes else []
    body = req.json_object()
    ignore_text = body.get("gitIgnore")
    if not isinstance(ignore_text, str):
        ignore_file = head.files.get(".gitignore")
        ignore_text = hub.store.read_blob(ignore_file.sha256).decode(errors="replace") if ignore_file else ""
    ignore_rules = gitignore.parse(ignore_text)
    answers = []
    for item in body.get("files") or []:
        path, size = item.get("path"), item.get("size")
        if not isinstance(path, str) or not isinstance(size, int):
            raise errors.bad_request("Each file needs `path` and `size`")
        if problem := check_repo_path(path):
            raise errors.HubError(422, problem)
        try:
            sample = base64.b64decode(item.get("sample") or "")
        except (binascii.Error, ValueError):
            raise errors.bad_request(f"Invalid base64 sample for {path}") from None
        existing = head.files.get(path)
        answers.append(
            {
                "path": path,
                "uploadMode": "lfs" if needs_lfs(path, size, sample, patterns) else "regular",
                "shouldIgnore": path != ".gitignore" and gitignore.is_ignored(path, ignore_rules),
                "oid": existing.etag if existing else None,
            }
        )
    return Response.json({"files": answers, "commitOid": head.id})


@routes.route("POST", rf"/{GIT_PREFIX}{SEG}/([^/]+?)\.git/info/lfs/objects/batch")
def lfs_batch(hub: HubApp, req: Request) -> Response:
    """Objects already stored come back without `actions`, so the client does not send them again."""
    prefix, namespace, name = req.params
    repo = hub.writable_repo(req, prefix[:-1] if prefix else "model", f"{namespace}/{name}")
    body = req.json_object()
    if body.get("operation") != "upload":
        raise errors.bad_request("Only the LFS `upload` operation is supported; download through /resolve/")
    verify_href = f"{repo_url(req.base_url, repo.repo_type, repo.repo_id)}.git/info/lfs/objects/verify"
    objects = []
    for item in body.get("objects") or []:
        oid, size = item.get("oid"), item.get("size")
        if not isinstance(oid, str) or not _SHA256_RE.match(oid) or not isinstance(size, int) or size < 0:
            objects.append({"oid": str(oid), "size": size if isinstance(size, int) else 0,
                            "error": {"code": 422, "message": "Invalid oid or size"}})  # fmt: skip
            continue
        if hub.store.has_blob(oid, size):
            objects.append({"oid": oid, "size": size})
            continue
        objects.append(
            {
                "oid": oid,
                "size": size,
                "authenticated": True,
                "actions": {
                    "upload": {"href": _upload_url(hub, req.base_url, oid, size), "expires_in": UPLOAD_URL_LIFETIME},
                    "verify": {"href": verify_href, "expires_in": UPLOAD_URL_LIFETIME},
                },
            }
        )
    return Response.json({"transfer": "basic", "objects": objects, "hash_algo": "sha256"}, headers=_LFS_JSON)


def _upload_signature(hub: HubApp, oid: str, size: int, expires: int) -> str:
    return hmac.new(hub.upload_key, f"{oid}:{size}:{expires}".encode(), hashlib.sha256).hexdigest()


def _upload_url(hub: HubApp, base_url: str, oid: str, size: int) -> str:
    """A presigned upload URL: valid for this oid and size, for any number of PUTs, until it expires."""
    expires = int(time.time()) + UPLOAD_URL_LIFETIME
    signature = _upload_signature(hub, oid, size, expires)
    return f"{base_url}/_lfs/upload/{oid}?size={size}&expires={expires}&signature={signature}"


def _signed_upload_size(hub: HubApp, req: Request, oid: str) -> int:
    """The size a presigned upload URL was issued for.

    Raises:
        HubError: 403 when the URL was not issued by this server's batch endpoint, was altered, or has expired.
    """
    size, expires, signature = req.arg("size"), req.arg("expires"), req.arg("signature")
    if not (size and expires and signature and size.isdigit() and expires.isdigit()):
        raise errors.HubError(403, f"The upload URL for {oid} is not signed: ask the LFS batch endpoint for one")
    if not hmac.compare_digest(signature, _upload_signature(hub, oid, int(size), int(expires))):
        raise errors.HubError(403, f"The upload URL for {oid} has a wrong signature")
    if int(expires) < time.time():
        raise errors.HubError(403, f"The upload URL for {oid} has expired")
    return int(size)


@routes.route("PUT", f"/_lfs/upload/{SEG}")
def lfs_upload(hub: HubApp, req: Request) -> Response:
    """Store the object unless it is there already (another writer's upload of the same bytes got there first)."""
    (oid,) = req.params
    size = _signed_upload_size(hub, req, oid)
    if not hub.store.has_blob(oid, size):
        hub.store.put_stream(req.body.chunks(), oid, size)
    return Response(headers={"ETag": f'"{oid}"'})


@routes.route("POST", rf"/{GIT_PREFIX}{SEG}/([^/]+?)\.git/info/lfs/objects/verify")
def lfs_verify(hub: HubApp, req: Request) -> Response:
    prefix, namespace, name = req.params
    hub.writable_repo(req, prefix[:-1] if prefix else "model", f"{namespace}/{name}")
    body = req.json_object()
    oid, size = body.get("oid"), body.get("size")
    if not isinstance(oid, str) or not _SHA256_RE.match(oid) or not hub.store.has_blob(oid, size):
        raise errors.HubError(404, f"Object {oid} with size {size} not found")
    return Response.json({"message": "Object verified"}, headers=_LFS_JSON)


@routes.route("POST", rf"/api/{REPO}/commit/{SEG}")
def commit(hub: HubApp, req: Request) -> Response:
    """Apply an NDJSON commit: a `header` line, then `file`, `lfsFile`, `deletedFile` and `deletedFolder` lines."""
    repo, branch = _writable_branch(hub, req)
    lines = _ndjson(req.body.read())
    if not lines or lines[0].get("key") != "header":
        raise errors.bad_request("The commit payload must start with a `header` line")
    header = lines[0].get("value") or {}
    title = header.get("summary")
    if not isinstance(title, str) or not title.strip():
        raise errors.bad_request("The commit needs a summary")
    ops = [_operation(hub, line) for line in lines[1:]]
    _check_card(hub, repo.repo_type, ops)
    assert req.caller.user is not None  # writable_repo refused anonymous callers
    new = hub.store.commit(
        repo,
        branch,
        ops,
        title=title,
        message=header.get("description") or "",
        author=req.caller.user,
        parent=header.get("parentCommit"),
    )
    return Response.json(
        {
            "success": True,
            "commitOid": new.id,
            "commitUrl": f"{repo_url(req.base_url, repo.repo_type, repo.repo_id)}/commit/{new.id}",
            "pullRequestUrl": None,
        }
    )


def _check_card(hub: HubApp, repo_type: str, ops: list[CommitOp]) -> None:
    """Refuse a commit whose README.md metadata the Hub refuses, as its pre-receive check does (the text of that
    refusal, "Sorry, your push was rejected during YAML metadata verification", is the one git pushes print)."""
    cards = [op for op in ops if isinstance(op, AddFile) and op.path == "README.md"]
    if not cards or cards[-1].entry.size > MAX_CARD_BYTES:
        return
    content = hub.store.read_blob(cards[-1].entry.sha256).decode("utf-8", errors="replace")
    problems, _ = card_problems(hub, content, repo_type)
    if problems:
        listed = "\n".join(f"- Error: {problem}" for problem in problems)
        raise errors.bad_request(f"Sorry, your push was rejected during YAML metadata verification:\n{listed}")


def _ndjson(data: bytes) -> list[dict[str, Any]]:
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            raise errors.bad_request(f"Line {number} of the commit payload is not JSON") from None
        if not isinstance(line, dict):
            raise errors.bad_request(f"Line {number} of the commit payload is not an object")
        lines.append(line)
    return lines


def _operation(hub: HubApp, line: dict[str, Any]) -> CommitOp:
    """One payload line as a store operation; file contents are stored first (content-addressed, so harmless
    if the commit is then refused)."""
    key, value = line.get("key"), line.get("value") or {}
    path = value.get("path")
    if not isinstance(path, str):
        raise errors.bad_request(f"`{key}` line without a path")
    if problem := check_repo_path(path.strip("/") if key == "deletedFolder" else path):
        raise errors.HubError(422, problem)
    if key == "file":
        data = _decode_content(value, path)
        if len(data) >= LFS_SIZE_THRESHOLD or looks_binary(data):
            raise errors.bad_request(f"{path} is binary or larger than 10 MB: upload it through LFS")
        hub.store.put_bytes(data)
        return AddFile(path, FileEntry.regular(data))
    if key == "lfsFile":
        oid, size = value.get("oid"), value.get("size")
        if value.get("algo", "sha256") != "sha256" or not isinstance(oid, str) or not _SHA256_RE.match(oid):
            raise errors.bad_request(f"Invalid LFS oid for {path}")
        if size is None and hub.store.has_blob(oid):  # copies of LFS files come without a size
            size = hub.store.blob_path(oid).stat().st_size
        if not isinstance(size, int) or not hub.store.has_blob(oid, size):
            raise errors.bad_request(f"The LFS object {oid} for {path} was never uploaded")
        return AddFile(path, FileEntry.lfs_object(oid, size))
    if key == "deletedFile":
        return DeleteFile(path)
    if key == "deletedFolder":
        return DeleteFolder(path.strip("/"))
    raise errors.bad_request(f"Unknown commit operation {key!r}")


def _decode_content(value: dict[str, Any], path: str) -> bytes:
    content = value.get("content")
    if not isinstance(content, str):
        raise errors.bad_request(f"`file` line for {path} without content")
    if value.get("encoding") == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise errors.bad_request(f"Invalid base64 content for {path}") from None
    return content.encode()
