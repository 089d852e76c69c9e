"""Rendering of the status repo (`README.md`, `status.json`, `speedups.png`) and of `dflash-bot status`.

Everything a source repo controls (its id, the reason text an error carried, a revision string) is escaped before
it reaches Markdown: control, bidi and zero-width characters are removed (`bot.core.safe_text.clean`), HTML is
entity-escaped and Markdown punctuation backslash-escaped, so a hostile repo name, file name or error message can
neither inject HTML into the page, nor break the table, nor reorder what it shows. Links are built from repo ids with
their path quoted. The page is a Jinja2 template rendered with `StrictUndefined`; card metadata goes through
`huggingface_hub.DatasetCardData`. `write_status` commits the rendered files, only when they changed.
"""

from __future__ import annotations

import datetime as dt
import html
import importlib.metadata
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import jinja2
from huggingface_hub import DatasetCardData
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.core import draft_formats, package_data, schedule
from bot.core.errors import Stage
from bot.core.fingerprints import PLOTTING, files_fingerprint
from bot.core.safe_text import clean
from bot.hub.client import Hub
from bot.publish.charts import PairFigures, speedups_png
from bot.status.memory import (
    CHART,
    FAILED,
    PUBLISHED,
    README,
    RESTAMP_PERIODS,
    SKIPPED,
    STATUS_JSON,
    StatusEntry,
    StatusFile,
)
from bot.status.read import read_status

TEMPLATES = package_data.folder(package_data.TEMPLATES)
STATUS_TEMPLATE = "status_card.md.j2"
# The code that renders the page besides its template: this module and the chart code (`speedups.png`).
PAGE_CODE = (("bot.status", "page.py"), ("bot.publish", "charts.py"))
# The page lists this many not-approved drafts at most (the radar may see hundreds); status.json holds them all.
MAX_SEEN_ROWS = 100
NOT_APPROVED_PREFIX = "seen, not approved: "
# Inline Markdown punctuation. HTML's specials are entity-escaped first; entities use none of these characters.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()|~])")


def md_text(text: str | None) -> str:
    """Source-derived text as inert Markdown inside a table cell: one line, no HTML, no markup, no `|`."""
    if not text:
        return ""
    one_line = " ".join(clean(text).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=True))


def md_link(repo_id: str, endpoint: str, *, repo_type: str = "model") -> str:
    """A link to a repo: escaped text, quoted path."""
    prefix = "" if repo_type == "model" else f"{repo_type}s/"
    return f"[{md_text(repo_id)}]({endpoint.rstrip('/')}/{prefix}{quote(repo_id, safe='/')})"


def renderer_fingerprint() -> str:
    """Hash of what shapes the rendered files besides the status itself (`rendered_by`) and matplotlib's version.
    A change rewrites the page once, even with no new status; a card template's change does not (cards have their
    own fingerprint, `bot.publish.card.template_fingerprint`)."""
    return files_fingerprint(rendered_by(), plotting=importlib.metadata.version(PLOTTING))


def rendered_by() -> list[Path]:
    """The files the status page is rendered with: its template, `PAGE_CODE`."""
    return [TEMPLATES / STATUS_TEMPLATE] + [package_data.folder(package) / name for package, name in PAGE_CODE]


@dataclass(frozen=True)
class _Row:
    source: str
    layout: str
    status: str
    waits_for: str
    reason: str
    revision: str
    target: str
    repos: str
    accept_length: str
    speedup: str
    k: str
    profile: str
    last_built: str
    last_checked: str


def _row(entry: StatusEntry, endpoint: str) -> _Row:
    def figure(value: float | None, suffix: str = "") -> str:
        return "" if value is None else f"{value:.2f}{suffix}"

    def when(value) -> str:
        return value.strftime("%Y-%m-%d %H:%M UTC") if value is not None else ""

    mapped = on_map(entry)
    return _Row(
        source=md_link(entry.source, endpoint),
        layout=md_text(draft_formats.layout(mapped.layout).label if mapped.layout else ""),
        status=md_text(entry.status),
        waits_for=md_text(mapped.waits_for),
        reason=md_text(f"{entry.stage}: {entry.reason}" if entry.stage and entry.reason else entry.reason),
        revision=md_text((entry.revision or "")[:7]),
        target=md_link(mapped.target, endpoint) if mapped.target else "",
        repos="<br>".join(md_link(repo, endpoint) for repo in entry.repos),
        accept_length=figure(entry.accept_length),
        speedup=figure(entry.speedup, "×"),
        k=str(entry.recommended_k) if entry.recommended_k is not None else "",
        profile=md_text(entry.profile),
        last_built=when(entry.last_built),
        last_checked=when(entry.last_checked),
    )


@dataclass(frozen=True)
class MapEntry:
    """Where an entry sits on the map of the field: its layout, group, target and what a skip waits for."""

    layout: str | None
    group: str
    target: str | None
    waits_for: str


