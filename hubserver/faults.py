"""Fault injection: make chosen requests fail, stall or hang up, to test how the bot copes with a flaky Hub.

A rule (JSON object) matches by `path` (a regular expression searched in the URL path, without the query) and
optionally `method`, fires on the next `times` matching requests (default 1; a negative number means every one),
and does exactly one thing:

    {"path": "/api/models/.+/revision/", "status": 503}                  answer 503 (any status; JSON error body)
    {"path": "/api/models$", "status": 429, "retry_after": 2}           429 with Retry-After and RateLimit headers
    {"path": "/resolve/", "delay": 1.5}                                   wait, then serve the request normally
    {"method": "PUT", "path": "^/_lfs/upload/", "drop": true}            hang up (an upload after half its body)
    {"path": "^/api/models$", "endless_listing": true}                   listing pages that never end
    {"path": "^/api/models/a/b", "extra_siblings": ["../x.json"]}        a hostile listing: names no real Hub
                                                                           would store, added to repo info
    {"path": "/api/models/", "status": 404, "bare": true}                a proxy's or CDN's 404: no X-Error-Code,
                                                                           no X-Error-Message, no JSON body
    {"path": "/resolve/", "stall": 5}                                     accept, say nothing for 5 s, hang up
    {"path": "/resolve/", "stall": 5, "after_bytes": 4096}                the headers and 4096 bytes of the body,
                                                                           then the same silence and hang-up
    {"path": "/resolve/", "trickle": 5}                                   the headers, then one byte every 5 s
    {"path": "/resolve/.+model.safetensors", "corrupt": true}             the file with its last byte flipped: same
                                                                           length and headers, only a hash tells
    {"path": "/resolve/.+model.safetensors", "oversize": 1000000}         the file and 1 MB more, Content-Length
                                                                           claiming it all (a CDN or mirror that
                                                                           sends more than the Hub lists)
    {"method": "PUT", "path": "^/_lfs/upload/", "trickle_upload": 0.01}  read the request body one byte every
                                                                           0.01 s (an upload that trickles)
    {"method": "PUT", "path": "^/_lfs/upload/", "upload_rate": 2048}     read the request body at 2048 bytes/s, in
                                                                           pieces of a tenth of that (a slow Hub)
    {"path": "^/(api/models/)?a/b/", "fake_sha": "/home/u"}               a mirror that names a repo's commit
                                                                           "/home/u": repo info's `sha` and the
                                                                           commit listing's ids say it, and a
                                                                           request naming it gets `main`

`endless_listing` applies to the listing endpoints (models, commits, tree): every page comes back with the same
entries and a `Link` to itself. It fires on every matching request unless `times` says otherwise, since one endless
page is not endless.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

_ACTIONS = (
    "status",
    "delay",
    "drop",
    "endless_listing",
    "extra_siblings",
    "stall",
    "trickle",
    "corrupt",
    "oversize",
    "trickle_upload",
    "upload_rate",
    "fake_sha",
)
_MODIFIERS = ("retry_after", "bare", "after_bytes")  # refine an action: status (retry_after, bare), stall


@dataclass(frozen=True)
class FaultRule:
    """One rule; `times` counts down as it fires (negative: unlimited)."""

    path: str
    method: str | None = None
    times: int = 1
    status: int | None = None
    retry_after: float | None = None
    delay: float | None = None
    drop: bool = False
    endless_listing: bool = False
    extra_siblings: tuple[str, ...] = ()
    bare: bool = False
    stall: float | None = None
    after_bytes: int | None = None
    trickle: float | None = None
    corrupt: bool = False
    oversize: int | None = None
    trickle_upload: float | None = None
    upload_rate: int | None = None
    fake_sha: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultRule:
        """Parse and check one rule.

        Raises:
            ValueError: unknown keys, a bad regex, or not exactly one action.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"A fault rule must be a JSON object, got {data!r}")
        unknown = set(data) - {"path", "method", "times", *_MODIFIERS, *_ACTIONS}
        if unknown:
            raise ValueError(
                f"Unknown fault rule keys {sorted(unknown)}; known: path, method, times, {_MODIFIERS}, {_ACTIONS}"
            )
        actions = [key for key in _ACTIONS if data.get(key) not in (None, False)]
        if len(actions) != 1:
            raise ValueError(f"A fault rule needs exactly one action of {_ACTIONS}, got {actions or 'none'}")
        path = data.get("path")
        if not isinstance(path, str):
            raise ValueError("A fault rule needs `path`, a regular expression")
        try:
            re.compile(path)
        except re.error as exc:
            raise ValueError(f"Bad fault path regex {path!r}: {exc}") from None
        status = data.get("status")
        if status is not None and not (isinstance(status, int) and 100 <= status <= 599):
            raise ValueError(f"Fault status must be an HTTP status code, got {status!r}")
        siblings = data.get("extra_siblings") or ()
        if not (isinstance(siblings, list | tuple) and all(isinstance(name, str) for name in siblings)):
            raise ValueError("extra_siblings must be a list of file names")
        _check_timing(data, actions[0])
        for key in ("oversize", "upload_rate"):
            count = data.get(key)
            if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count <= 0):
                raise ValueError(f"{key} is a positive byte count, got {count!r}")
        fake_sha = data.get("fake_sha")
        if fake_sha is not None and not (isinstance(fake_sha, str) and fake_sha):
            raise ValueError(f"fake_sha is the string a mirror answers as the commit, got {fake_sha!r}")
        default_times = -1 if actions in (["endless_listing"], ["extra_siblings"], ["fake_sha"]) else 1
        return cls(
            path=path,
            method=data["method"].upper() if data.get("method") else None,
            times=int(data.get("times", default_times)),
            status=status,
            retry_after=float(data["retry_after"]) if data.get("retry_after") is not None else None,
            delay=float(data["delay"]) if data.get("delay") is not None else None,
            drop=bool(data.get("drop")),
            endless_listing=bool(data.get("endless_listing")),
            extra_siblings=tuple(siblings),
            bare=bool(data.get("bare")),
            stall=float(data["stall"]) if data.get("stall") is not None else None,
            after_bytes=int(data["after_bytes"]) if data.get("after_bytes") is not None else None,
            trickle=float(data["trickle"]) if data.get("trickle") is not None else None,
            corrupt=bool(data.get("corrupt")),
            oversize=data.get("oversize"),
            trickle_upload=float(data["trickle_upload"]) if data.get("trickle_upload") is not None else None,
            upload_rate=data.get("upload_rate"),
            fake_sha=fake_sha,
        )

    @property
    def label(self) -> str:
        """How the request log names the fault that hit a request."""
        if self.status is not None:
            return f"status={self.status}" + (" bare" if self.bare else "")
        if self.delay is not None:
            return f"delay={self.delay:g}"
        if self.stall is not None:
            return f"stall={self.stall:g}" + (
                f" after {self.after_bytes} bytes" if self.after_bytes is not None else ""
            )
        if self.trickle is not None:
            return f"trickle={self.trickle:g}"
        if self.corrupt:
            return "corrupt"
        if self.oversize is not None:
            return f"oversize={self.oversize}"
        if self.trickle_upload is not None:
            return f"trickle_upload={self.trickle_upload:g}"
        if self.upload_rate is not None:
            return f"upload_rate={self.upload_rate}"
        if self.fake_sha is not None:
            return "fake_sha"
        if self.extra_siblings:
            return "extra_siblings"
        return "drop" if self.drop else "endless_listing"

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and re.search(self.path, path) is not None

    def request_path(self, path: str) -> str:
        """The path the server routes: with `fake_sha`, the fake commit (as a client quotes it) becomes `main`."""
        if self.fake_sha is None:
            return path
        return path.replace(quote(self.fake_sha, safe=""), "main").replace(f"/{self.fake_sha}/", "/main/")

    @property
    def slows_body(self) -> bool:
        return self.trickle_upload is not None or self.upload_rate is not None

    def slowed_body(self, raw: io.BufferedIOBase) -> io.BufferedIOBase:
        """The request body as this rule reads it (`slows_body`): at a crawl (`trickle_upload`) or slowly
        (`upload_rate`)."""
        if self.trickle_upload is not None:
            return TricklingReader(raw, self.trickle_upload)
        return RateLimitedReader(raw, self.upload_rate or 1)

    @property
    def rewrites_answer(self) -> bool:
        return self.fake_sha is not None

    def rewrite_answer(self, data: Any) -> Any:
        """A JSON answer as the hostile mirror sends it: repo info's `sha` and each listed commit's `id` are the
        fake commit (`fake_sha`)."""
        if isinstance(data, dict) and isinstance(data.get("sha"), str):
            return {**data, "sha": self.fake_sha}
        if isinstance(data, list):
            return [{**item, "id": self.fake_sha} if isinstance(item, dict) and "id" in item else item for item in data]
        return data


