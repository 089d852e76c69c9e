"""HTTP plumbing kept apart from Hub logic: request and response records, body reading, and the route table.

Bodies are read lazily so an LFS upload streams to disk instead of memory; whatever a handler leaves unread is
drained afterwards, which keeps HTTP/1.1 keep-alive connections (httpx reuses them) in sync.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from . import errors
from .auth import Caller
from .faults import FaultRule

if TYPE_CHECKING:
    from .app import HubApp

CHUNK = 1024 * 1024


class BodyReader:
    """A request body, by `Content-Length` or chunked transfer encoding.

    Raises:
        ValueError: (from the constructor) a Content-Length that is not a non-negative integer.
    """

    def __init__(self, rfile: io.BufferedIOBase, headers: Message):
        self._rfile = rfile
        self._chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
        self._remaining = int(headers.get("Content-Length") or 0) if not self._chunked else 0
        if self._remaining < 0:
            raise ValueError("negative Content-Length")
        self._chunk_left = 0
        self._done = not self._chunked and self._remaining == 0
        self._cached: bytes | None = None

    @property
    def declared_length(self) -> int | None:
        return None if self._chunked else self._remaining

    def chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        """Stream the body; each call continues where the last one stopped."""
        while not self._done:
            data = self._read_some(size)
            if data:
                yield data

    def read(self) -> bytes:
        """The whole body (cached, so handlers may call this more than once)."""
        if self._cached is None:
            self._cached = b"".join(self.chunks())
        return self._cached

    def drain(self) -> None:
        for _ in self.chunks():
            pass

    def _read_some(self, size: int) -> bytes:
        if not self._chunked:
            data = self._rfile.read(min(size, self._remaining))
            if not data:
                raise ConnectionError("client closed the connection mid-body")
            self._remaining -= len(data)
            self._done = self._remaining == 0
            return data
        if self._chunk_left == 0:
            line = self._rfile.readline(1024)
            chunk_size = int(line.split(b";")[0].strip() or b"0", 16)
            if chunk_size == 0:
                while self._rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self._done = True
                return b""
            self._chunk_left = chunk_size
        data = self._rfile.read(min(size, self._chunk_left))
        if not data:
            raise ConnectionError("client closed the connection mid-body")
        self._chunk_left -= len(data)
        if self._chunk_left == 0:
            self._rfile.readline(1024)  # CRLF after each chunk
        return data


@dataclass
class Request:
    """One parsed request. `params` are the route's captures, percent-decoded one by one."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message
    caller: Caller
    base_url: str
    body: BodyReader
    params: tuple[str, ...] = ()
    fault: FaultRule | None = None

    def args(self, name: str) -> list[str]:
        """All values of a query key, accepting the `name[]` spelling too (the client uses both)."""
        return self.query.get(name, []) + self.query.get(f"{name}[]", [])

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.args(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return (self.arg(name) or "").lower() in ("1", "true", "yes")

    def json(self) -> Any:
        """The body as JSON. Raises HubError 400 when it is not."""
        try:
            return json.loads(self.body.read() or b"null")
        except ValueError as exc:
            raise errors.bad_request(f"Invalid JSON body: {exc}") from None

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; an empty body counts as `{}`."""
        data = self.json()
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise errors.bad_request("Expected a JSON object")
        return data


@dataclass
class Response:
    """An answer: a small body in memory, or (for downloads) a byte range of a file."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    file: Path | None = None
    file_range: tuple[int, int] | None = None  # [start, end) of `file`

    @classmethod
    def json(cls, data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return cls(
            status=status,
            body=json.dumps(data).encode(),
            headers={"Content-Type": "application/json; charset=utf-8", **(headers or {})},
        )

    @classmethod
    def error(cls, error: errors.HubError) -> Response:
        # Header values must be latin-1 and single-line; the JSON body keeps the full text.
        header_message = " ".join(error.message.split()).encode("latin-1", "replace").decode("latin-1")
        headers = {"X-Error-Message": header_message, **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        return cls.json({**error.extra, "error": error.message}, status=error.status, headers=headers)


Handler = Callable[["HubApp", Request], Response]

# Building blocks for route patterns; every group is one percent-encoded path segment unless noted.
SEG = r"([^/]+)"
REPO_TYPE = r"(models|datasets|spaces)"
REPO = rf"{REPO_TYPE}/{SEG}/{SEG}"
GIT_PREFIX = r"(?:(datasets|spaces)/)?"


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


class RouteTable:
    """Routes declared with decorators in each routes module, matched in declaration order."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def route(self, methods: str, pattern: str) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            for method in methods.split():
                self.routes.append(Route(method, re.compile(f"^{pattern}$"), handler))
            return handler

        return register

    def extend(self, other: RouteTable) -> None:
        self.routes.extend(other.routes)

    def match(self, method: str, path: str) -> tuple[Route, tuple[str, ...]]:
        """Find the route for a request.

        Raises:
            HubError: 404 when no pattern matches, 405 when only other methods do.
        """
        allowed = False
        for route in self.routes:
            found = route.pattern.match(path)
            if found:
                if route.method == method:
                    return route, tuple(unquote(group) if group else "" for group in found.groups())
                allowed = True
        if allowed:
            raise errors.HubError(405, f"Method {method} not allowed on {path}")
        raise errors.HubError(404, "Not Found")