def on_map(entry: StatusEntry) -> MapEntry:
    """An entry's place on the map: its own fields, else what its reason says (an entry a version-1 file holds),
    else its published kind's layout; a source nothing classifies goes to the "other" group."""
    facts = draft_formats.describe_reason(entry.reason) if entry.status != PUBLISHED else None
    layout = entry.layout or (facts.layout if facts else None) or draft_formats.layout_of_kind(entry.kind)
    waits = entry.waits_for or (facts.waits_for if facts else "")
    return MapEntry(
        layout=layout,
        group=draft_formats.layout(layout).group if layout in draft_formats.LAYOUTS else draft_formats.OTHER,
        target=entry.target or (facts.target if facts else None),
        waits_for="" if entry.status == PUBLISHED else waits,
    )


@dataclass(frozen=True)
class _Group:
    name: str
    counts: dict[str, int]
    rows: list[_Row]


def not_approved(entry: StatusEntry) -> bool:
    """Whether an entry is a draft the radar saw and nobody approved (`bot.discover.trust`), with nothing published:
    it gets the page's own bounded section, never the map's tables."""
    return entry.stage == Stage.APPROVE and entry.status == SKIPPED and not entry.repos


@dataclass(frozen=True)
class _Seen:
    source: str
    author: str
    kind: str
    why: str
    dispatch: str


def _seen(status: StatusFile, endpoint: str) -> tuple[list[_Seen], int]:
    """The first `MAX_SEEN_ROWS` not-approved drafts as rows (their ids are checked repo ids, so they sit in code
    spans as they are), and how many more `status.json` holds."""
    entries = [entry for entry in status.entries if not_approved(entry)]
    rows = [
        _Seen(
            source=md_link(entry.source, endpoint),
            author=md_text(entry.source.split("/")[0]),
            kind=md_text(entry.kind or "not in the listing"),
            why=md_text(
                entry.reason.split("; ")[0].removeprefix(f"{Stage.APPROVE}: ").removeprefix(NOT_APPROVED_PREFIX)
            ),
            dispatch=f"`dflash-bot run --only {entry.source}`",
        )
        for entry in entries[:MAX_SEEN_ROWS]
    ]
    return rows, len(entries) - len(rows)


def _groups(status: StatusFile, endpoint: str) -> list[_Group]:
    """The entries by format group, in `draft_formats.GROUPS` order; a group without entries is left out."""
    groups = []
    for name in draft_formats.GROUPS:
        entries = [entry for entry in status.entries if on_map(entry).group == name and not not_approved(entry)]
        if entries:
            counts = {state: sum(e.status == state for e in entries) for state in (PUBLISHED, SKIPPED, FAILED)}
            groups.append(_Group(name, counts, [_row(entry, endpoint) for entry in entries]))
    return groups


_WHEN = "%Y-%m-%d %H:%M UTC"


@dataclass(frozen=True)
class LastRun:
    """When the bot last ran, on what schedule, and from when that says the schedule stopped (`StatusFile`)."""

    at: str
    schedule: str
    every: str
    lag: str
    stale_since: str


def last_run(status: StatusFile) -> LastRun | None:
    """The page's "last run" line, None when the status records no run or no schedule (`run_stamp`)."""
    since = status.stale_since()
    if since is None or status.last_run is None or status.schedule is None:
        return None
    every = schedule.period(status.schedule)
    return LastRun(
        at=status.last_run.strftime(_WHEN),
        schedule=md_text(status.schedule),
        every=schedule.describe(every),
        lag=schedule.describe(every * RESTAMP_PERIODS),
        stale_since=since.strftime(_WHEN),
    )


def _metadata(recipe: str) -> str:
    data = DatasetCardData(
        pretty_name=f"dflash-bot status ({recipe})",
        viewer=False,
        tags=["dflash-bot", "openvino", "speculative-decoding", "status"],
    )
    return data.to_yaml()


