"""The persistent repo store behind the local Hub: repos, git-like commits, refs and a content-addressed blob store.

Layout under `data_dir` (all JSON written to a temp file, fsynced, then `os.replace`d, so a crash leaves either
the old or the new state, never half of one):

    repos/<type>s/<namespace>/<name>/repo.json            settings and refs (branches, tags)
    repos/<type>s/<namespace>/<name>/commits/<id>.json    one immutable commit with its full file manifest
    blobs/<sha256[:2]>/<sha256>                           file contents, regular and LFS alike
    tmp/                                                  partial uploads, renamed into blobs/ once verified

A commit's JSON is written before the ref that points to it, so an interrupted commit leaves at most an
unreferenced commit file. One lock serialises every state change of this process, and an exclusive `flock` on
`data_dir/.lock` keeps a second server process off the same directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from . import errors
from .gitobjects import DEFAULT_GITATTRIBUTES, git_blob_sha1, lfs_pointer

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"
Gated = Literal["auto", "manual", False]

_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_-])?$")
_REF_RE = re.compile(r"^[A-Za-z0-9._-][A-Za-z0-9._/-]{0,199}$")
_COMMIT_ID_RE = re.compile(r"^[0-9a-f]{7,40}$")


def now_iso() -> str:
    """Hub timestamps: UTC, `Z` suffix; microseconds keep the order of quick successive commits stable."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def check_repo_id(repo_id: str) -> str | None:
    """Why `repo_id` is not a valid `namespace/name`, or None when it is."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_NAME_RE.match(part) for part in parts) or ".." in repo_id:
        return f"Invalid repo id {repo_id!r}: expected namespace/name of letters, digits, '-', '_', '.'"
    if repo_id.endswith(".git"):
        return f"Invalid repo id {repo_id!r}: must not end with .git"
    return None


def check_ref_name(name: str) -> str | None:
    """Why `name` cannot be a branch or tag name, or None when it can."""
    if not _REF_RE.match(name) or ".." in name or name.endswith(("/", ".lock")) or "//" in name:
        return f"Invalid reference name {name!r}"
    return None


@dataclass(frozen=True)
class FileEntry:
    """One file of a commit's manifest.

    `oid` is the git blob id the Hub reports (`blobId`, tree `oid`): of the content for regular files, of the
    pointer for LFS files. `sha256` addresses the content in the blob store for both kinds.
    """

    size: int
    oid: str
    sha256: str
    lfs: bool

    @classmethod
    def regular(cls, data: bytes) -> FileEntry:
        return cls(size=len(data), oid=git_blob_sha1(data), sha256=hashlib.sha256(data).hexdigest(), lfs=False)

    @classmethod
    def lfs_object(cls, sha256: str, size: int) -> FileEntry:
        return cls(size=size, oid=git_blob_sha1(lfs_pointer(sha256, size)), sha256=sha256, lfs=True)

    @property
    def etag(self) -> str:
        """What resolve sends as ETag, and what preupload compares: sha256 for LFS files, git sha1 otherwise."""
        return self.sha256 if self.lfs else self.oid

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.sha256, self.size))

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "oid": self.oid, "sha256": self.sha256, "lfs": self.sha256 if self.lfs else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileEntry:
        return cls(size=data["size"], oid=data["oid"], sha256=data["sha256"], lfs=data["lfs"] is not None)


@dataclass(frozen=True)
class Commit:
    """An immutable commit: its parent and the complete manifest of the tree it records."""

    id: str
    parent: str | None
    title: str
    message: str
    date: str
    author: str
    files: Mapping[str, FileEntry]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent": self.parent,
            "title": self.title,
            "message": self.message,
            "date": self.date,
            "author": self.author,
            "files": {path: entry.to_json() for path, entry in sorted(self.files.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Commit:
        files = {path: FileEntry.from_json(entry) for path, entry in data["files"].items()}
        return cls(
            id=data["id"],
            parent=data["parent"],
            title=data["title"],
            message=data["message"],
            date=data["date"],
            author=data["author"],
            files=files,
        )


@dataclass(frozen=True)
class Repo:
    """A repo's settings and refs. Replaced as a whole on every change, so readers never see a half update."""

    repo_type: str
    repo_id: str
    private: bool
    gated: Gated
    created_at: str
    branches: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    sdk: str | None = None

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]

    @property
    def head(self) -> str:
        """The default branch's commit: what `sha` and `lastModified` describe."""
        return self.branches[DEFAULT_BRANCH]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.repo_type,
            "id": self.repo_id,
            "private": self.private,
            "gated": self.gated,
            "createdAt": self.created_at,
            "branches": dict(self.branches),
            "tags": dict(self.tags),
            "sdk": self.sdk,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Repo:
        return cls(
            repo_type=data["type"],
            repo_id=data["id"],
            private=data["private"],
            gated=data["gated"],
            created_at=data["createdAt"],
            branches=data["branches"],
            tags=data["tags"],
            sdk=data.get("sdk"),
        )


