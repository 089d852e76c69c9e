"""Start a GenAI child over an exported pair and read its report back: what both validation kinds share.

The child is a `bot.builder` module run by `bot.sandbox.child` in a token-free, confined process with the pair's folders
to read and its own work folder to write; it writes its result as the record's own pydantic type in JSON (never
a pickle), which the builder validates with the same model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from bot.core.errors import Failure, Stage
from bot.core.profiles import child_env
from bot.core.recipe import ValidationSettings
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env

ReportT = TypeVar("ReportT", bound=BaseModel)


@dataclass(frozen=True)
class PairChild:
    """One GenAI child over an exported pair: its inputs, its work folder and what its files are called."""

    target_dir: Path
    draft_dir: Path
    settings: ValidationSettings
    work: Path
    name: str  # `<name>.json` is its report, `<name>.log` its log
    what: str  # for the log and the failure message


def run_pair_child(
    tool: str,
    report: type[ReportT],
    child: PairChild,
    options: list[str],
    *,
    python: str | None,
    layers: Sequence[str],
    extra_reads: Sequence[Path] = (),
    memory_budget_bytes: int | None = None,
) -> ReportT:
    """Run `tool` (a `bot.builder` module with a `main`) in a sandboxed, token-free child over the pair and read the
    report it writes back with its pydantic model (JSON, never pickle), shared by both validation kinds.

    Raises:
        Failure: the child failed, ran past the recipe's time limit or the memory budget, or wrote no readable report.
    """
    out = child.work / f"{child.name}.json"
    reads = [child.target_dir, child.draft_dir, *extra_reads]
    cmd = [
        *sandboxed(tool, python, reads=reads, writes=[child.work], layers=layers),
        *("--target", str(child.target_dir), "--draft", str(child.draft_dir)),
        *("--settings", child.settings.model_dump_json(), "--out", str(out)),
        *options,
    ]
    run_logged(
        cmd,
        log_path=child.work / f"{child.name}.log",
        timeout_s=child.settings.timeout_s,
        env=child_env(untrusted_env(home=child.work / "hf-home"), python),
        what=child.what,
        memory_budget_bytes=memory_budget_bytes,
    )
    try:
        return report.model_validate_json(out.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        raise Failure(f"{child.what} wrote no readable report ({exc})"[:300], stage=Stage.VALIDATE) from None
