"""The rows of RELIABILITY.md: every hostile-suite scenario (tests/reliability/test_reliability*.py) records one.

`tests/reliability/report.py` runs those modules with `RELIABILITY_ROWS` naming a file; the session fixture in
`tests/conftest.py` writes the rows collected here to it when the session ends.
"""

from __future__ import annotations

ROWS: list[dict] = []
KINDS = ("fault", "hostile", "concurrency", "security")


def record(kind: str, case: str, bot_did: str, hub_state: str, consistent: bool = True) -> None:
    """One scenario: what was tried (`case`), what the bot did, the state the hub was left in."""
    assert kind in KINDS, kind
    ROWS.append({"kind": kind, "case": case, "bot": bot_did, "hub": hub_state, "consistent": consistent})
