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

`endless_listing` applies to the listing endpoints: every page comes back with the same entries and a `Link` to
itself. It fires on every matching request unless `times` says otherwise, since one endless page is not endless.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

_ACTIONS = ("status", "delay", "drop", "endless_listing", "extra_siblings", "stall", "trickle", "corrupt")
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
        default_times = -1 if actions in (["endless_listing"], ["extra_siblings"]) else 1
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
        if self.extra_siblings:
            return "extra_siblings"
        return "drop" if self.drop else "endless_listing"

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and re.search(self.path, path) is not None


def _check_timing(data: Mapping[str, Any], action: str) -> None:
    """Seconds must be positive numbers, and each modifier must go with the action it refines.

    Raises:
        ValueError: naming the key.
    """
    for key in ("stall", "trickle", "delay"):
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
