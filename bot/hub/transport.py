"""How the bot talks to the Hub: the process's HTTP client, timeouts, bounded retries and error translation.

Raw client exceptions stop here: Hub errors become `Skip` (gated, missing, private: the source is not ours to build)
or `Failure` (the Hub misbehaved after bounded retries). Only the Hub's own error codes make a `Skip`, which the
status repo remembers; any other answer (a 404 from a proxy or CDN, a 5xx, silence) is a `HubError`, tried again by
the next run. Every request has timeouts (`bot.core.deadlines`), and the process's requests are counted (`REQUESTS`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

import httpx
import huggingface_hub as hf
import huggingface_hub.constants
import huggingface_hub.errors
import huggingface_hub.utils._http

from bot.core import deadlines, log
from bot.core.errors import BotError, Failure, HubError, PreconditionFailed, Skip, Stage
from bot.core.recipe import HubSettings
from bot.core.settings import DEFAULT_ENDPOINT

T = TypeVar("T")
_RETRY_STATUSES = {429, 500, 502, 503, 504}
# The Hub's own answers (`X-Error-Code`) that say a source is not there for us: the only ones that make a Skip.
_DEFINITIVE = {
    "GatedRepo": "gated repo and the token has not been granted access (request access on the Hub)",
    "RevisionNotFound": "revision not found",
    "EntryNotFound": "file not found at that revision",
    "RepoNotFound": "repo not found, or private and the token cannot see it",
}


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


class Transport:
    """A Hub endpoint plus one token, and how every operation on it runs: under this client's timeouts, with bounded
    retries, the Hub's errors turned into the bot's (`call`). `bot.hub.client.Hub` adds the operations.

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

    def headers(self) -> dict[str, str]:
        """The headers of a request sent by hand (a paged listing, a streamed file): this client's token, if any."""
        return hf.utils.build_hf_headers(token=self.token or False, library_name="dflash-bot")


def _upload_stopped(exc: Exception, *, subject: str | None, stage: Stage) -> HubError | None:
    """The error of an upload the floor or the deadline stopped (`bot.core.deadlines`), naming the file, the bytes
    and the limit; None for any other exception. huggingface_hub wraps an LFS upload's error in a `RuntimeError`
    naming the file ("Error while uploading 'x' to the Hub.")."""
    cause = exc.__cause__
    if not isinstance(exc, RuntimeError) or not isinstance(cause, deadlines.Stalled | deadlines.DeadlinePassed):
        return None
    return HubError(f"{one_line(exc, 200)} Stopped: {cause}", status=None, subject=subject, stage=stage)


def _verdict(
    exc: Exception, *, subject: str | None, stage: Stage, hub: Transport | None = None
) -> tuple[BotError, bool] | None:
    """What an exception from a Hub operation means: the error to raise, and whether a retry may help.

    A rejected token names the variable it came from (`Transport.token_name`) and an unreachable Hub its endpoint, in a
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
        return Skip(f"not a valid Hub repo id or revision: {one_line(exc, 160)}", subject=subject, stage=stage), False
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
            f"Hub answered {status}{origin}: {one_line(exc)}", status=status, subject=subject, stage=stage
        )
        return error, status in _RETRY_STATUSES
    if isinstance(exc, deadlines.DeadlinePassed):
        return HubError(str(exc), status=None, subject=subject, stage=stage), False
    if isinstance(exc, deadlines.Stalled | httpx.TransportError | ConnectionError):
        late = deadlines.passed()  # a timeout cut short by the stage's deadline
        if late is not None:
            return HubError(f"{late} ({one_line(exc, 120)})", status=None, subject=subject, stage=stage), False
        where = f" at {hub.endpoint}" if hub is not None else ""
        message = (
            f"no answer from the Hub{where} (check HF_ENDPOINT or --endpoint, and the network): {one_line(exc, 160)}"
        )
        return HubError(message, status=None, subject=subject, stage=stage), True
    return None


def _response_of(exc: Exception) -> httpx.Response | None:
    response = getattr(exc, "response", None)
    return response if isinstance(response, httpx.Response) else None


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text[:limit]
