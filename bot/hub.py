"""The one module that talks to the Hub, through `huggingface_hub`.

Raw client objects and exceptions stop here: callers get small records, and Hub errors become `Skip` (gated,
missing, private: the source is not ours to build) or `Failure` (the Hub misbehaved after bounded retries). Only the
Hub's own error codes make a `Skip`, which the status repo remembers; any other answer (a 404 from a proxy or CDN, a
5xx, silence) is a `HubError`, tried again by the next run. Every request has timeouts (`bot.core.deadlines`), and every
downloaded file is checked against the Hub's hash for its revision (`bot.core.hashes`).
"""

from __future__ import annotations

import errno
import json
import shutil
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, TypeVar

import httpx
import huggingface_hub as hf
import huggingface_hub.constants
import huggingface_hub.errors
import huggingface_hub.utils._http

from bot.core import deadlines, log
from bot.core.errors import (
    BotError,
    Failure,
    HubError,
    InfrastructureFailure,
    PreconditionFailed,
    RunnerFault,
    Skip,
    Stage,
)
from bot.core.hashes import FileHash, HubHash, hash_file, is_blob_id, is_sha256, mismatch, write_manifest
from bot.core.recipe import HubSettings
from bot.core.record import (
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
MAX_LISTING_PAGES = 20  # a source's listing asks for `limit` repos, which the Hub sends in one page
_LISTING_EXPAND = ["sha", "lastModified", "tags", "gated", "private", "config", "cardData"]
# The Hub's own answers (`X-Error-Code`) that say a source is not there for us: the only ones that make a Skip.
_DEFINITIVE = {
    "GatedRepo": "gated repo and the token has not been granted access (request access on the Hub)",
    "RevisionNotFound": "revision not found",
    "EntryNotFound": "file not found at that revision",
    "RepoNotFound": "repo not found, or private and the token cannot see it",
}


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
class Download:
    """One revision's files in a plain folder, each checked against the Hub's hash: their sha256 and size."""

    path: Path
    repo_id: str
    revision: str
    files: dict[str, FileHash]


@dataclass(frozen=True)
class CommitResult:
    repo_id: str
    commit: str | None  # None when nothing changed
    url: str
    files: tuple[str, ...]


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
    """huggingface_hub's client, plus the request counter and the deadline hooks (`bot.core.deadlines`)."""
    return httpx.Client(
        event_hooks={
            "request": [hf.utils._http.hf_request_event_hook, REQUESTS, deadlines.on_request],
            "response": [deadlines.on_response],
        },
        follow_redirects=True,
        timeout=deadlines.timeouts(),
    )


def configure_client(endpoint: str) -> None:
    """Set up huggingface_hub for this process once, before the first Hub call (the CLI and tests call it).

    Process-wide on purpose, and therefore explicit: only huggingface.co speaks Xet (a local or mirror endpoint
    needs classic LFS uploads); per-file progress bars drown the run's own progress lines (and Actions logs) in
    carriage returns; and every request goes through the counting client (the report's `hub_requests`).
    """
    hf.constants.HF_HUB_DISABLE_XET = endpoint.rstrip("/") != DEFAULT_ENDPOINT
    hf.utils.disable_progress_bars()
    if hf.utils._http._GLOBAL_CLIENT_FACTORY is not _counting_client:
        hf.set_client_factory(_counting_client)


class Hub:
    """A Hub endpoint plus one token (read or write, depending on the stage that holds it).

    Constructing one changes nothing outside it; `configure_client` sets up the process.
    """

    def __init__(
        self,
        endpoint: str,
        token: str | None = None,
        *,
        max_attempts: int = 5,
        backoff_s: float = 0.5,
        settings: HubSettings | None = None,
        token_name: str = "HF_TOKEN or HF_READ_TOKEN",
    ):
        """A client of `endpoint` holding one token.

        Args:
            settings: the recipe's `hub:` section (timeouts, stall rule, attempts, deadlines); the defaults if None.
            token_name: the variable the token came from, named when the Hub rejects it.
        """
        self.endpoint = endpoint.rstrip("/")
        self.token = token or None
        self.token_name = token_name
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.settings = settings or HubSettings()
        self.limits = deadlines.Limits(
            connect_s=self.settings.connect_timeout_s,
            read_s=self.settings.read_timeout_s,
            min_bytes_per_s=self.settings.min_bytes_per_s,
            upload_attempts=self.settings.download_attempts,
        )
        self.uploads = deadlines.Budget("upload", self.settings.upload_deadline_s)  # every commit of this client
        self.api = hf.HfApi(endpoint=self.endpoint, token=self.token or False, library_name="dflash-bot")

    # ---- retries and error translation ----

    def call(self, what: Stage, fn: Callable[[], T], *, subject: str | None = None) -> T:
        """Run one Hub operation under this Hub's timeouts, with bounded retries for transient errors.

        Raises:
            Skip: the Hub's own answer says the repo is gated without access, private or absent, or the revision
                or file is (`X-Error-Code`); also a repo id or revision that cannot be valid.
            Failure: the Hub kept failing (5xx, 429, silence, dropped connections), answered without its own error
                code (a proxy or CDN), rejected the request, or the stage's deadline passed (`HubError`).
        """
        with deadlines.limits(self.limits), deadlines.shared_with_threads():
            for attempt in range(1, self.max_attempts + 1):
                try:
                    return fn()
                except Exception as exc:
                    stopped = _upload_stopped(exc, subject=subject, stage=what)
                    if stopped is not None:  # final: huggingface_hub retried that upload already
                        raise stopped from None
                    verdict = _verdict(exc, subject=subject, stage=what, hub=self)
                    if verdict is None:
                        raise
                    error, transient = verdict
                    if transient and attempt < self.max_attempts and self._wait(attempt, _response_of(exc), what):
                        continue
                    raise error from None
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, response: httpx.Response | None, what: Stage) -> bool:
        """Back off before a retry; False (no wait) when the stage's deadline would pass first."""
        delay = self.backoff_s * 2 ** (attempt - 1)
        retry_after = response.headers.get("Retry-After") if response is not None else None
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), 60.0))
        left = deadlines.remaining()
        if left is not None and left <= delay:
            return False
        log.get().debug("retrying %s in %.1fs (attempt %d)", what, delay, attempt)
        time.sleep(delay)
        return True

    def deadline(self, stage: Stage, seconds: float) -> AbstractContextManager[None]:
        """Bound a whole stage (`HubSettings.*_deadline_s`): past it, the stage's next request fails (`HubError`)."""
        return deadlines.stage_deadline(stage, seconds)

    # ---- reads ----

    def list_models(
        self, *, author: str | None, search: str | None, filter_tags: Iterable[str], limit: int | None
    ) -> list[RepoListing]:
        """One filtered listing, newest first (a page is one request). `Link` pages are followed up to `limit` repos
        (None: every page) and at most `MAX_LISTING_PAGES` pages: a listing whose pages never end, or keep coming
        back empty (a hostile mirror; `HfApi.list_models` follows those for ever), still stops."""

        def fetch() -> list[RepoListing]:
            headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
            url: str | None = f"{self.endpoint}/api/models"
            first: dict = {"sort": "lastModified", "expand": _LISTING_EXPAND}
            first.update({k: v for k, v in (("author", author), ("search", search), ("limit", limit)) if v})
            if tags := list(filter_tags):
                first["filter"] = tags
            params: dict | None = first  # the next pages' URLs carry their own query
            found: list[RepoListing] = []
            for _ in range(MAX_LISTING_PAGES):
                if url is None or (limit is not None and len(found) >= limit):
                    break
                response = hf.utils.get_session().get(url, params=params, headers=headers)
                hf.utils.hf_raise_for_status(response)
                page = response.json()
                found += [_listing(hf.ModelInfo(**item)) for item in page if isinstance(item, dict) and "id" in item]
                url, params = response.links.get("next", {}).get("url"), None
            return found if limit is None else found[:limit]

        return self.call(Stage.LIST, fetch, subject=f"listing author={author} search={search}")

    def repo_files(self, repo_id: str, revision: str | None = None) -> RepoFiles:
        def fetch() -> RepoFiles:
            info = self.api.model_info(repo_id, revision=revision, files_metadata=True)
            sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
            return RepoFiles(
                repo_id=repo_id,
                sha=str(info.sha),  # the Hub always names the commit it answers for
                sizes=sizes,
                gated=bool(info.gated),
                private=bool(info.private),
                card_data=_card_dict(info),
            )

        return self.call(Stage.INFO, fetch, subject=repo_id)

    def head(self, repo_id: str) -> str:
        """The current commit of a repo (one light request: no file metadata)."""
        return self.call(Stage.INFO, lambda: str(self.api.model_info(repo_id).sha), subject=repo_id)

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

        def fetch() -> bytes | None:
            url = hf.hf_hub_url(repo_id, filename, revision=revision, repo_type=repo_type, endpoint=self.endpoint)
            headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
            with hf.utils.get_session().stream("GET", url, headers=headers, follow_redirects=True) as response:
                # Only the Hub's own answer means "no such file"; a bare 404 (a proxy, a CDN) is an error (HubError).
                if response.status_code == 404 and response.headers.get("X-Error-Code") in (
                    "EntryNotFound",
                    "RepoNotFound",
                ):
                    return None
                hf.utils.hf_raise_for_status(response)
                declared = int(response.headers.get("Content-Length") or 0)
                if declared > max_bytes:
                    raise Skip(
                        f"{filename} is {declared} bytes, over the {max_bytes}-byte limit",
                        subject=repo_id,
                        stage=Stage.READ,
                    )
                body = bytearray()
                try:
                    for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) > max_bytes:
                            raise Skip(
                                f"{filename} is over the {max_bytes}-byte limit", subject=repo_id, stage=Stage.READ
                            )
                except deadlines.Stalled as stall:
                    # The download's stall rule, final for a read: retrying a trickling answer from its first byte
                    # would only multiply the wait (a status.json sent a byte every 5 s held a dry run 300 s).
                    raise HubError(
                        f"read of {filename} stalled after {stall.received} bytes: {stall}",
                        status=None,
                        subject=repo_id,
                        stage=Stage.READ,
                    ) from None
                return bytes(body)

        return self.call(Stage.READ, fetch, subject=repo_id)

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

    def user(self) -> str:
        """The account this Hub's token belongs to: the author of the commits the bot makes with it."""
        return self.call(Stage.WHOAMI, lambda: str(self.api.whoami()["name"]), subject="whoami")

    def whoami(self) -> TokenIdentity:
        """Who this Hub's token is, its organisations and roles, and the token's role and scopes (one request).

        Raises:
            HubError: the Hub rejected the token (401, naming `token_name`) or could not be reached.
        """
        return self.call(Stage.WHOAMI, lambda: _identity(self.api.whoami()), subject="whoami")

    def repo_exists(self, repo_id: str) -> bool:
        """Whether a model repo exists for this token (a gated one does; a private one it cannot see does not)."""
        return self.call(Stage.INFO, lambda: self.api.repo_exists(repo_id), subject=repo_id)

    def commit_author(self, repo_id: str, revision: str) -> str | None:
        """Who made the commit `revision` of a repo (its first listed author), None when it lists none."""

        def fetch() -> str | None:
            commits = self.api.list_repo_commits(repo_id, revision=revision)
            authors = commits[0].authors if commits else []
            return str(authors[0]) if authors else None

        return self.call(Stage.COMMITS, fetch, subject=repo_id)

    def commit_ids(self, repo_id: str, *, limit: int, pages: int) -> list[str]:
        """The commits of a repo's main branch, newest first, each once: at most `limit` of them from at most `pages`
        requests, and a page with no id it has not seen (a listing that loops) ends it (`dflash-bot try`)."""

        def fetch() -> list[str]:
            # Paged by hand: huggingface_hub's `list_repo_commits` reads every page before it returns one, and a
            # mirror that links each page to another never lets it stop.
            headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
            url: str | None = f"{self.endpoint}/api/models/{repo_id}/commits/main"
            ids: dict[str, None] = {}
            for _ in range(pages):
                if url is None or len(ids) >= limit:
                    break
                response = hf.utils.get_session().get(url, headers=headers)
                hf.utils.hf_raise_for_status(response)
                page = [str(item.get("id")) for item in response.json() if isinstance(item, dict)]
                if not set(page) - ids.keys():
                    break
                ids.update(dict.fromkeys(page))
                url = response.links.get("next", {}).get("url")
            return list(ids)[:limit]

        return self.call(Stage.COMMITS, fetch, subject=repo_id)

    def commit_log(self, repo_id: str, revision: str, *, limit: int) -> list[CommitEntry]:
        """The commits from `revision` back, newest first, with their first author and title: at most `limit`,
        from at most as many pages as `limit` needs (`bot.plan.reuse` reads who wrote a published target).

        Returns:
            fewer than `limit` entries only when the history is shorter.
        """

        def fetch() -> list[CommitEntry]:
            headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
            url: str | None = f"{self.endpoint}/api/models/{repo_id}/commits/{revision}"
            entries: list[CommitEntry] = []
            while url is not None and len(entries) < limit:
                response = hf.utils.get_session().get(url, headers=headers)
                hf.utils.hf_raise_for_status(response)
                page = response.json()
                if not isinstance(page, list) or not page:
                    break
                for item in page:
                    authors = item.get("authors") if isinstance(item, dict) else None
                    first = authors[0] if isinstance(authors, list) and authors else None
                    author = first.get("user") if isinstance(first, dict) else None
                    entries.append(
                        CommitEntry(
                            commit=str(item.get("id") or "") if isinstance(item, dict) else "",
                            author=str(author) if author else None,
                            title=str(item.get("title") or "") if isinstance(item, dict) else "",
                        )
                    )
                url = response.links.get("next", {}).get("url")
            return entries[:limit]

        return self.call(Stage.COMMITS, fetch, subject=repo_id)

    def listed_hashes(self, repo_id: str, revision: str) -> dict[str, HubHash]:
        """The hash the Hub lists for every file of a repo at one revision (one request)."""
        return self.call(Stage.INFO, lambda: self._listed_hashes(repo_id, revision), subject=repo_id)[1]

    def files_or_none(self, repo_id: str) -> RepoFiles | None:
        """A repo at its current commit, or None when it does not exist (or cannot be seen with this token)."""
        try:
            return self.repo_files(repo_id)
        except Skip:
            return None

    def download(self, repo_id: str, revision: str, dest: Path, files: Iterable[str]) -> Download:
        """Download exactly `files` of one revision into a plain folder, each checked against the Hub's hash.

        The names are the ones discovery selected and sized: nothing else is fetched, whatever the repo holds. Each
        file must match what the Hub lists for that revision (LFS sha256, else the git blob id; docs/design.md §3): a
        Hub, proxy or CDN that served other bytes costs one fresh download of that file, a second mismatch fails it.
        A transfer that stalls resumes where it stopped (`HubSettings.download_attempts`), all under the download
        deadline. The verified sha256 and size of every file are returned and written beside the folder
        (`bot.core.hashes.read_manifest`), never into it.

        Raises:
            Skip: the Hub's own answer says the repo, the revision or a file is not there.
            Failure: a file's bytes did not match the Hub's hash twice, or the Hub lists no hash for it.
            HubError: the Hub kept failing, a transfer stalled every attempt, or the download deadline passed.
        """
        names = sorted(files)
        partials = dest.parent / f".{dest.name}.partial"
        try:
            with self.deadline(Stage.DOWNLOAD, self.settings.download_deadline_s):
                commit, listed = self.call(Stage.INFO, lambda: self._listed_hashes(repo_id, revision), subject=repo_id)
                dest.mkdir(parents=True, exist_ok=True)
                verified = {
                    name: self._download_verified(repo_id, commit, name, listed.get(name), dest, partials)
                    for name in names
                }
        finally:
            shutil.rmtree(partials, ignore_errors=True)
        write_manifest(dest, verified)
        return Download(dest, repo_id, commit, verified)

    def _listed_hashes(self, repo_id: str, revision: str) -> tuple[str, dict[str, HubHash]]:
        """The commit a revision names and the hash the Hub lists for each file there (one request)."""
        info = self.api.model_info(repo_id, revision=revision, files_metadata=True)
        listed = {}
        for sibling in info.siblings or []:
            lfs = sibling.lfs
            sha256 = lfs.sha256 if lfs is not None else None
            listed[sibling.rfilename] = HubHash(
                size=int(lfs.size if lfs is not None else sibling.size or 0),
                sha256=sha256 if is_sha256(sha256) else None,
                blob_id=sibling.blob_id if is_blob_id(sibling.blob_id) else None,
            )
        return str(info.sha or revision), listed

    def _download_verified(
        self, repo_id: str, commit: str, name: str, listed: HubHash | None, dest: Path, partials: Path
    ) -> FileHash:
        """One file, downloaded until its bytes match the Hub's hash (twice at most), then moved into `dest`."""
        where = f"{name} at {commit[:7]}"
        if listed is None or not listed.checkable:
            why = "the Hub does not list it there" if listed is None else "the Hub lists no hash for it"
            raise Failure(f"{where}: {why}, so it cannot be verified", subject=repo_id, stage=Stage.DOWNLOAD)
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or "\\" in name:
            raise Failure(f"{name!r}: not a file name inside the repo", subject=repo_id, stage=Stage.DOWNLOAD)
        part, final = partials / relative, dest / relative
        problem = ""
        for attempt in (1, 2):
            self._transfer(repo_id, commit, name, listed.size, part)
            local = hash_file(part)
            problem = mismatch(local, listed) or ""
            if not problem:
                final.parent.mkdir(parents=True, exist_ok=True)
                part.replace(final)
                return local.file
            part.unlink()
            if attempt == 1:
                log.step("%s: %s: %s; downloading it again", repo_id, where, problem)
        raise Failure(f"{where}: {problem} (downloaded twice; not built)", subject=repo_id, stage=Stage.DOWNLOAD)

    def _transfer(self, repo_id: str, commit: str, name: str, size: int, part: Path) -> None:
        """Fetch one file into `part`, resuming a stalled transfer where it stopped.

        Raises:
            HubError: every attempt stalled, or the download deadline passed, naming the bytes received.
        """
        url = hf.hf_hub_url(repo_id, name, revision=commit, endpoint=self.endpoint)
        headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
        part.parent.mkdir(parents=True, exist_ok=True)
        attempts, cause, label = self.settings.download_attempts, "no attempt", f"{name} at {commit[:7]}"
        for attempt in range(1, attempts + 1):
            try:
                self.call(
                    Stage.DOWNLOAD,
                    lambda: _get_into(url, headers, part, size, label, progress=f"{repo_id}: {name}"),
                    subject=repo_id,
                )
                return
            except BotError as error:  # over the listed size, or the disk is full: no attempt more
                raise error.at(subject=repo_id) from None
            except _Interrupted as stop:
                cause = stop.reason
                if stop.final or attempt == attempts:
                    break
                log.step("%s: %s stopped at %d of %d bytes (%s); resuming", repo_id, name, _size(part), size, cause)
                if not self._wait(attempt, None, Stage.DOWNLOAD):
                    break
        raise HubError(
            f"download of {name} at {commit[:7]} stopped with {_size(part)} of {size} bytes received, after "
            f"{attempt} attempt(s) each resuming where the last stopped: {cause}",
            status=None,
            subject=repo_id,
            stage=Stage.DOWNLOAD,
        )

    # ---- writes (publish stage only) ----

    def validate_card(self, text: str, *, repo_id: str, repo_type: str = "model") -> None:
        """Ask this Hub whether it accepts a card's metadata (`POST /api/validate-yaml`), before anything uploads.

        huggingface_hub 1.21.0's `RepoCard.validate` posts to a hard-coded huggingface.co, so this uses the check
        its `create_commit` makes for a README.md (`HfApi._validate_yaml`), which honours the configured endpoint.

        Raises:
            Failure: the Hub refuses the metadata; the message names each refused field as the Hub does
                (e.g. `"license" must be one of [...]`), and nothing has been uploaded.
            HubError: the Hub could not be asked (after the usual retries).
        """

        def check() -> None:
            try:
                self.api._validate_yaml(text, repo_type=repo_type)
            except json.JSONDecodeError:  # the client reads the body before the status: not the Hub's answer
                raise HubError(
                    "the Hub's answer to the card check (validate-yaml) is not JSON: a proxy's or CDN's answer",
                    status=None,
                    subject=repo_id,
                    stage=Stage.PUBLISH,
                ) from None
            except ValueError as exc:
                reasons = " ".join(line.lstrip("- ") for line in str(exc).splitlines()[1:] if line.strip())
                raise Failure(
                    f"the Hub refuses the card's metadata: {reasons or exc}", subject=repo_id, stage=Stage.PUBLISH
                ) from None

        self.call(Stage.PUBLISH, check, subject=repo_id)

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
        self.call(
            Stage.CREATE_REPO, lambda: self.api.create_repo(repo_id, private=private, exist_ok=True), subject=repo_id
        )
        head = seen if seen is not None else self.repo_files(repo_id)
        if seen is None and set(head.sizes) - {".gitattributes"}:
            raise PreconditionFailed(
                "another writer published to the repo since it was found empty",
                status=412,
                subject=repo_id,
                stage=Stage.COMMIT,
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

        with self.uploads.applied():
            return self.call(Stage.COMMIT, commit, subject=repo_id)

    def tag(self, repo_id: str, tag: str, revision: str | None = None) -> None:
        self.call(
            Stage.TAG, lambda: self.api.create_tag(repo_id, tag=tag, revision=revision, exist_ok=True), subject=repo_id
        )

    # ---- status page, collection and output-namespace listing (bot/status/, bot/publish/collection.py) ----

    def list_namespace(self, namespace: str) -> dict[str, str]:
        """Every model repo of `namespace` with its current sha, from one listing (one request per 1000 repos).

        Used to cross-check published repos cheaply: a repo whose sha differs from the one the status recorded,
        or that is missing, was changed or deleted by someone else. Pages are followed by their `Link` header up to
        `MAX_NAMESPACE_PAGES`, so a listing that never ends (even with empty pages) still stops.
        """

        def fetch() -> dict[str, str]:
            headers = hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")
            url: str | None = f"{self.endpoint}/api/models"
            params: dict | None = {"author": namespace, "expand": ["sha", "lastModified"], "limit": 1000}
            repos: dict[str, str] = {}
            for _ in range(MAX_NAMESPACE_PAGES):
                if url is None:
                    break
                response = hf.utils.get_session().get(url, params=params, headers=headers)
                hf.utils.hf_raise_for_status(response)
                for item in response.json():
                    if isinstance(item, dict) and isinstance(item.get("id"), str):
                        repos[item["id"]] = str(item.get("sha") or "")
                url, params = response.links.get("next", {}).get("url"), None
            return repos

        return self.call(Stage.LIST_NAMESPACE, fetch, subject=namespace)

    def read_dataset_file(self, repo_id: str, filename: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes | None:
        """One small file of a dataset repo (`read_file`); a file over the limit is a Failure here, since the
        status repo is the bot's own."""
        try:
            return self.read_file(repo_id, filename, max_bytes=max_bytes, repo_type="dataset")
        except Skip as skip:
            raise Failure(skip.message, subject=repo_id, stage=Stage.READ) from None

    def commit_files(
        self, repo_id: str, files: dict[str, bytes], *, message: str, repo_type: str = "dataset", private: bool = False
    ) -> CommitResult:
        """Create the repo if needed and commit these files in ONE commit guarded by `parent_commit`.

        Files whose bytes equal the Hub's are left out by the client; when none differ there is no commit
        (`CommitResult.commit` is None).
        """
        self.call(
            Stage.CREATE_REPO,
            lambda: self.api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True),
            subject=repo_id,
        )
        head = self.call(Stage.INFO, lambda: self.api.repo_info(repo_id, repo_type=repo_type).sha, subject=repo_id)
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

        with self.uploads.applied():
            return self.call(Stage.COMMIT, commit, subject=repo_id)

    def ensure_collection(
        self, title: str, namespace: str, *, description: str | None = None, private: bool = False
    ) -> CollectionState:
        """The namespace's collection of this title, created when missing (one POST; a GET when it exists)."""
        return self.call(
            Stage.COLLECTION,
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
            Stage.COLLECTION,
            lambda: _collection_state(self.api.add_collection_item(slug, repo_id, "model", note=note, exists_ok=True)),
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


def _upload_stopped(exc: Exception, *, subject: str | None, stage: Stage) -> HubError | None:
    """The error of an upload the floor or the deadline stopped (`bot.core.deadlines`), naming the file, the bytes
    and the limit; None for any other exception. huggingface_hub wraps an LFS upload's error in a `RuntimeError`
    naming the file ("Error while uploading 'x' to the Hub.")."""
    cause = exc.__cause__
    if not isinstance(exc, RuntimeError) or not isinstance(cause, deadlines.Stalled | deadlines.DeadlinePassed):
        return None
    return HubError(f"{_short(exc, 200)} Stopped: {cause}", status=None, subject=subject, stage=stage)


class _Interrupted(Exception):
    """A transfer stopped part-way (stalled, dropped, past the deadline); `Hub._transfer` decides whether to resume."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.reason = _short(cause, 200) or type(cause).__name__
        self.final = isinstance(cause, deadlines.DeadlinePassed)


def _get_into(url: str, headers: dict[str, str], part: Path, size: int, where: str, *, progress: str = "") -> None:
    """One GET of a file into `part`, from the byte it already holds; every byte is on disk as soon as it arrives,
    and never one past the `size` the Hub lists for the file, whatever the answer claims or sends. With `progress`
    (the repo and file, never the URL or headers), a line says the bytes so far and the rate every
    `log.PROGRESS_INTERVAL_S` (`log.ByteProgress`).

    `identity`: the bytes on the wire are the file's own (the Hub gzips text files otherwise), so a Range resumes at
    an exact byte and the hash covers the file as stored.

    Raises:
        _Interrupted: the answer stalled, the connection failed, or the deadline passed.
        Failure: the answer claims or sends more than `size` bytes (a CDN or mirror sending another body): stopped
            there, naming the file, the bytes and the limit.
        InfrastructureFailure: the disk is full (one line: the bytes the file still needs and the bytes free).
    """
    offset = _size(part)
    if offset > size:
        part.unlink()
        offset = 0
    elif offset and offset == size:
        return  # complete already; the hash check decides
    request_headers = {**headers, "Accept-Encoding": "identity"}
    if offset:
        request_headers["Range"] = f"bytes={offset}-"
    try:
        with hf.utils.get_session().stream("GET", url, headers=request_headers, follow_redirects=True) as response:
            hf.utils.hf_raise_for_status(response)
            # A server that ignores the Range sends the whole file again (200): start over.
            resumed = bool(offset) and response.status_code == 206
            written = offset if resumed else 0
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and written + int(declared) > size:
                raise _oversized(where, written + int(declared), size, claimed=True)
            shown = log.ByteProgress(progress, size, done=written) if progress else None
            with part.open("ab" if resumed else "wb") as out:
                for chunk in response.iter_bytes():
                    if written + len(chunk) > size:
                        raise _oversized(where, written + len(chunk), size, claimed=False)
                    _write(out, chunk, part, where, needed=size - written)
                    written += len(chunk)
                    if shown is not None:
                        shown.advance(len(chunk))
    except (deadlines.Stalled, deadlines.DeadlinePassed, httpx.TransportError) as exc:
        raise _Interrupted(exc) from None


def _oversized(where: str, got: int, size: int, *, claimed: bool) -> Failure:
    how = f"its answer claims {got} bytes" if claimed else f"its answer ran to {got} bytes"
    return Failure(
        f"download of {where} stopped: {how}, over the {size} bytes the Hub lists for the file (nothing past "
        f"{size} bytes is written; a CDN, proxy or mirror sent another body)",
        stage=Stage.DOWNLOAD,
    )


def _write(out: BinaryIO, chunk: bytes, part: Path, where: str, *, needed: int) -> None:
    """Write one chunk of a download; a full disk is the runner's fault, said in one line."""
    try:
        out.write(chunk)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise disk_full(f"download of {where}", needed, part.parent) from None


def disk_full(what: str, needed: int, folder: Path) -> InfrastructureFailure:
    """The one line a full disk is reported with: what needed the room, the bytes it needed and the bytes free."""
    try:
        free: int | str = shutil.disk_usage(folder).free
    except OSError:
        free = "unknown"
    return InfrastructureFailure(
        f"disk full: {what} needs {needed} more bytes, {free} bytes free on the runner's disk ({folder})",
        runner=RunnerFault.DISK_FULL,
        stage=Stage.DOWNLOAD,
    )


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _identity(answer: dict) -> TokenIdentity:
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


def _verdict(
    exc: Exception, *, subject: str | None, stage: Stage, hub: Hub | None = None
) -> tuple[BotError, bool] | None:
    """What an exception from a Hub operation means: the error to raise, and whether a retry may help.

    A rejected token names the variable it came from (`Hub.token_name`) and an unreachable Hub its endpoint, in a
    line that says what to check rather than a cut-off URL.

    Returns:
        None for an exception that says nothing about the Hub (it is re-raised as it is).
    """
    if isinstance(exc, BotError):
        return None
    if isinstance(exc, ValueError) and str(exc).startswith("Invalid metadata in README.md"):
        # `create_commit` asked the Hub about the card first (validate-yaml) and it refused: nothing was uploaded.
        reasons = " ".join(line.lstrip("- ") for line in str(exc).splitlines()[1:] if line.strip())
        return Failure(f"the Hub refuses the card's metadata: {reasons}", subject=subject, stage=Stage.PUBLISH), False
    if isinstance(exc, hf.utils.HFValidationError):
        return Skip(f"not a valid Hub repo id or revision: {_short(exc, 160)}", subject=subject, stage=stage), False
    if isinstance(exc, hf.errors.HfHubHTTPError):
        response = exc.response
        status = response.status_code if response is not None else None
        code = response.headers.get("X-Error-Code") if response is not None else None
        if code in _DEFINITIVE:
            return Skip(_DEFINITIVE[code], subject=subject, stage=stage), False
        if status == 401 and hub is not None and hub.token:
            said = " ".join((exc.server_message or "invalid credentials").split())[:120]
            message = (
                f"the Hub ({hub.endpoint}) rejected the token in {hub.token_name} (401: {said}): check that it is "
                "set to a valid, unexpired token of the account"
            )
            return HubError(message, status=status, subject=subject, stage=stage), False
        origin = " without the Hub's X-Error-Code (a proxy's or CDN's answer)" if status in (401, 403, 404) else ""
        error_class = PreconditionFailed if status == 412 else HubError
        error = error_class(
            f"Hub answered {status}{origin}: {_short(exc)}", status=status, subject=subject, stage=stage
        )
        return error, status in _RETRY_STATUSES
    if isinstance(exc, deadlines.DeadlinePassed):
        return HubError(str(exc), status=None, subject=subject, stage=stage), False
    if isinstance(exc, deadlines.Stalled | httpx.TransportError | ConnectionError):
        late = deadlines.passed()  # a timeout cut short by the stage's deadline
        if late is not None:
            return HubError(f"{late} ({_short(exc, 120)})", status=None, subject=subject, stage=stage), False
        where = f" at {hub.endpoint}" if hub is not None else ""
        message = (
            f"no answer from the Hub{where} (check HF_ENDPOINT or --endpoint, and the network): {_short(exc, 160)}"
        )
        return HubError(message, status=None, subject=subject, stage=stage), True
    return None


def _response_of(exc: Exception) -> httpx.Response | None:
    response = getattr(exc, "response", None)
    return response if isinstance(response, httpx.Response) else None


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
