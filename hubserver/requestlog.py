"""The request log: what clients asked for, so tests and benchmarks can count calls and bytes.

Readable in-process (`LocalHub.requests()`) and over HTTP (`GET /api/_admin/requests`, main token), from any
process. Admin calls are not recorded: they are the observer's own traffic, and counting them would skew what
is being measured. Query values of keys that could carry secrets are masked; tokens never reach the log, as
records hold the caller's user name only.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

_SECRET_QUERY_KEYS = ("token", "signature", "secret", "password", "key", "auth")
MAX_RECORDS = 100_000


@dataclass(frozen=True)
class RequestRecord:
    """One answered (or dropped) request. `status` is None when a fault dropped the connection."""

    method: str
    path: str
    query: dict[str, list[str]]
    status: int | None
    bytes_out: int
    time: float
    duration: float
    user: str | None
    fault: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def mask_query(query: dict[str, list[str]]) -> dict[str, list[str]]:
    return {
        key: ["***"] * len(values) if any(word in key.lower() for word in _SECRET_QUERY_KEYS) else values
        for key, values in query.items()
    }


class RequestLog:
    """A bounded, thread-safe list of records (the oldest are dropped past MAX_RECORDS).

    A request is recorded after its answer is written, so a client can hold the answer a moment before the record
    exists. Each request is therefore announced with `start()` when it arrives, and `snapshot()` and `clear()` wait
    (up to SETTLE_SECONDS) until every announced request is recorded: a test that clears the log right after a
    call cannot have that call's record land in its own, fresh log.
    """

    SETTLE_SECONDS = 5.0

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._records: deque[RequestRecord] = deque(maxlen=MAX_RECORDS)
        self._open = 0  # announced and not yet recorded

    def start(self) -> None:
        with self._changed:
            self._open += 1

    def add(self, record: RequestRecord) -> None:
        """Record an announced request (every `start()` is followed by exactly one `add()`)."""
        with self._changed:
            self._records.append(record)
            self._open = max(self._open - 1, 0)
            self._changed.notify_all()

    def snapshot(self) -> list[RequestRecord]:
        with self._changed:
            self._changed.wait_for(lambda: self._open == 0, timeout=self.SETTLE_SECONDS)
            return list(self._records)

    def clear(self) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._open == 0, timeout=self.SETTLE_SECONDS)
            self._records.clear()
