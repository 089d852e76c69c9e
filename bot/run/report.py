"""The run report: one outcome per source, Hub request and commit counts, as JSON and as a readable table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.core.errors import Stage
from bot.core.outcome import Outcome, Status

if TYPE_CHECKING:
    from bot.core.record import StageResources
    from bot.publish.publisher import PublishResult


# The step summary's bounds (GitHub drops a summary over 1 MiB): the outcome table's bytes, one reason cell's
# characters, and the not-approved drafts listed (the status page has its own list of them).
MAX_TABLE_BYTES = 512 * 1024
MAX_CELL_CHARS = 600
MAX_SEEN_ROWS = 25


@dataclass
class RunReport:
    outcomes: list[Outcome] = field(default_factory=list)
    commits: list[dict[str, str]] = field(default_factory=list)  # {"repo", "commit"}
    hub_requests: int = 0
    dry_run: bool = False
    deferred: list[str] = field(default_factory=list)
    status_page: str | None = None  # the status repo's page, when the run wrote or checked it
    collection: str | None = None  # the collection's URL
    status_commit: str | None = None  # the status repo's new commit (not counted with the model commits)

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def add_published(self, source: str, revision: str | None, result: PublishResult, reason: str) -> None:
        """A publish or card refresh: its commits, and PUBLISHED or UP_TO_DATE as the result says."""
        for repo, commit in result.commits:
            self.commits.append({"repo": repo, "commit": commit})
        self.add(Outcome(source, revision, result.status, reason, [result.repos.draft, result.repos.target]))

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == Status.FAILED]

    @property
    def exit_code(self) -> int:
        """0 when nothing failed; 1 (the one documented failure code of a run) otherwise. A skip is no failure."""
        return 1 if self.failed else 0

    def to_dict(self) -> dict:
        return {
            "outcomes": [o.to_dict() for o in self.outcomes],
            "hub_requests": self.hub_requests,
            "commits": self.commits,
            "dry_run": self.dry_run,
            "deferred": self.deferred,
            "status_page": self.status_page,
            "collection": self.collection,
            "status_commit": self.status_commit,
            "counts": {
                str(s): sum(o.status == s for o in self.outcomes)
                for s in (Status.PUBLISHED, Status.UP_TO_DATE, Status.SKIPPED, Status.FAILED, Status.PLANNED)
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> RunReport:
        return cls(
            outcomes=[Outcome.from_dict(o) for o in data.get("outcomes", [])],
            commits=list(data.get("commits", [])),
            hub_requests=int(data.get("hub_requests", 0)),
            dry_run=bool(data.get("dry_run")),
            deferred=[str(d) for d in data.get("deferred", [])],
        )

    def write(self, path: Path) -> None:
        """Written atomically (a rename), so a reader never sees half a report."""
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        partial.replace(path)

    def markdown(self, endpoint: str = "https://huggingface.co") -> str:
        """The outcome table for a GitHub step summary, bounded whatever the radar saw (GitHub drops a summary over
        1 MiB): at most `MAX_SEEN_ROWS` not-approved drafts (the status page lists them), each reason cut at
        `MAX_CELL_CHARS`, and no row past `MAX_TABLE_BYTES`; what is left out is counted, the JSON report has it."""
        lines = ["| source | revision | outcome | reason | repos |", "|---|---|---|---|---|"]
        size, left_out, seen = 0, 0, 0
        for o in self.outcomes:
            seen += o.stage == Stage.APPROVE
            repos = ", ".join(f"[{_cell(r)}]({endpoint}/{r})" for r in o.repos)
            line = f"| {_cell(o.source)} | {(o.revision or '')[:7]} | {o.status} | {_cell(o.reason)} | {repos} |"
            if (o.stage == Stage.APPROVE and seen > MAX_SEEN_ROWS) or size + len(line) > MAX_TABLE_BYTES:
                left_out += 1
                continue
            size += len(line.encode()) + 1
            lines.append(line)
        if left_out:
            lines.append(
                f"| … | | | {left_out} more outcome(s), {seen} seen, not approved in all: the run report "
                "and the status page list them | |"
            )
        lines.append("")
        lines.append(f"Hub requests: {self.hub_requests}; commits: {len(self.commits)}")
        if self.status_page:
            lines.append("")
            lines.append(
                f"Status page: {self.status_page}" + (f" · Collection: {self.collection}" if self.collection else "")
            )
        return "\n".join(lines) + "\n"

    def print_table(self) -> None:
        table = Table(title="dflash-bot run" + (" (dry run)" if self.dry_run else ""))
        for column in ("source", "revision", "outcome", "reason", "repos"):
            table.add_column(column, overflow="fold")
        styles = {
            Status.PUBLISHED: "green",
            Status.UP_TO_DATE: "cyan",
            Status.SKIPPED: "yellow",
            Status.FAILED: "red",
            Status.PLANNED: "magenta",
        }
        for o in self.outcomes:
            # Names and reasons come from sources: printed as text, never parsed as rich markup.
            table.add_row(
                escape(o.source),
                (o.revision or "")[:7],
                f"[{styles.get(o.status, '')}]{o.status}[/]",
                escape(o.reason),
                escape("\n".join(o.repos)),
            )
        console = Console(width=160)
        console.print(table)
        console.print(f"Hub requests: {self.hub_requests}; commits: {len(self.commits)}")


def build_cost_note(cost: StageResources) -> str:
    """What a published build cost, for its outcome's reason: time, memory and disk. The memory's anonymous part
    (what a runner must hold) and its file-backed part (mapped weights the kernel can drop) are shown apart when the
    record has them."""
    memory = f"peak {_gb(cost.peak_rss_bytes or 0)} memory"
    if cost.peak_anon_bytes is not None and cost.peak_file_bytes is not None:
        memory += f" ({_gb(cost.peak_anon_bytes)} anonymous, {_gb(cost.peak_file_bytes)} file-backed)"
    return f"built in {cost.seconds:.0f} s, {memory} and {_gb(cost.peak_disk_bytes or 0)} disk"


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def _cell(text: str) -> str:
    """Markdown table cell: no pipe, newline or HTML from a source reaches the summary as markup, and at most
    `MAX_CELL_CHARS` of it."""
    if len(text) > MAX_CELL_CHARS:
        text = text[: MAX_CELL_CHARS - 1] + "…"
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("|", "\\|")
        .replace("\n", " ")
        .replace("[", "\\[")
        .replace("]", "\\]")
    )