def render_readme(status: StatusFile, *, endpoint: str) -> str:
    """The status repo's card: the table of every watched source, with links, figures and the chart."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    mapped = [entry for entry in status.entries if not not_approved(entry)]
    counts = {state: sum(entry.status == state for entry in mapped) for state in (PUBLISHED, SKIPPED, FAILED)}
    seen, seen_more = _seen(status, endpoint)
    collection = None
    if status.collection_url:
        title = md_text(status.collection_title or "collection")
        collection = f"[{title}]({quote(status.collection_url, safe=':/')})"
    return environment.get_template(STATUS_TEMPLATE).render(
        metadata=_metadata(status.recipe),
        recipe=md_text(status.recipe),
        namespace=md_text(status.namespace),
        counts=counts,
        collection=collection,
        rows=[_row(entry, endpoint) for entry in mapped],
        groups=_groups(status, endpoint),
        seen=seen,
        seen_more=seen_more,
        last_run=last_run(status),
        schema_version=status.schema_version,
    )


def chart_pairs(status: StatusFile) -> list[PairFigures]:
    return [
        PairFigures(label=pair.draft_repo.split("/")[-1], accept_length=pair.accept_length, speedup=pair.speedup)
        for pair in status.published_pairs()
    ]


def render_files(status: StatusFile, *, endpoint: str) -> dict[str, bytes]:
    """README.md, status.json and speedups.png: equal status, equal bytes."""
    return {
        README: render_readme(status, endpoint=endpoint).encode(),
        STATUS_JSON: status.to_json_bytes(),
        CHART: speedups_png(chart_pairs(status)),
    }


def print_status(status: StatusFile, *, as_json: bool = False, now: dt.datetime | None = None) -> None:
    """The table for an operator's terminal (source-derived text escaped for rich markup), or the JSON, then the
    last run's line (on stderr with --json): when, on what schedule, and "stale" past `StatusFile.stale_since`."""
    line = run_line(status, now or dt.datetime.now(dt.UTC))
    if as_json:
        print(json.dumps(status.model_dump(mode="json"), indent=2))
        print(line, file=sys.stderr)
        return
    table = Table(title=f"dflash-bot status: {escape(clean(status.recipe))} ({escape(clean(status.namespace))})")
    for column in (
        "source",
        "layout",
        "revision",
        "status",
        "reason",
        "repos",
        "accept",
        "speed-up",
        "k",
        "profile",
        "last checked",
    ):
        table.add_column(column, overflow="fold")
    styles = {PUBLISHED: "green", SKIPPED: "yellow", FAILED: "red"}
    for entry in status.entries:
        mapped = on_map(entry)
        table.add_row(
            escape(entry.source),
            escape(f"{mapped.group}: {mapped.layout}" if mapped.layout else mapped.group),
            escape((entry.revision or "")[:7]),
            f"[{styles[entry.status]}]{entry.status}[/]",
            escape(clean(entry.reason)),
            escape("\n".join(entry.repos)),
            "" if entry.accept_length is None else f"{entry.accept_length:.2f}",
            "" if entry.speedup is None else f"{entry.speedup:.2f}×",
            "" if entry.recommended_k is None else str(entry.recommended_k),
            escape(clean(entry.profile)),
            entry.last_checked.strftime("%Y-%m-%d %H:%M"),
        )
    console = Console(width=200)
    console.print(table)
    if status.collection_url:
        console.print(f"Collection: {escape(status.collection_url)}")
    console.print(escape(line))


def run_line(status: StatusFile, now: dt.datetime) -> str:
    """When the bot last ran and on what schedule, "stale" when that is over `STALE_PERIODS` periods ago."""
    shown = last_run(status)
    if shown is None:
        return "last run: not recorded (the recipe sets no publish.schedule, or no run has written it yet)"
    text = f"last run: {shown.at} on the schedule {clean(status.schedule or '')} (every {shown.every})"
    if status.is_stale(now):
        return f"{text}: stale since {shown.stale_since}: the schedule stopped or its runs fail before the status"
    return f"{text}: renewed every {shown.lag}, stale after {shown.stale_since}"


def show_status(hub, repo_id: str, *, as_json: bool = False, now: dt.datetime | None = None) -> int:
    """`dflash-bot status`: read the status repo (one request) and print it.

    Args:
        now: the time staleness is measured at (default: now).

    Returns:
        The exit code: 0 when the status was printed, 1 when the repo has no readable status yet or it is stale
        (`StatusFile.is_stale`: no run recorded for `STALE_PERIODS` schedule periods).

    Raises:
        Failure: the Hub kept failing.
    """
    status = read_status(hub, repo_id)
    if status is None:
        print(f"no status in {repo_id} yet (the publish step writes it on its next run)", file=sys.stderr)
        return 1
    now = now or dt.datetime.now(dt.UTC)
    print_status(status, as_json=as_json, now=now)
    return 1 if status.is_stale(now) else 0


UNREAD = object()  # `write_status(current=UNREAD)`: the status was not read, or must be written back


def write_status(
    hub: Hub,
    repo_id: str,
    status: StatusFile,
    *,
    current: StatusFile | object | None = UNREAD,
    endpoint: str | None = None,
    private: bool = False,
) -> str | None:
    """Write README.md, status.json and speedups.png in one commit, only when their content changed.

    Args:
        hub: a Hub holding the write token (publish stage).
        repo_id: the status dataset repo; created when missing.
        status: the new status (`merged`).
        current: the status this run read at planning (`read_status`'s result, None included). When given and
            equal to `status`, nothing is sent at all; otherwise the files are committed and the Hub client
            leaves out those whose bytes the Hub already has, so unchanged content still makes no commit.
        endpoint: the Hub URL the page links repos to (default: the hub's own endpoint).

    Returns:
        The new commit id, or None when nothing changed.

    Raises:
        Failure: the Hub refused or kept failing the commit (412: another writer committed first).
    """
    if current is not UNREAD and current == status:
        return None
    files = render_files(status, endpoint=endpoint or hub.endpoint)
    counts = {state: sum(entry.status == state for entry in status.entries) for state in (PUBLISHED, SKIPPED, FAILED)}
    message = "Update status: " + ", ".join(f"{count} {state}" for state, count in counts.items())
    return hub.commit_files(repo_id, files, message=message, repo_type="dataset", private=private).commit
