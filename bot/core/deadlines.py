"""Deadlines for every Hub request, so a Hub that stops talking cannot hold a run (issue 21).

huggingface_hub sends everything through one shared httpx client, and many of its calls pass `timeout=None` (no
limit at all). `bot.hub` installs the two hooks below on that client, so they see every request and answer:
`on_request` gives the request the connect and read timeouts in force whatever its call site asked for, and
`on_response` watches the answer's body, since an answer that trickles (one byte every few seconds never trips a
read timeout) must count as stalled too, and so does an upload's body: `on_request` feeds it to the socket under
the same rate floor and deadline (an upload the Hub takes at 280 B/s would otherwise hold the write-token job until
its timeout: a socket write timeout resets with every byte the peer takes). `stage_deadline` caps a whole stage: past
it, the next request or chunk stops with `DeadlinePassed`; a `Budget` caps the time several stages spend together
(every upload of a publish job). The limits in force are context variables: `bot.hub.transport.Transport.call`
applies its Hub's, and a thread that huggingface_hub starts on its own (parallel LFS uploads) gets those of the
innermost `Hub.call` running when it sends (`shared_with_threads`), so an upload thread has the floor and deadline
of the commit that started it.

This module knows httpx only; `bot.hub` turns `Stalled` and `DeadlinePassed` into the bot's errors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Limits:
    """How long one request may take to connect, how long its answer may stay silent, and how slow it may be.

    Attributes:
        connect_s: to open a connection (and to get one from the pool).
        read_s: the longest silence on an open connection (also the write timeout of an upload).
        min_bytes_per_s: an answer that delivers less than this over a whole `read_s` window is stalled (0: off).
    """

    connect_s: float
    read_s: float
    min_bytes_per_s: int
    upload_attempts: int = 3  # sends of one upload (huggingface_hub retries its own): a download's attempts


DEFAULT_LIMITS = Limits(connect_s=10.0, read_s=60.0, min_bytes_per_s=16 * 1024)
_UPLOADS: dict[str, int] = {}  # an upload's URL -> the sends that got no answer so far
_UPLOADS_LOCK = threading.Lock()


class Stalled(Exception):
    """An answer went silent for `read_s`, or stayed under `min_bytes_per_s` for a whole window."""

    def __init__(self, message: str, *, received: int):
        super().__init__(message)
        self.received = received


class DeadlinePassed(Exception):
    """A stage ran past its deadline; the request or chunk that found out stops here."""

    def __init__(self, stage: str, seconds: float, detail: str = ""):
        super().__init__(f"the {stage} deadline of {seconds:g} s passed" + (f" ({detail})" if detail else ""))
        self.stage = stage
        self.seconds = seconds


@dataclass(frozen=True)
class _Deadline:
    stage: str
    seconds: float
    expires: float  # time.monotonic()

    def check(self, now: float | None = None) -> None:
        if (time.monotonic() if now is None else now) >= self.expires:
            raise DeadlinePassed(self.stage, self.seconds)


# No defaults: a context that set neither (a thread huggingface_hub started) takes what `shared_with_threads` shares.
_LIMITS: ContextVar[Limits] = ContextVar("dflash_bot_hub_limits")
_DEADLINE: ContextVar[_Deadline | None] = ContextVar("dflash_bot_hub_deadline")
_SHARED: list[tuple[Limits, _Deadline | None]] = []  # innermost last; for threads without a context of their own
_SHARED_LOCK = threading.Lock()


def _limits() -> Limits:
    with _SHARED_LOCK:
        shared = _SHARED[-1][0] if _SHARED else DEFAULT_LIMITS
    return _LIMITS.get(shared)


def _deadline() -> _Deadline | None:
    with _SHARED_LOCK:
        shared = _SHARED[-1][1] if _SHARED else None
    return _DEADLINE.get(shared)


@contextmanager
def limits(applied: Limits) -> Iterator[None]:
    """Apply `applied` to every request this context sends (`bot.hub.transport.Transport.call` wraps each Hub
    operation in it)."""
    token = _LIMITS.set(applied)
    try:
        yield
    finally:
        _LIMITS.reset(token)


@contextmanager
def shared_with_threads() -> Iterator[None]:
    """While this runs, a thread without limits of its own (huggingface_hub's upload threads) uses the limits and
    deadline in force here."""
    entry = (_limits(), _deadline())
    with _SHARED_LOCK:
        _SHARED.append(entry)
    try:
        yield
    finally:
        with _SHARED_LOCK:
            for index in range(len(_SHARED) - 1, -1, -1):
                if _SHARED[index] is entry:
                    del _SHARED[index]
                    break


@contextmanager
def stage_deadline(stage: str, seconds: float) -> Iterator[None]:
    """Let the requests of this context run until `seconds` from now; an enclosing, earlier deadline still wins."""
    outer = _deadline()
    deadline = _Deadline(stage, seconds, time.monotonic() + seconds)
    token = _DEADLINE.set(outer if outer is not None and outer.expires <= deadline.expires else deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class Budget:
    """One deadline that many stages share, counting only the time spent inside them: every upload of one process's
    Hub client (`HubSettings.upload_deadline_s`), so a publish job that commits many repos to a slow Hub still stops
    in time to write its report, while the builds between its commits (`dflash-bot run`) do not count."""

    def __init__(self, stage: str, seconds: float):
        self.stage = stage
        self.seconds = seconds
        self.spent = 0.0
        self._lock = threading.Lock()

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Let this context's requests run until the budget is spent; an enclosing, earlier deadline still wins."""
        started = time.monotonic()
        with self._lock:
            left = max(self.seconds - self.spent, 0.0)
        outer = _deadline()
        mine = _Deadline(self.stage, self.seconds, started + left)
        token = _DEADLINE.set(outer if outer is not None and outer.expires <= mine.expires else mine)
        try:
            yield
        finally:
            _DEADLINE.reset(token)
            with self._lock:
                self.spent += time.monotonic() - started


def remaining() -> float | None:
    """Seconds left before the deadline in force (None: no deadline)."""
    deadline = _deadline()
    return None if deadline is None else deadline.expires - time.monotonic()


def passed() -> DeadlinePassed | None:
    """The deadline in force as an error when it has passed (a timeout it cut short is then the deadline's doing)."""
    deadline = _deadline()
    if deadline is None or time.monotonic() < deadline.expires:
        return None
    return DeadlinePassed(deadline.stage, deadline.seconds)


def check_deadline() -> None:
    """Raise `DeadlinePassed` when the deadline in force has passed (before a retry's wait, say)."""
    deadline = _deadline()
    if deadline is not None:
        deadline.check()


def timeouts() -> httpx.Timeout:
    """The limits in force as an httpx timeout, none longer than what is left of the deadline."""
    current, left = _limits(), remaining()

    def cap(seconds: float) -> float:
        return seconds if left is None else max(min(seconds, left), 0.001)

    read = cap(current.read_s)
    return httpx.Timeout(connect=cap(current.connect_s), read=read, write=read, pool=cap(current.connect_s))


def on_request(request: httpx.Request) -> None:
    """Request hook: stop a request of a stage past its deadline; give every request the timeouts in force.

    httpx reads the timeouts from the request's extensions when it sends it, so this overrides any timeout
    (including `None`, no limit) that huggingface_hub's call site passed.
    """
    size = request.headers.get("Content-Length", "?")
    try:
        check_deadline()
    except DeadlinePassed as late:  # an upload's next send: say what it had to send
        if request.method != "PUT":
            raise
        raise DeadlinePassed(late.stage, late.seconds, f"{size} bytes to send") from None
    request.extensions["timeout"] = timeouts().as_dict()
    if isinstance(request.stream, httpx.SyncByteStream) and request.method in ("PUT", "POST", "PATCH"):
        applied = _limits()
        if request.method == "PUT":
            _count_send(str(request.url), size, applied)
        request.stream = _GuardedUpload(request.stream, applied, _deadline(), size)


def _count_send(url: str, size: str, applied: Limits) -> None:
    """Count one send of an upload (huggingface_hub sends an LFS file again after each timeout, five times, without
    a bound on the whole); past `upload_attempts` sends without an answer it stops, as a download does.

    Raises:
        Stalled: every allowed send of the upload went unanswered (the Hub took its bytes too slowly, or not at all).
    """
    with _UPLOADS_LOCK:
        sent = _UPLOADS.get(url, 0)
        if sent >= applied.upload_attempts:
            del _UPLOADS[url]
            raise Stalled(
                f"{sent} sends of its {size} bytes got no answer within {applied.read_s:g} s of silence each (the "
                f"Hub took them under the {applied.min_bytes_per_s} bytes/s an upload must keep up, or not at all)",
                received=0,
            )
        _UPLOADS[url] = sent + 1


def on_response(response: httpx.Response) -> None:
    """Response hook: watch the answer's body as it is read (`_GuardedStream`)."""
    request = response._request  # None for an answer made without a request (the unit tests')
    if request is not None and request.method == "PUT":
        with _UPLOADS_LOCK:
            _UPLOADS.pop(str(request.url), None)  # answered: the upload is no longer stalled
    if isinstance(response.stream, httpx.SyncByteStream):
        response.stream = _GuardedStream(response.stream, _limits(), _deadline())


class _Window:
    """The rate floor over `read_s` windows: `add` raises `Stalled` when a whole window moved too few bytes."""

    def __init__(self, applied: Limits, what: str):
        self._limits = applied
        self._what = what
        self.start, self.bytes, self.total = time.monotonic(), 0, 0

    def add(self, count: int, now: float) -> None:
        self.total += count
        self.bytes += count
        elapsed = now - self.start
        if elapsed >= self._limits.read_s:
            if self.bytes < self._limits.min_bytes_per_s * elapsed:
                raise Stalled(
                    f"{self.bytes} bytes in {elapsed:.1f} s, under the {self._limits.min_bytes_per_s} bytes/s "
                    f"{self._what} must keep up",
                    received=self.total,
                )
            self.start, self.bytes = now, 0


class _GuardedUpload(httpx.SyncByteStream):
    """A request body handed to the socket in pieces small enough that each one shows the upload's pace: past the
    deadline it stops (`DeadlinePassed`), and a window under the rate floor stops it (`Stalled`), as a download.

    A socket's write timeout alone never fires on a peer that takes a byte now and then; the pieces are at most what
    the floor moves in a second, so a trickling peer is found within about a window and a piece.
    """

    def __init__(self, inner: httpx.SyncByteStream, applied: Limits, deadline: _Deadline | None, size: str = "?"):
        self._inner = inner
        self._limits = applied
        self._deadline = deadline
        self._size = size  # the body's Content-Length, named when the deadline stops it
        self._piece = max(1024, min(applied.min_bytes_per_s or 64 * 1024, 64 * 1024))

    def __iter__(self) -> Iterator[bytes]:
        window = _Window(self._limits, "an upload")
        for chunk in _pieces(self._inner, self._piece):
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline.expires:
                sent = f"{window.total} of its {self._size} bytes sent in this send"
                raise DeadlinePassed(self._deadline.stage, self._deadline.seconds, sent)
            if self._limits.min_bytes_per_s:
                window.add(0, now)  # the time the piece before took to leave counts
            yield chunk
            window.bytes += len(chunk)
            window.total += len(chunk)

    def close(self) -> None:
        self._inner.close()


def _pieces(chunks: Iterable[bytes], size: int) -> Iterator[bytes]:
    for chunk in chunks:
        for start in range(0, len(chunk), size):
            yield chunk[start : start + size]


class _GuardedStream(httpx.SyncByteStream):
    """A body that raises `Stalled` when it goes silent or trickles, and `DeadlinePassed` past the stage deadline.

    A read timeout is turned into `Stalled` here, so the caller that knows the file decides whether to resume
    (`bot.hub`), rather than retrying inside huggingface_hub with no bound on the total time.
    """

    def __init__(self, inner: httpx.SyncByteStream, applied: Limits, deadline: _Deadline | None):
        self._inner = inner
        self._limits = applied
        self._deadline = deadline
        self.received = 0

    def __iter__(self) -> Iterator[bytes]:
        window = _Window(self._limits, "an answer")
        chunks = iter(self._inner)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except httpx.ReadTimeout:
                raise Stalled(
                    f"no data for {self._limits.read_s:g} s after {self.received} bytes of the answer",
                    received=self.received,
                ) from None
            now = time.monotonic()
            if self._deadline is not None:
                self._deadline.check(now)
            self.received += len(chunk)
            window.add(len(chunk), now)
            yield chunk

    def close(self) -> None:
        self._inner.close()
