"""What the bot reads from the Hub: listings, a repo's files and commits, small files, published records, the token.

Each read is one operation of `Transport.call` (timeouts, retries, the Hub's errors as the bot's), and hands what
it read to `bot.core.hub_records` or `bot.core.record` for its typed record. Listings and commit histories are
paged by hand, each under a page limit: a mirror whose pages never end still lets a read stop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import huggingface_hub as hf

from bot.core import deadlines, log
from bot.core.errors import HubError, Skip, Stage
from bot.core.hub_records import (
    CommitEntry,
    RepoFiles,
    RepoListing,
    TokenIdentity,
    parse_commit,
    parse_identity,
    parse_listing,
    parse_repo_files,
)
from bot.core.record import (
    PROVENANCE_FILE,
    BuildRecord,
    RecordError,
    TargetRecord,
    parse_draft_record,
    parse_target_record,
)
from bot.hub.transport import Transport

R = TypeVar("R", BuildRecord, TargetRecord)
MAX_NAMESPACE_PAGES = 50  # 50,000 repos at 1000 a page: far more than two repos per watched source
MAX_LISTING_PAGES = 20  # a source's listing asks for `limit` repos, which the Hub sends in one page
_LISTING_EXPAND = ["sha", "lastModified", "tags", "gated", "private", "config", "cardData"]


class Reads(Transport):
    """The Hub's read operations (any token; none for public repos)."""

    def list_models(
        self, *, author: str | None, search: str | None, filter_tags: Iterable[str], limit: int | None
    ) -> list[RepoListing]:
        """One filtered listing, newest first (a page is one request). `Link` pages are followed up to `limit` repos
        (None: every page) and at most `MAX_LISTING_PAGES` pages: a listing whose pages never end, or keep coming
        back empty (a hostile mirror; `HfApi.list_models` follows those for ever), still stops."""

        def fetch() -> list[RepoListing]:
            headers = self.headers()
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
                found += [
                    parse_listing(hf.ModelInfo(**item)) for item in page if isinstance(item, dict) and "id" in item
                ]
                url, params = response.links.get("next", {}).get("url"), None
            return found if limit is None else found[:limit]

        return self.call(Stage.LIST, fetch, subject=f"listing author={author} search={search}")

    def repo_files(self, repo_id: str, revision: str | None = None) -> RepoFiles:
        """A repo at one revision (None: its current commit): the commit, and each file's size."""
        return self.call(
            Stage.INFO,
            lambda: parse_repo_files(repo_id, self.api.model_info(repo_id, revision=revision, files_metadata=True)),
            subject=repo_id,
        )

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
            headers = self.headers()
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
        return self.call(Stage.WHOAMI, lambda: parse_identity(self.api.whoami()), subject="whoami")

    def repo_exists(self, repo_id: str) -> bool:
        """Whether a model repo exists for this token (a gated one does; a private one it cannot see does not)."""
        return self.call(Stage.INFO, lambda: self.api.repo_exists(repo_id), subject=repo_id)

    def commit_ids(self, repo_id: str, *, limit: int, pages: int) -> list[str]:
        """The commits of a repo's main branch, newest first, each once: at most `limit` of them from at most `pages`
        requests, and a page with no id it has not seen (a listing that loops) ends it (`dflash-bot try`)."""

        def fetch() -> list[str]:
            # Paged by hand: huggingface_hub's `list_repo_commits` reads every page before it returns one, and a
            # mirror that links each page to another never lets it stop.
            headers = self.headers()
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
            headers = self.headers()
            url: str | None = f"{self.endpoint}/api/models/{repo_id}/commits/{revision}"
            entries: list[CommitEntry] = []
            while url is not None and len(entries) < limit:
                response = hf.utils.get_session().get(url, headers=headers)
                hf.utils.hf_raise_for_status(response)
                page = response.json()
                if not isinstance(page, list) or not page:
                    break
                entries += [parse_commit(item) for item in page]
                url = response.links.get("next", {}).get("url")
            return entries[:limit]

        return self.call(Stage.COMMITS, fetch, subject=repo_id)

    def files_or_none(self, repo_id: str) -> RepoFiles | None:
        """A repo at its current commit, or None when it does not exist (or cannot be seen with this token)."""
        try:
            return self.repo_files(repo_id)
        except Skip:
            return None

    def list_namespace(self, namespace: str) -> dict[str, str]:
        """Every model repo of `namespace` with its current sha, from one listing (one request per 1000 repos).

        Used to cross-check published repos cheaply: a repo whose sha differs from the one the status recorded,
        or that is missing, was changed or deleted by someone else. Pages are followed by their `Link` header up to
        `MAX_NAMESPACE_PAGES`, so a listing that never ends (even with empty pages) still stops.
        """

        def fetch() -> dict[str, str]:
            headers = self.headers()
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
