"""The run report: one outcome per candidate, Hub request and commit counts, as JSON and as a readable table."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

PUBLISHED, UP_TO_DATE, SKIPPED, FAILED = "published", "up-to-date", "skipped", "failed"
PLANNED = "planned"  # dry runs only


@dataclass(frozen=True)
class Outcome:
    source: str
    revision: str | None
    status: str
    reason: str = ""
    repos: list[str] = field(default_factory=list)


@dataclass
class RunReport:
    outcomes: list[Outcome] = field(default_factory=list)
    commits: list[dict] = field(default_factory=list)  # {"repo", "commit"}
    hub_requests: int = 0
    dry_run: bool = False
    deferred: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == FAILED]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def to_dict(self) -> dict:
        return {"outcomes": [asdict(o) for o in self.outcomes], "hub_requests": self.hub_requests,
                "commits": self.commits, "dry_run": self.dry_run, "deferred": self.deferred,
                "counts": {s: sum(o.status == s for o in self.outcomes)
                           for s in (PUBLISHED, UP_TO_DATE, SKIPPED, FAILED, PLANNED)}}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    def markdown(self, endpoint: str = "https://huggingface.co") -> str:
        """The outcome table for a GitHub step summary."""
        lines = ["| source | revision | outcome | reason | repos |", "|---|---|---|---|---|"]
        for o in self.outcomes:
            repos = ", ".join(f"[{r}]({endpoint}/{r})" for r in o.repos)
            lines.append(f"| {o.source} | {(o.revision or '')[:7]} | {o.status} | {_cell(o.reason)} | {repos} |")
        lines.append("")
        lines.append(f"Hub requests: {self.hub_requests}; commits: {len(self.commits)}")
        return "\n".join(lines) + "\n"

    def print_table(self) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="dflash-bot run" + (" (dry run)" if self.dry_run else ""))
        for column in ("source", "revision", "outcome", "reason", "repos"):
            table.add_column(column, overflow="fold")
        styles = {PUBLISHED: "green", UP_TO_DATE: "cyan", SKIPPED: "yellow", FAILED: "red", PLANNED: "magenta"}
        for o in self.outcomes:
            table.add_row(o.source, (o.revision or "")[:7], f"[{styles.get(o.status, '')}]{o.status}[/]", o.reason,
                          "\n".join(o.repos))
        console = Console(width=160)
        console.print(table)
        console.print(f"Hub requests: {self.hub_requests}; commits: {len(self.commits)}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