def padded(chunks: Iterable[bytes], extra: int, piece: int = 64 * 1024) -> Iterator[bytes]:
    """`chunks`, then `extra` more bytes (an `oversize` answer)."""
    yield from chunks
    while extra > 0:
        yield b"\0" * min(piece, extra)
        extra -= piece


class TricklingReader(io.BufferedIOBase):
    """A request body read one byte every `seconds` (`trickle_upload`): the server takes an upload at a crawl."""

    def __init__(self, raw: io.BufferedIOBase, seconds: float):
        super().__init__()
        self._raw = raw
        self._seconds = seconds

    def read(self, size: int | None = -1, /) -> bytes:
        time.sleep(self._seconds)
        return self._raw.read(1 if size != 0 else 0)

    def readline(self, size: int | None = -1, /) -> bytes:
        return self._raw.readline(size)


class RateLimitedReader(io.BufferedIOBase):
    """A request body read at `rate` bytes/s (`upload_rate`), a tenth of a second's worth at a time: a Hub that takes
    an upload steadily, but slowly."""

    def __init__(self, raw: io.BufferedIOBase, rate: int):
        super().__init__()
        self._raw = raw
        self._piece = max(1, rate // 10)
        self._seconds = self._piece / rate

    def read(self, size: int | None = -1, /) -> bytes:
        if size == 0:
            return b""
        time.sleep(self._seconds)
        return self._raw.read(self._piece if size is None or size < 0 else min(size, self._piece))

    def readline(self, size: int | None = -1, /) -> bytes:
        return self._raw.readline(size)


def _check_timing(data: Mapping[str, Any], action: str) -> None:
    """Seconds must be positive numbers, and each modifier must go with the action it refines.

    Raises:
        ValueError: naming the key.
    """
    for key in ("stall", "trickle", "delay", "trickle_upload"):
        value = data.get(key)
        if value is not None and not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
            raise ValueError(f"Fault {key} must be a positive number of seconds, got {value!r}")
    after = data.get("after_bytes")
    if after is not None and (action != "stall" or not isinstance(after, int) or isinstance(after, bool) or after < 0):
        raise ValueError(f"after_bytes goes with stall and is a byte count, got {after!r} with {action}")
    if data.get("bare") and action != "status":
        raise ValueError("bare goes with status (a proxy's or CDN's error answer)")


def parse_rules(data: Any) -> list[FaultRule]:
    """Rules from a JSON list (or `{"rules": [...]}`).

    Raises:
        ValueError: when the document or one of its rules is malformed.
    """
    if isinstance(data, Mapping) and "rules" in data:
        data = data["rules"]
    if not isinstance(data, list):
        raise ValueError("Fault rules must be a JSON list of rule objects")
    return [FaultRule.from_json(rule) for rule in data]


def load_rules(path: Path) -> list[FaultRule]:
    """Rules from a JSON file (the `--faults FILE` option)."""
    return parse_rules(json.loads(Path(path).read_text(encoding="utf-8")))


class FaultInjector:
    """The active rules; `take` picks the first live rule for a request and counts it down, thread-safely."""

    def __init__(self, rules: Iterable[FaultRule] = ()):
        self._lock = threading.Lock()
        self._rules = list(rules)

    def replace_rules(self, rules: Iterable[FaultRule]) -> None:
        with self._lock:
            self._rules = list(rules)

    def clear(self) -> None:
        self.replace_rules(())

    def take(self, method: str, path: str) -> FaultRule | None:
        with self._lock:
            for index, rule in enumerate(self._rules):
                if rule.times != 0 and rule.matches(method, path):
                    if rule.times > 0:
                        self._rules[index] = replace(rule, times=rule.times - 1)
                    return rule
        return None
