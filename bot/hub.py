"""The one module that talks to the Hub, through `huggingface_hub`.

Raw client objects and exceptions stop here: callers get small records, and Hub errors become `Skip` (gated,
missing, private: the source is not ours to build) or `Failure` (the Hub misbehaved after bounded retries).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from bot import log
from bot.errors import Failure, HubError, PreconditionFailed, Skip
from bot.record import (
    PROVENANCE_FILE,
    BuildRecord,
    RecordError,
    TargetRecord,
    parse_draft_record,
    parse_target_record,
)

T = TypeVar("T")
R = TypeVar("R", BuildRecord, TargetRecord)
DEFAULT_ENDPOINT = "https://huggingface.co"
_RETRY_STATUSES = {429, 500, 502, 503, 504}
MAX_NAMESPACE_PAGES = 50  # 50,000 repos at 1000 a page: far more than two repos per watched source
_LISTING_EXPAND = ["sha", "lastModified", "tags", "gated", "private", "config", "cardData"]


def _hf():
    """Import huggingface_hub lazily, after the endpoint settings of this process are final."""
    import huggingface_hub
    import huggingface_hub.constants
    import huggingface_hub.errors
    import huggingface_hub.utils._http

    return huggingface_hub


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
class CommitResult:
    repo_id: str
    commit: str | None  # None when nothing changed
    url: str
    files: tuple[str, ...]


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


class RequestCounter:
    """Counts every HTTP request this process sends through huggingface_hub (the report's `hub_requests`)."""

    def __init__(self) -> None:
        self.count = 0
        self.by_method: dict[str, int] = {}

    def __call__(self, request: httpx.Request) -> None:
        self.count += 1
        self.by_method[request.method] = self.by_method.get(request.method, 0) + 1


REQUESTS = RequestCounter()


def _counting_client() -> httpx.Client:
    hf = _hf()
    return httpx.Client(
        event_hooks={"request": [hf.utils._http.hf_request_event_hook, REQUESTS]}, follow_redirects=True, timeout=None
    )


def configure_client(endpoint: str) -> None:
    """Set up huggingface_hub for this process once, before the first Hub call (the CLI and tests call it).

    Process-wide on purpose, and therefore explicit: only huggingface.co speaks Xet (a local or mirror endpoint
    needs classic LFS uploads); per-file progress bars drown the run's own progress lines (and Actions logs) in
    carriage returns; and every request goes through the counting client (the report's `hub_requests`).
    """
    hf = _hf()
    hf.constants.HF_HUB_DISABLE_XET = endpoint.rstrip("/") != DEFAULT_ENDPOINT
    hf.utils.disable_progress_bars()
    if hf.utils._http._GLOBAL_CLIENT_FACTORY is not _counting_client:
        hf.set_client_factory(_counting_client)


class Hub:
    """A Hub endpoint plus one token (read or write, depending on the stage that holds it).

    Constructing one changes nothing outside it; `configure_client` sets up the process.
    """

    def __init__(self, endpoint: str, token: str | None = None, *, max_attempts: int = 5, backoff_s: float = 0.5):
        self.endpoint = endpoint.rstrip("/")
        self.token = token or None
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.api = _hf().HfApi(endpoint=self.endpoint, token=self.token or False, library_name="dflash-bot")

    # ---- retries and error translation ----

    def call(self, what: str, fn: Callable[[], T], *, subject: str | None = None) -> T:
        """Run one Hub operation with bounded retries for transient errors; translate the rest.

        Raises:
            Skip: the repo is gated without access, private, or absent (or the revision is).
            Failure: the Hub kept failing (5xx, 429, dropped connections) or rejected the request.
        """
        hf = _hf()
        errors = hf.errors
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn()
            except hf.utils.HFValidationError as exc:
                raise Skip(
                    f"not a valid Hub repo id or revision: {_short(exc, 160)}", subject=subject, stage=what
                ) from None
            except errors.GatedRepoError:
                raise Skip(
                    "gated repo and the token has not been granted access (request access on the Hub)",
                    subject=subject,
                    stage=what,
                ) from None
            except errors.RevisionNotFoundError:
                raise Skip("revision not found", subject=subject, stage=what) from None
            except errors.EntryNotFoundError:
                raise Skip("file not found at that revision", subject=subject, stage=what) from None
            except errors.RepositoryNotFoundError:
                raise Skip(
                    "repo not found, or private and the token cannot see it", subject=subject, stage=what
                ) from None
            except errors.HfHubHTTPError as exc:
                status = exc.response.status_code if exc.response is not None else None
                if status in _RETRY_STATUSES and attempt < self.max_attempts:
                    self._wait(attempt, exc.response, what)
                    continue
                error_class = PreconditionFailed if status == 412 else HubError
                raise error_class(
                    f"Hub answered {status}: {_short(exc)}", status=status, subject=subject, stage=what
                ) from None
            except (httpx.TransportError, ConnectionError) as exc:
                if attempt < self.max_attempts:
                    self._wait(attempt, None, what)
                    continue
                raise HubError(f"Hub unreachable: {_short(exc)}", status=None, subject=subject, stage=what) from None
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, response: httpx.Response | None, what: str) -> None:
        delay = self.backoff_s * 2 ** (attempt - 1)
        retry_after = response.headers.get("Retry-After") if response is not None else None
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), 60.0))
        log.get().debug("retrying %s in %.1fs (attempt %d)", what, delay, attempt)
        time.sleep(delay)

    # ---- reads ----

    def list_models(
        self, *, author: str | None, search: str | None, filter_tags: Iterable[str], limit: int
    ) -> list[RepoListing]:
        """One filtered listing, newest first (a page is one request; the client follows `Link` pages)."""

        def fetch() -> list[RepoListing]:
            results = self.api.list_models(
                author=author,
                search=search,
                filter=list(filter_tags) or None,
                sort="lastModified",
                limit=limit,
                expand=_LISTING_EXPAND,
            )
            return [_listing(info) for info in results]

        return self.call("list", fetch, subject=f"listing author={author} search={search}")

    def repo_files(self, repo_id: str, revision: str | None = None) -> RepoFiles:
        def fetch() -> RepoFiles:
            info = self.api.model_info(repo_id, revision=revision, files_metadata=True)
            sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
            return RepoFiles(
                repo_id=repo_id,
                sha=info.sha,
                sizes=sizes,
                gated=bool(info.gated),
                private=bool(info.private),
                card_data=_card_dict(info),
            )

        return self.call("info", fetch, subject=repo_id)

    def head(self, repo_id: str) -> str:
        """The current commit of a repo (one light request: no file metadata)."""
        return self.call("info", lambda: str(self.api.model_info(repo_id).sha), subject=repo_id)

    def read_file(
        self,
        repo_id: str,
        filename: str,
        revision: str | None = None,
        *,
        max_bytes: int = 4 * 1024 * 1024,
        repo_type: str | None = None,
    ) -> bytes | None:
        """One small file in one GET (no HEAD round trip), or None when the repo or file does not exist."""
        hf = _hf()

        def fetch() -> bytes | None:
            url = hf.hf_hub_url(repo_id, filename, revision=revision, repo_type=repo_type, endpoint=self.endpoint)
            headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
            with hf.utils.get_session().stream(
                "GET", url, headers=headers, follow_redirects=True, timeout=30
            ) as response:
                if response.status_code == 404 and response.headers.get("X-Error-Code") in (
                    "EntryNotFound",
                    "RepoNotFound",
                    None,
                ):
                    return None
                hf.utils.hf_raise_for_status(response)
                declared = int(response.headers.get("Content-Length") or 0)
                if declared > max_bytes:
                    raise Skip(
                        f"{filename} is {declared} bytes, over the {max_bytes}-byte limit",
                        subject=repo_id,
                        stage="read",
                    )
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise Skip(f"{filename} is over the {max_bytes}-byte limit", subject=repo_id, stage="read")
                return bytes(body)

        return self.call("read", fetch, subject=repo_id)

    def draft_record(self, repo_id: str, revision: str | None = None) -> BuildRecord | None:
        """The build record of a published draft repo (one GET); None when there is none, or when it is damaged,
        oversized or from a schema this bot cannot read (then it is rebuilt rather than trusted)."""
        return self._record(repo_id, parse_draft_record, revision)

    def target_record(self, repo_id: str, revision: str | None = None) -> TargetRecord | None:
        """The record of a published target repo (one GET); None as for `draft_record`."""
        return self._record(repo_id, parse_target_record, revision)

    def _record(self, repo_id: str, parse: Callable[[bytes], R], revision: str | None) -> R | None:
        try:
            data = self.read_file(repo_id, PROVENANCE_FILE, revision=revision)
        except Skip as skip:
            # Over the size limit (a card bomb expanded into an old record): rebuilt, never a permanent skip.
            log.step("%s: published %s is unusable (%s): rebuilding", repo_id, PROVENANCE_FILE, skip.message)
            return None
        if data is None:
            return None
        try:
            return parse(data)
        except RecordError as exc:
            log.step("%s: published %s is not usable (%s): rebuilding", repo_id, PROVENANCE_FILE, exc)
            return None

    def files_or_none(self, repo_id: str) -> RepoFiles | None:
        """A repo at its current commit, or None when it does not exist (or cannot be seen with this token)."""
        try:
            return self.repo_files(repo_id)
        except Skip:
            return None

    def download(self, repo_id: str, revision: str, dest: Path, files: Iterable[str]) -> Path:
        """Download exactly `files` of one revision into a plain folder (no cache symlinks).

        The names are the ones discovery selected and sized: nothing else is fetched, whatever the repo holds.
        """
        names = sorted(files)

        def fetch() -> Path:
            dest.mkdir(parents=True, exist_ok=True)
            for name in names:
                self.api.hf_hub_download(repo_id, name, revision=revision, local_dir=dest)
            return dest

        return self.call("download", fetch, subject=repo_id)

    # ---- writes (publish stage only) ----

    def publish_folder(
        self,
        repo_id: str,
        folder: Path,
        *,
        message: str,
        private: bool,
        delete_stale: bool = True,
        only: Iterable[str] | None = None,
        seen: RepoFiles | None,
    ) -> CommitResult:
        """Create the repo if needed and commit the folder in ONE commit, guarded by `parent_commit`.

        Unchanged files are skipped by the client (their oids match), stale files are deleted in the same
        commit, and a concurrent writer makes the commit fail with 412 instead of interleaving.

        Args:
            seen: the repo as the caller read it when it decided to publish (`files_or_none`): its commit is the
                parent, so a writer that committed since makes this one fail with 412 (`PreconditionFailed`) rather
                than land on top of work the caller never saw. None: the caller saw no repo; a repo that holds files
                by now is refused the same way.
        """
        hf = _hf()
        self.call("create repo", lambda: self.api.create_repo(repo_id, private=private, exist_ok=True), subject=repo_id)
        head = seen if seen is not None else self.repo_files(repo_id)
        if seen is None and set(head.sizes) - {".gitattributes"}:
            raise PreconditionFailed(
                "another writer published to the repo since it was found empty",
                status=412,
                subject=repo_id,
                stage="commit",
            )
        names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if only is not None:
            names = [n for n in names if n in set(only)]
        operations: list = [hf.CommitOperationAdd(path_in_repo=n, path_or_fileobj=str(folder / n)) for n in names]
        if delete_stale and only is None:
            keep = set(names) | {".gitattributes"}
            operations += [hf.CommitOperationDelete(path_in_repo=n) for n in sorted(head.sizes) if n not in keep]

        def commit() -> CommitResult:
            info = self.api.create_commit(repo_id, operations, commit_message=message, parent_commit=head.sha)
            changed = info.oid != head.sha
            return CommitResult(
                repo_id=repo_id,
                commit=info.oid if changed else None,
                url=f"{self.endpoint}/{repo_id}",
                files=tuple(names),
            )

        return self.call("commit", commit, subject=repo_id)

    def tag(self, repo_id: str, tag: str, revision: str | None = None) -> None:
        self.call(
            "tag", lambda: self.api.create_tag(repo_id, tag=tag, revision=revision, exist_ok=True), subject=repo_id
        )

    # ---- status page, collection and output-namespace listing (issue 13; bot/status.py, bot/collection.py) ----

    def list_namespace(self, namespace: str) -> dict[str, str]:
        """Every model repo of `namespace` with its current sha, from one listing (one request per 1000 repos).

        Used to cross-check published repos cheaply: a repo whose sha differs from the one the status recorded,
        or that is missing, was changed or deleted by someone else. Pages are followed by their `Link` header up to
        `MAX_NAMESPACE_PAGES`, so a listing that never ends (even with empty pages) still stops.
        """
        hf = _hf()

        def fetch() -> dict[str, str]:
            headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
            url: str | None = f"{self.endpoint}/api/models"
            params: dict | None = {"author": namespace, "expand": ["sha", "lastModified"], "limit": 1000}
            repos: dict[str, str] = {}
            for _ in range(MAX_NAMESPACE_PAGES):
                if url is None:
                    break
                response = hf.utils.get_session().get(url, params=params, headers=headers, timeout=30)
                hf.utils.hf_raise_for_status(response)
                for item in response.json():
                    if isinstance(item, dict) and isinstance(item.get("id"), str):
                        repos[item["id"]] = str(item.get("sha") or "")
                url, params = response.links.get("next", {}).get("url"), None
            return repos

        return self.call("list namespace", fetch, subject=namespace)

    def read_dataset_file(self, repo_id: str, filename: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes | None:
        """One small file of a dataset repo (`read_file`); a file over the limit is a Failure here, since the
        status repo is the bot's own."""
        try:
            return self.read_file(repo_id, filename, max_bytes=max_bytes, repo_type="dataset")
        except Skip as skip:
            raise Failure(skip.message, subject=repo_id, stage="read") from None

    def commit_files(
        self, repo_id: str, files: dict[str, bytes], *, message: str, repo_type: str = "dataset", private: bool = False
    ) -> CommitResult:
        """Create the repo if needed and commit these files in ONE commit guarded by `parent_commit`.

        Files whose bytes equal the Hub's are left out by the client; when none differ there is no commit
        (`CommitResult.commit` is None).
        """
        hf = _hf()
        self.call(
            "create repo",
            lambda: self.api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True),
            subject=repo_id,
        )
        head = self.call("info", lambda: self.api.repo_info(repo_id, repo_type=repo_type).sha, subject=repo_id)
        operations = [
            hf.CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in sorted(files.items())
        ]

        def commit() -> CommitResult:
            info = self.api.create_commit(
                repo_id, operations, commit_message=message, parent_commit=head, repo_type=repo_type
            )
            prefix = "" if repo_type == "model" else f"{repo_type}s/"
            return CommitResult(
                repo_id=repo_id,
                commit=info.oid if info.oid != head else None,
                url=f"{self.endpoint}/{prefix}{repo_id}",
                files=tuple(sorted(files)),
            )

        return self.call("commit", commit, subject=repo_id)

    def ensure_collection(
        self, title: str, namespace: str, *, description: str | None = None, private: bool = False
    ) -> CollectionState:
        """The namespace's collection of this title, created when missing (one POST; a GET when it exists)."""
        return self.call(
            "collection",
            lambda: _collection_state(
                self.api.create_collection(
                    title, namespace=namespace, description=description, private=private, exists_ok=True
                )
            ),
            subject=f"collection {namespace}/{title}",
        )

    def add_collection_item(self, slug: str, repo_id: str, *, note: str | None) -> CollectionState:
        """Add a model repo to a collection; one already there is left as it is (`exists_ok`)."""
        return self.call(
            "collection",
            lambda: _collection_state(self.api.add_collection_item(slug, repo_id, "model", note=note, exists_ok=True)),
            subject=slug,
        )

    def update_collection_note(self, slug: str, item: CollectionEntry, note: str) -> None:
        self.call("collection", lambda: self.api.update_collection_item(slug, item.object_id, note=note), subject=slug)

    def remove_collection_item(self, slug: str, item: CollectionEntry) -> None:
        self.call(
            "collection", lambda: self.api.delete_collection_item(slug, item.object_id, missing_ok=True), subject=slug
        )


def _listing(info) -> RepoListing:
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
        card_data=_card_dict(info),
    )


def _card_dict(info) -> dict:
    card = getattr(info, "card_data", None) or getattr(info, "cardData", None)
    if card is None:
        return {}
    return card.to_dict() if hasattr(card, "to_dict") else dict(card)


def _collection_state(collection) -> CollectionState:
    items = tuple(
        CollectionEntry(object_id=i.item_object_id, item_id=i.item_id, item_type=i.item_type, note=i.note)
        for i in collection.items
    )
    return CollectionState(slug=collection.slug, url=collection.url, title=collection.title, items=items)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text[:limit]
