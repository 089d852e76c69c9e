"""Untrusted JSON (a checkpoint's config.json, a safetensors header) read without surprises.

`json.loads` raises on an integer literal too long for Python's `int()` and reads `1e400` as infinity: here every
number is parsed and an over-long one is a `Skip` naming its field; integers are checked where the bot reads them
(`checked_int`), and a value is shown short in a message, never a 4000-digit number spelled out (`shown`).
"""

from __future__ import annotations

import json
from typing import Any

from bot.core.errors import Skip, Stage

MAX_INT_DIGITS = 4300  # Python's own limit for int(str): json.loads raises ValueError past it (and is quadratic)


def checked_int(value: object, where: str, subject: str | None, *, minimum: int, maximum: int) -> int:
    """`value` if it is a true integer within [minimum, maximum]; a Skip naming `where` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Skip(f"{where} must be an integer, got {shown(value)}", subject=subject, stage=Stage.CLASSIFY)
    if not minimum <= value <= maximum:
        raise Skip(f"{where} is {shown(value)}, outside [{minimum}, {maximum}]", subject=subject, stage=Stage.CLASSIFY)
    return value


class _OverlongInt:
    """Stands in, while parsing, for an integer literal Python will not convert; found and named afterwards."""

    def __init__(self, digits: int):
        self.digits = digits


def load_json(text: str, what: str) -> Any:
    """`json.loads` that never raises on a number: an integer literal over MAX_INT_DIGITS digits (which makes plain
    json.loads raise ValueError) is a Skip naming the field that holds it.

    Raises:
        json.JSONDecodeError, RecursionError: as json.loads.
        Skip: an over-long integer literal.
    """
    overlong: list[_OverlongInt] = []

    def parse_int(literal: str) -> int | _OverlongInt:
        if len(literal.lstrip("-")) > MAX_INT_DIGITS:
            overlong.append(_OverlongInt(len(literal.lstrip("-"))))
            return overlong[-1]
        return int(literal)

    data = json.loads(text, parse_int=parse_int)
    if overlong:
        path, marker = _find_overlong(data)
        raise Skip(
            f"{what}: {path or '(top level)'} is an integer of {marker.digits} digits, over the "
            f"{MAX_INT_DIGITS}-digit limit of Python's int()"
        )
    return data


def _find_overlong(data: Any) -> tuple[str, _OverlongInt]:
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _OverlongInt):
            return path, value
        if isinstance(value, dict):
            stack.extend((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
    raise AssertionError("an over-long integer was parsed but is not in the document")


def shown(value: object) -> str:
    """A value for a message: short, and never a 4000-digit number spelled out."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    text = json.dumps(value) if isinstance(value, float | bool | None) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
