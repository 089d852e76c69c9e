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
    """A bounded, thread-safe list of records (the oldest are dropped past MAX_RECORDS)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=MAX_RECORDS)

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