@dataclass(frozen=True)
class AddFile:
    path: str
    entry: FileEntry


@dataclass(frozen=True)
class DeleteFile:
    path: str


@dataclass(frozen=True)
class DeleteFolder:
    path: str


CommitOp = AddFile | DeleteFile | DeleteFolder


def write_json_atomic(path: Path, data: Any) -> None:
    """Write, fsync, then rename over the target: readers and crashes see the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class HubStore:
    """All repos of one data directory, loaded into memory at start and written through on every change.

    Raises `errors.HubError` for conditions the HTTP layer reports as they are (unknown revision, conflict,
    stale parent commit...), so the routes stay thin.
    """

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self._tmp_dir = self.data_dir / "tmp"
        self._blob_dir = self.data_dir / "blobs"
        self._repo_dir = self.data_dir / "repos"
        for folder in (self._tmp_dir, self._blob_dir, self._repo_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.data_dir / ".lock", "w")  # noqa: SIM115 - held for the store's lifetime
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise RuntimeError(f"{self.data_dir} is already served by another local hub process") from None
        self._lock = threading.RLock()
        self._repos: dict[tuple[str, str], Repo] = {}
        self._ids: dict[tuple[str, str], str] = {}  # (type, lower-cased id) -> the id as created: ids ignore case
        self._commits: dict[tuple[str, str], dict[str, Commit]] = {}
        self._load()

    def close(self) -> None:
        """Release the directory for another server process."""
        with contextlib.suppress(ValueError, OSError):
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
        self._lock_file.close()

    def _load(self) -> None:
        for repo_json in sorted(self._repo_dir.glob("*/*/*/repo.json")):
            repo = Repo.from_json(json.loads(repo_json.read_text(encoding="utf-8")))
            commits = {}
            for commit_json in (repo_json.parent / "commits").glob("*.json"):
                commit = Commit.from_json(json.loads(commit_json.read_text(encoding="utf-8")))
                commits[commit.id] = commit
            self._repos[(repo.repo_type, repo.repo_id)] = repo
            self._ids[(repo.repo_type, repo.repo_id.lower())] = repo.repo_id
            self._commits[(repo.repo_type, repo.repo_id)] = commits
        for leftover in self._tmp_dir.iterdir():
            with contextlib.suppress(OSError):
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()

    def _dir(self, repo_type: str, repo_id: str) -> Path:
        return self._repo_dir / f"{repo_type}s" / repo_id

    # Repos

    def get_repo(self, repo_type: str, repo_id: str) -> Repo | None:
        """The repo of this id in any letter case: the Hub treats `Me/M0` and `me/m0` as one repo."""
        canonical = self._ids.get((repo_type, repo_id.lower()))
        return self._repos.get((repo_type, canonical)) if canonical is not None else None

    def repos(self, repo_type: str) -> list[Repo]:
        return [repo for (kind, _), repo in list(self._repos.items()) if kind == repo_type]

    def create_repo(
        self, repo_type: str, repo_id: str, *, private: bool, author: str, sdk: str | None = None
    ) -> tuple[Repo, bool]:
        """Create a repo with the Hub's first commit (a default `.gitattributes`).

        Returns:
            The repo and whether it was created (False: it already existed and is returned unchanged).
        """
        if repo_type not in REPO_TYPES:
            raise errors.bad_request(f"Invalid repo type {repo_type!r}")
        if problem := check_repo_id(repo_id):
            raise errors.bad_request(problem)
        with self._lock:
            if existing := self.get_repo(repo_type, repo_id):
                return existing, False
            created_at = now_iso()
            data = DEFAULT_GITATTRIBUTES.encode()
            self.put_bytes(data)
            first = self._new_commit(
                parent=None,
                files={".gitattributes": FileEntry.regular(data)},
                title="initial commit",
                message="",
                author=author,
                date=created_at,
            )
            repo = Repo(
                repo_type=repo_type,
                repo_id=repo_id,
                private=private,
                gated=False,
                created_at=created_at,
                branches={DEFAULT_BRANCH: first.id},
                sdk=sdk,
            )
            self._commits[(repo_type, repo_id)] = {}
            self._ids[(repo_type, repo_id.lower())] = repo_id
            self._save_commit(repo, first)
            self._save_repo(repo)
            return repo, True

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        """Remove a repo and its history; its blobs stay, as other repos may share them."""
        with self._lock:
            repo = self.get_repo(repo_type, repo_id)
            if repo is None:
                raise errors.repo_not_found(repo_id)
            repo_id = repo.repo_id
            del self._repos[(repo_type, repo_id)]
            del self._ids[(repo_type, repo_id.lower())]
            self._commits.pop((repo_type, repo_id), None)
            trash = self._tmp_dir / f"deleted-{uuid.uuid4().hex}"
            os.replace(self._dir(repo_type, repo_id), trash)  # atomic: the repo vanishes in one step
        shutil.rmtree(trash, ignore_errors=True)

    def update_repo(self, repo: Repo, *, private: bool | None = None, gated: Gated | None = None) -> Repo:
        """Change visibility and/or gating; None leaves a setting as it is."""
        with self._lock:
            current = self._current(repo)
            updated = replace(
                current,
                private=current.private if private is None else private,
                gated=current.gated if gated is None else gated,
            )
            self._save_repo(updated)
            return updated

    def _current(self, repo: Repo) -> Repo:
        current = self._repos.get((repo.repo_type, repo.repo_id))
        if current is None:
            raise errors.repo_not_found(repo.repo_id)
        return current

    # History

    def get_commit(self, repo: Repo, commit_id: str) -> Commit:
        return self._commits[(repo.repo_type, repo.repo_id)][commit_id]

    def resolve(self, repo: Repo, revision: str) -> Commit:
        """A branch, a tag, or a (7 to 40 character) commit id, in that order, like git.

        Raises:
            HubError: 404 RevisionNotFound when nothing matches, or a short id is ambiguous.
        """
        commits = self._commits.get((repo.repo_type, repo.repo_id), {})
        commit_id = repo.branches.get(revision) or repo.tags.get(revision)
        if commit_id is None and _COMMIT_ID_RE.match(revision):
            matches = [known for known in commits if known.startswith(revision)]
            commit_id = matches[0] if len(matches) == 1 else None
        if commit_id is None or commit_id not in commits:
            raise errors.revision_not_found(revision)
        return commits[commit_id]

    def history(self, repo: Repo, start: Commit) -> Iterator[Commit]:
        """`start` and its ancestors, newest first."""
        commits = self._commits[(repo.repo_type, repo.repo_id)]
        commit: Commit | None = start
        while commit is not None:
            yield commit
            commit = commits.get(commit.parent) if commit.parent else None

    # Refs

    def create_tag(self, repo: Repo, name: str, target: Commit) -> Repo:
        if problem := check_ref_name(name):
            raise errors.bad_request(problem)
        with self._lock:
            current = self._current(repo)
            if name in current.tags:
                raise errors.conflict(f"Tag {name} already exists")
            updated = replace(current, tags={**current.tags, name: target.id})
            self._save_repo(updated)
            return updated

    def delete_tag(self, repo: Repo, name: str) -> Repo:
        """Raises HubError 404 RevisionNotFound when there is no such tag."""
        with self._lock:
            current = self._current(repo)
            if name not in current.tags:
                raise errors.revision_not_found(name)
            updated = replace(current, tags={tag: target for tag, target in current.tags.items() if tag != name})
            self._save_repo(updated)
            return updated

    def create_branch(self, repo: Repo, name: str, target: Commit) -> Repo:
        """Raises HubError 400 (invalid name) or 409 (a branch of that name exists)."""
        if problem := check_ref_name(name):
            raise errors.bad_request(problem)
        with self._lock:
            current = self._current(repo)
            if name in current.branches:
                raise errors.conflict(f"Reference already exists: refs/heads/{name}")
            updated = replace(current, branches={**current.branches, name: target.id})
            self._save_repo(updated)
            return updated

    def delete_branch(self, repo: Repo, name: str) -> Repo:
        """Raises HubError 404 RevisionNotFound (no such branch) or 403 (the default branch stays)."""
        with self._lock:
            current = self._current(repo)
            if name not in current.branches:
                raise errors.revision_not_found(name)
            if name == DEFAULT_BRANCH:
                raise errors.forbidden(f"Cannot delete the default branch {DEFAULT_BRANCH}")
            kept = {branch: target for branch, target in current.branches.items() if branch != name}
            updated = replace(current, branches=kept)
            self._save_repo(updated)
            return updated

    # Blobs

    def blob_path(self, sha256: str) -> Path:
        return self._blob_dir / sha256[:2] / sha256

    def has_blob(self, sha256: str, size: int | None = None) -> bool:
        path = self.blob_path(sha256)
        return path.is_file() and (size is None or path.stat().st_size == size)

    def read_blob(self, sha256: str) -> bytes:
        return self.blob_path(sha256).read_bytes()

    def put_bytes(self, data: bytes) -> str:
        """Store a small file's content; returns its sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        if not self.has_blob(sha256, len(data)):
            self.put_stream([data], sha256, len(data))
        return sha256

    def put_stream(self, chunks: Iterable[bytes], sha256: str, size: int) -> None:
        """Store an upload only if its content really has this sha256 and size (the LFS contract).

        Raises:
            HubError: 400 when the received bytes do not match; nothing is stored then.
        """
        tmp = self._tmp_dir / f"upload-{uuid.uuid4().hex}"
        digest, received = hashlib.sha256(), 0
        try:
            with open(tmp, "wb") as handle:
                for chunk in chunks:
                    digest.update(chunk)
                    received += len(chunk)
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            if received != size or digest.hexdigest() != sha256:
                raise errors.bad_request(
                    f"Uploaded content does not match: expected sha256 {sha256} and {size} bytes, "
                    f"got {digest.hexdigest()} and {received} bytes"
                )
            target = self.blob_path(sha256)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def adopt_file(self, path: Path) -> str:
        """Store a local file's content without reading it into memory or copying its blocks: a hard link when the
        file lies on the blob store's filesystem (a sparse checkpoint stays sparse), else a copy. Returns its sha256.

        For seeding real-size checkpoints (`LocalHub.seed_folder`); uploads go through `put_stream`.
        """
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 24):
                digest.update(chunk)
        sha256 = digest.hexdigest()
        if not self.has_blob(sha256, path.stat().st_size):
            target = self.blob_path(sha256)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._tmp_dir / f"adopt-{uuid.uuid4().hex}"
            try:
                os.link(path, tmp)
            except OSError:
                shutil.copyfile(path, tmp)
            os.replace(tmp, target)
        return sha256

    # Commits

    def commit(
        self,
        repo: Repo,
        branch: str,
        ops: list[CommitOp],
        *,
        title: str,
        message: str,
        author: str,
        parent: str | None,
    ) -> Commit:
        """Apply all operations as one new commit on `branch`, or none of them.

        Args:
            parent: the commit id (or a prefix of at least 5 characters) the caller based its change on;
                when given and the branch has moved since, nothing is applied.

        Raises:
            HubError: 404 RevisionNotFound (not a branch), 412 (stale parent), 404 EntryNotFound (deleting a
                missing path), 400 (a path is both a file and a folder, or an LFS object is missing).
        """
        with self._lock:
            current = self._current(repo)
            head_id = current.branches.get(branch)
            if head_id is None:
                raise errors.revision_not_found(branch)
            if parent is not None and not (len(parent) >= 5 and head_id.startswith(parent.lower())):
                raise errors.HubError(412, "A commit has happened since. Please refresh and try again.")
            head = self.get_commit(current, head_id)
            files = dict(head.files)
            for op in ops:
                _apply(files, op, head.id)
            for op in ops:
                if isinstance(op, AddFile) and not self.has_blob(op.entry.sha256, op.entry.size):
                    raise errors.bad_request(f"The content of {op.path} was never uploaded")
            _check_no_file_folder_clash(files)
            new = self._new_commit(
                parent=head.id, files=files, title=title, message=message, author=author, date=now_iso()
            )
            self._save_commit(current, new)
            updated = replace(current, branches={**current.branches, branch: new.id})
            self._save_repo(updated)
            return new

    def _new_commit(
        self, *, parent: str | None, files: dict[str, FileEntry], title: str, message: str, author: str, date: str
    ) -> Commit:
        identity = json.dumps(
            {
                "parent": parent,
                "title": title,
                "message": message,
                "author": author,
                "date": date,
                "files": {path: entry.oid for path, entry in sorted(files.items())},
            },
            sort_keys=True,
        )
        commit_id = hashlib.sha1(identity.encode()).hexdigest()
        return Commit(id=commit_id, parent=parent, title=title, message=message, date=date, author=author, files=files)

    def _save_commit(self, repo: Repo, commit: Commit) -> None:
        write_json_atomic(self._dir(repo.repo_type, repo.repo_id) / "commits" / f"{commit.id}.json", commit.to_json())
        self._commits[(repo.repo_type, repo.repo_id)][commit.id] = commit

    def _save_repo(self, repo: Repo) -> None:
        write_json_atomic(self._dir(repo.repo_type, repo.repo_id) / "repo.json", repo.to_json())
        self._repos[(repo.repo_type, repo.repo_id)] = repo


def _apply(files: dict[str, FileEntry], op: CommitOp, head_id: str) -> None:
    if isinstance(op, AddFile):
        files[op.path] = op.entry
    elif isinstance(op, DeleteFile):
        if files.pop(op.path, None) is None:
            raise errors.entry_not_found(op.path, head_id)
    else:
        prefix = op.path.rstrip("/") + "/"
        doomed = [path for path in files if path.startswith(prefix)]
        if not doomed:
            raise errors.entry_not_found(op.path, head_id)
        for path in doomed:
            del files[path]


def _check_no_file_folder_clash(files: Mapping[str, FileEntry]) -> None:
    """Git cannot hold `a` as a file and `a/b` at once; refuse such a tree instead of storing it."""
    for path in files:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder in files:
                raise errors.bad_request(f"{folder} is a file, so {path} cannot be added under it")
