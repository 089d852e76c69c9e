"""Deadlines for every Hub request, so a Hub that stops talking cannot hold a run (issue 21).

huggingface_hub sends everything through one shared httpx client, and many of its calls pass `timeout=None` (no
limit at all). `bot.hub` installs the two hooks below on that client, so they see every request and answer:
`on_request` gives the request the connect and read timeouts in force whatever its call site asked for, and
`on_response` watches the answer's body, since an answer that trickles (one byte every few seconds never trips a
read timeout) must count as stalled too. `stage_deadline` caps a whole stage: past it, the next request or chunk
stops with `DeadlinePassed`. The limits in force are context variables: `bot.hub.Hub.call` applies its Hub's, and a
thread that huggingface_hub starts on its own (parallel LFS uploads) gets `DEFAULT_LIMITS`.

This module knows httpx only; `bot.hub` turns `Stalled` and `DeadlinePassed` into the bot's errors.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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


DEFAULT_LIMITS = Limits(connect_s=10.0, read_s=60.0, min_bytes_per_s=16 * 1024)


class Stalled(Exception):
    """An answer went silent for `read_s`, or stayed under `min_bytes_per_s` for a whole window."""

    def __init__(self, message: str, *, received: int):
        super().__init__(message)
        self.received = received


class DeadlinePassed(Exception):
    """A stage ran past its deadline; the request or chunk that found out stops here."""

    def __init__(self, stage: str, seconds: float):
        super().__init__(f"the {stage} deadline of {seconds:g} s passed")
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


_LIMITS: ContextVar[Limits] = ContextVar("dflash_bot_hub_limits", default=DEFAULT_LIMITS)
_DEADLINE: ContextVar[_Deadline | None] = ContextVar("dflash_bot_hub_deadline", default=None)


@contextmanager
def limits(applied: Limits) -> Iterator[None]:
    """Apply `applied` to every request this context sends (`bot.hub.Hub.call` wraps each Hub operation in it)."""
    token = _LIMITS.set(applied)
    try:
        yield
    finally:
        _LIMITS.reset(token)


@contextmanager
def stage_deadline(stage: str, seconds: float) -> Iterator[None]:
    """Let the requests of this context run until `seconds` from now; an enclosing, earlier deadline still wins."""
    outer = _DEADLINE.get()
    deadline = _Deadline(stage, seconds, time.monotonic() + seconds)
    token = _DEADLINE.set(outer if outer is not None and outer.expires <= deadline.expires else deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before the deadline in force (None: no deadline)."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline.expires - time.monotonic()


def passed() -> DeadlinePassed | None:
    """The deadline in force as an error when it has passed (a timeout it cut short is then the deadline's doing)."""
    deadline = _DEADLINE.get()
    if deadline is None or time.monotonic() < deadline.expires:
        return None
    return DeadlinePassed(deadline.stage, deadline.seconds)


def check_deadline() -> None:
    """Raise `DeadlinePassed` when the deadline in force has passed (before a retry's wait, say)."""
    deadline = _DEADLINE.get()
    if deadline is not None:
        deadline.check()


def timeouts() -> httpx.Timeout:
    """The limits in force as an httpx timeout, none longer than what is left of the deadline."""
    current, left = _LIMITS.get(), remaining()

    def cap(seconds: float) -> float:
        return seconds if left is None else max(min(seconds, left), 0.001)

    read = cap(current.read_s)
    return httpx.Timeout(connect=cap(current.connect_s), read=read, write=read, pool=cap(current.connect_s))


def on_request(request: httpx.Request) -> None:
    """Request hook: stop a request of a stage past its deadline; give every request the timeouts in force.

    httpx reads the timeouts from the request's extensions when it sends it, so this overrides any timeout
    (including `None`, no limit) that huggingface_hub's call site passed.
    """
    check_deadline()
    request.extensions["timeout"] = timeouts().as_dict()


def on_response(response: httpx.Response) -> None:
    """Response hook: watch the answer's body as it is read (`_GuardedStream`)."""
    if isinstance(response.stream, httpx.SyncByteStream):
        response.stream = _GuardedStream(response.stream, _LIMITS.get(), _DEADLINE.get())


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
        window_start, window_bytes = time.monotonic(), 0
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
            window_bytes += len(chunk)
            elapsed = now - window_start
            if elapsed >= self._limits.read_s:
                if window_bytes < self._limits.min_bytes_per_s * elapsed:
                    raise Stalled(
                        f"{window_bytes} bytes in {elapsed:.1f} s, under the "
                        f"{self._limits.min_bytes_per_s} bytes/s a download must keep up",
                        received=self.received,
                    )
                window_start, window_bytes = now, 0
            yield chunk

    def close(self) -> None:
        self._inner.close()
