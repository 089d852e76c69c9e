"""The rows of RELIABILITY.md: every hostile-suite scenario (tests/reliability/test_reliability*.py) records one.

`tests/reliability/report.py` runs those modules with `RELIABILITY_ROWS` naming a file; the session fixture in
`tests/conftest.py` writes the rows collected here to it when the session ends.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROWS: list[dict] = []
KINDS = ("fault", "hostile", "concurrency", "security")


def record(kind: str, case: str, bot_did: str, hub_state: str, consistent: bool = True) -> None:
    """One scenario: what was tried (`case`), what the bot did, the state the hub was left in."""
    assert kind in KINDS, kind
    ROWS.append({"kind": kind, "case": case, "bot": bot_did, "hub": hub_state, "consistent": consistent})


def run_command(recipe_file: Path, report: Path, *, only: str | None = None, work: Path | None = None) -> list[str]:
    """`dflash-bot run` on `recipe_file` as the scenarios start it: this interpreter, the report written to `report`."""
    command = [sys.executable, "-m", "bot.cli", "run", "--recipe", str(recipe_file), "--report", str(report)]
    if only is not None:
        command += ["--only", only]
    if work is not None:
        command += ["--work", str(work)]
    return command
