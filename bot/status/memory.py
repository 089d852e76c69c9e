"""The status repo: the public page of everything the bot watches, and the bot's memory between runs.

A dataset repo (`Recipe.status_repo_id`: `publish.status_repo`, by default `{namespace}/{recipe}-bot-status`, one
per recipe) holds `status.json` (the `StatusFile` below, with a schema version), `README.md` (a table of every
watched source) and `speedups.png`. The publish step writes it in one commit per run and only when its content
changed; planning reads `status.json` once. With it, a source that was skipped or failed is not examined again
while its revision, the toolchain and the recipe are unchanged (`needs_recheck`), and published repos are
cross-checked against one listing of the output namespace (`stale_published`).

The memory is a hint that saves work, not a source of truth (docs/design.md §3): `status.json` is read into the strict,
bounded models below (`bot.status.read`: size and depth limits, aware timestamps, finite figures, only repos the
recipe itself publishes), an invalid file or entry is dropped with a warning and rebuilt from the Hub, and a
remembered "published" is believed only once the draft repo's record at its head agrees (`status_read.agrees`).

This module holds the records and the memory rules; `bot.status.read` reads the file from the Hub, `bot.status.page`
renders and writes it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

from bot.core import draft_formats
from bot.core.errors import Fault, Stage, runner_fault_in
from bot.core.fingerprints import Fingerprints
from bot.core.record import BuildRecord
from bot.core.safe_text import clean
from bot.core.schedule import period
from bot.publish.collection import PublishedPair

SCHEMA_VERSION = 3  # 2: entries name their layout, format group and what a skip waits for (issue 32); 3: last run
READABLE_SCHEMA_VERSIONS = (1, 2, 3)  # an older file is read as it is (no layouts, no last run) and written back as 3
STATUS_JSON, README, CHART = "status.json", "README.md", "speedups.png"
PUBLISHED, SKIPPED, FAILED = "published", "skipped", "failed"
EntryStatus = Literal["published", "skipped", "failed"]
# `last_run` is rewritten once it is this many schedule periods old, and the page is stale at that many (`run_stamp`).
RESTAMP_PERIODS, STALE_PERIODS = 1.5, 3
MAX_REASON_CHARS = 1000  # a reason quoting a whole error page is cut; the run report keeps the full one

# Field types of what `status.json` may hold: repo ids as the Hub spells them, short tokens, finite figures.
RepoId = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,96}/[A-Za-z0-9._-]{1,96}$")]
Token = Annotated[str, Field(max_length=200, pattern=r"^[\x21-\x7e]*$")]  # printable ASCII, no spaces
Label = Annotated[str, Field(max_length=200, pattern=r"^[\x20-\x7e]*$")]  # printable ASCII
Text = Annotated[str, Field(max_length=MAX_REASON_CHARS), AfterValidator(clean)]  # visible characters only
Figure = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]


class _Record(BaseModel):
    # Strict: an unknown key is a damaged or forged entry (a newer bot bumps SCHEMA_VERSION), dropped and rebuilt.
    model_config = ConfigDict(frozen=True, extra="forbid")


class StatusEntry(_Record):
    """One watched source as of the last time the bot examined it.

    `last_checked` is when the bot last examined the source beyond the listing (read its config or provenance,
    or built it); a run that relies on this entry leaves it as it is, so a run with nothing new changes nothing.
    `repo_shas` are the published repos' shas after the bot's last commit to them: a different or missing sha
    in the namespace listing means someone else changed or deleted the repo.
    """

    source: RepoId
    revision: Token | None = None
    status: EntryStatus
    reason: Text = ""
    stage: Label | None = None
    kind: Label | None = None
    # The draft's layout and page group (`bot.core.draft_formats.LAYOUTS`), and for a skip the capability it waits
    # for: read from the reason a layout skip carries (`draft_formats.describe_reason`), or the published kind's.
    layout: Label | None = None
    group: Label | None = None
    waits_for: Text | None = None
    target: RepoId | None = Field(None, description="the target's source repo")
    target_revision: Token | None = None
    draft_repo: RepoId | None = None
    target_repo: RepoId | None = None
    repo_shas: dict[RepoId, Token] = Field(default_factory=dict, max_length=2)
    accept_length: Figure | None = None
    speedup: Figure | None = None
    recommended_k: int | None = Field(None, ge=1, le=1024)
    profile: Label | None = None
    toolchain_fingerprint: Token
    recipe_fingerprint: Token
    card_fingerprint: Token | None = None
    last_built: AwareDatetime | None = None
    last_checked: AwareDatetime

    @property
    def repos(self) -> list[str]:
        return [repo for repo in (self.draft_repo, self.target_repo) if repo]

    @property
    def fingerprints(self) -> Fingerprints:
        """The fingerprints this entry was made with (`Fingerprints`)."""
        return Fingerprints(self.toolchain_fingerprint, self.recipe_fingerprint, self.card_fingerprint)

    def pair(self) -> PublishedPair | None:
        """The published pair this entry stands for, or None when nothing is published for it.

        A source whose rebuild failed or was skipped keeps its earlier published pair (the repos still hold the
        last good build), so it stays in the collection and on the chart.
        """
        if (
            not (self.draft_repo and self.target_repo)
            or self.accept_length is None
            or self.speedup is None
            or self.recommended_k is None
        ):
            return None
        return PublishedPair(
            draft_repo=self.draft_repo,
            target_repo=self.target_repo,
            source=self.source,
            target=self.target or "",
            accept_length=self.accept_length,
            speedup=self.speedup,
            recommended_k=self.recommended_k,
        )


class StatusFile(_Record):
    """`status.json`: every watched source of one recipe, sorted by source, plus where the collection is, when the
    bot last ran and on what schedule (`last_run`: see `run_stamp` for why it may lag one period behind)."""

    schema_version: int = SCHEMA_VERSION
    recipe: Text
    namespace: Token
    schedule: Label | None = Field(None, description="the recipe's `publish.schedule` cron line (UTC)")
    last_run: AwareDatetime | None = None
    collection_title: Text | None = None
    collection_url: Annotated[str, Field(max_length=500, pattern=r"^https?://[\x21-\x7e]+$")] | None = None
    renderer: Token = Field("", description="fingerprint of the page template and chart code that rendered it")
    entries: tuple[StatusEntry, ...] = ()

    def entry(self, source: str) -> StatusEntry | None:
        return next((entry for entry in self.entries if entry.source == source), None)

    def published_pairs(self) -> list[PublishedPair]:
        return [pair for entry in self.entries if (pair := entry.pair()) is not None]

    def stale_since(self) -> dt.datetime | None:
        """When the page turns stale: `STALE_PERIODS` schedule periods after `last_run`, which may lag the last
        run by up to `RESTAMP_PERIODS` (`run_stamp`): a healthy schedule's stamp is at most 2.5 periods old (lag plus
        the period to the next run), so stale means runs are missing. None without a schedule or a recorded run."""
        if self.schedule is None or self.last_run is None:
            return None
        try:
            return self.last_run + STALE_PERIODS * period(self.schedule)
        except ValueError:  # a line this bot cannot read: nothing to measure by
            return None

    def is_stale(self, now: dt.datetime) -> bool:
        """Whether the last recorded run is older than two schedule periods: the schedule stopped (GitHub
        disabled it, the runs fail before the status step) or the page is not written any more."""
        since = self.stale_since()
        return since is not None and now >= since

    def to_json_bytes(self) -> bytes:
        """The file's bytes: stable key order and formatting, so equal content gives equal bytes."""
        data = self.model_dump(mode="json")
        return (json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()


# ---- the memory rules (pure) ----


def needs_recheck(
    entry: StatusEntry | None,
    *,
    revision: str | None,
    fingerprints: Fingerprints,
    now: dt.datetime,
    recheck_after: dt.timedelta | None,
    recheck: bool,
) -> bool:
    """Whether planning must examine a listed source again instead of trusting its status entry.

    Args:
        entry: what the status file remembers of the source (None: never seen).
        revision: the source's sha in this run's listing.
        fingerprints: this run's (`bot.core.fingerprints.Fingerprints`); a published entry rendered with another
            card template is examined (its cards are re-rendered), unless the card's is None (not compared).
        now: this run's time (timezone-aware).
        recheck_after: the recipe's `watch.recheck_after`; a remembered skip or failure older than this is
            examined again (None: never by age).
        recheck: the `--recheck` option: examine everything.

    A failure of a Hub call, the disk or our side, and any outcome at the publish stage, is always examined
    again (`source_fault`): it says more about that run's environment than about the source. So is an entry
    checked "in the future" (no age would ever make it due) and a published entry that names no repos (nothing
    could confirm it).

    Returns:
        True to examine (read provenance or config, maybe build); False to reuse the entry as it is.
        A published entry whose repos `stale_published` reports must be examined too; that check is separate.
    """
    if recheck or entry is None or entry.last_checked > now:
        return True
    if (
        entry.revision != revision
        or entry.toolchain_fingerprint != fingerprints.toolchain
        or entry.recipe_fingerprint != fingerprints.recipe
    ):
        return True
    if entry.status == PUBLISHED:
        if not (entry.draft_repo and entry.target_repo):
            return True
        # Also by age: a published pair's target may have a new commit, which only a look at it shows.
        card = fingerprints.card
        return (card is not None and entry.card_fingerprint != card) or (
            recheck_after is not None and now - entry.last_checked >= recheck_after
        )
    if not source_fault(entry):
        return True
    return recheck_after is not None and now - entry.last_checked >= recheck_after


def source_fault(entry: StatusEntry) -> bool:
    """Whether a remembered skip or failure is the source's, so the memory may keep it: its stage's `Fault`.

    A failure counts only at a stage whose failures are the source's (`Fault.SOURCE`): one of the Hub, the disk or
    the runner is retried next run. A failure without a stage, or at one this bot does not know, is a bug or our
    side's (`InfrastructureFailure` is recorded without one): never the source's; nor is one whose reason shows
    the runner's fault (`bot.core.errors.runner_fault_in`), whatever its stage. A skip is the source's (the
    Hub's answer that it is gated counts) except at the publish stage, where the source itself was fine, and a
    "seen, not approved" (`Fault.DECISION`), which the recipe's trust decides afresh every run.
    """
    stage = Stage.named(entry.stage)
    if entry.status == FAILED:
        # A failure its reason shows to be the runner's (a full disk, an OOM kill, a child killed from outside, a
        # missing tool) is not the source's at any stage, also when an older bot remembered it with one.
        return stage is not None and stage.fault is Fault.SOURCE and runner_fault_in(entry.reason) is None
    return stage is None or stage.fault not in (Fault.OUTPUT, Fault.DECISION)


def stale_published(
    entries: Iterable[StatusEntry], namespace_listing: Mapping[str, str], *, namespace: str | None = None
) -> list[str]:
    """Published repos that changed behind the bot's back: a sha other than the recorded one, or gone.

    Only a hint in the direction of doing more work: a repo listed here is examined again; a repo not listed
    is still believed only after its record agrees (`status_read.agrees`). For one repo, ask
    `status_sync.StatusMemory.changed_outside`.

    Args:
        entries: the status file's entries (those with published repos are looked at).
        namespace_listing: repo id -> current sha, from one listing of the output namespace
            (`Hub.list_namespace`).
        namespace: the output namespace; a repo outside it is not the bot's (an official target the drafts were
            validated with, `publish.official_targets`) and never stale.

    Returns:
        Sorted repo ids; the sources that published them must be examined again.
    """
    stale = set()
    for entry in entries:
        for repo in entry.repos:
            if namespace is not None and repo.split("/")[0] != namespace:
                continue
            recorded = entry.repo_shas.get(repo)
            if namespace_listing.get(repo) is None or recorded != namespace_listing[repo]:
                stale.add(repo)
    return sorted(stale)


def with_repo_shas(status: StatusFile, namespace_listing: Mapping[str, str]) -> StatusFile:
    """The status with every published entry's `repo_shas` set from a listing taken after publishing.

    A target repo shared by several drafts is committed to by each of their publishes, so shas recorded per
    publish go stale within the run; one listing at the end records the final ones.
    """
    entries = tuple(
        entry.model_copy(
            update={"repo_shas": {repo: namespace_listing[repo] for repo in entry.repos if repo in namespace_listing}}
        )
        for entry in status.entries
    )
    return status.model_copy(update={"entries": entries})


def merged(
    previous: StatusFile | None,
    updates: Iterable[StatusEntry],
    *,
    recipe: str,
    namespace: str,
    watched: Iterable[str] | None,
    collection_title: str | None = None,
    collection_url: str | None = None,
    renderer: str = "",
    schedule: str | None = None,
    last_run: dt.datetime | None = None,
) -> StatusFile:
    """The next status file: this run's entries over the previous ones.

    Args:
        previous: what `read_status` returned (None: first run, or the status repo was deleted).
        updates: entries for the sources this run examined (published, skipped or failed); sources the run
            reused from memory need no update.
        watched: every source this run's listing returned; previous entries of sources no longer listed are
            dropped, unless they hold a published pair (the repos stay, and so does their line: a search that
            stops finding a source, a flood of other repos, never unlists what was published). None (a run
            limited with `--only`) keeps them all.
        collection_url: the collection's URL when this run synced it; default: the previous one.
        schedule, last_run: the recipe's `publish.schedule` and what `run_stamp` gave for this run.
    """
    by_source = {entry.source: entry for entry in (previous.entries if previous else ())}
    if watched is not None:
        keep = set(watched)
        by_source = {source: entry for source, entry in by_source.items() if source in keep or entry.repos}
    for entry in updates:
        by_source[entry.source] = entry
    return StatusFile(
        recipe=recipe,
        namespace=namespace,
        collection_title=collection_title or (previous.collection_title if previous else None),
        collection_url=collection_url or (previous.collection_url if previous else None),
        renderer=renderer,
        schedule=schedule,
        last_run=last_run,
        entries=tuple(by_source[source] for source in sorted(by_source)),
    )


def run_stamp(previous: StatusFile | None, *, schedule: str | None, now: dt.datetime) -> dt.datetime | None:
    """The `last_run` this run records: the previous one while it is younger than `RESTAMP_PERIODS` schedule
    periods, else `now`.

    The trade-off: a run with nothing new commits nothing to the status repo (tests/status/test_sync.py), so
    stamping every run would cost a commit every run. Kept for one and a half periods, the stamp moves with every
    second run of a regular schedule (one commit a day at the shipped 6 h; a threshold of one period would commit
    on nearly every run, GitHub's runs start minutes late), the page is at most 1.5 periods behind the last run,
    and "stale" (`StatusFile.is_stale`, `STALE_PERIODS` after the stamp) means no run for at least 1.5 periods
    beyond that lag: a stopped 6 h schedule shows as stale within 18 h, a healthy one late by up to half a
    period never does. A changed schedule, a stamp "in the future" or a previous status without one is stamped
    now. No schedule: no stamp (nothing to measure staleness by).
    """
    if schedule is None:
        return None
    last = previous.last_run if previous is not None and previous.schedule == schedule else None
    if last is None or last > now or now - last >= RESTAMP_PERIODS * period(schedule):
        return now
    return last


def collection_needs_sync(previous: StatusFile | None, status: StatusFile) -> bool:
    """Whether the collection may differ from what the status describes: no URL yet, another title, or other
    published pairs or figures than the previous status had. A no-op run therefore makes no collection call."""
    if previous is None or status.collection_url is None or previous.collection_title != status.collection_title:
        return True
    return previous.published_pairs() != status.published_pairs()


# ---- entries from what a run learned ----


def published_entry(
    built: BuildRecord,
    *,
    draft_repo: str,
    target_repo: str,
    fingerprints: Fingerprints,
    now: dt.datetime,
    repo_shas: Mapping[str, str] | None = None,
) -> StatusEntry:
    """The entry of a published (or up-to-date) source, from its build record.

    Used after a publish, for a source planning found up to date, and to rebuild a deleted status repo from
    the published repos.
    """
    validation = built.validation
    at_k = validation.best_run
    built_at = dt.datetime.fromisoformat(built.built_at)
    return StatusEntry(
        source=built.source.repo or "",
        revision=built.source.revision,
        status=PUBLISHED,
        kind=built.draft.kind,
        **_layout_fields(draft_formats.layout_of_kind(built.draft.kind), None),
        target=built.target.repo,
        target_revision=built.target.revision,
        draft_repo=draft_repo,
        target_repo=target_repo,
        repo_shas=dict(repo_shas or {}),
        accept_length=finite_or_none(validation.accept_length),
        speedup=finite_or_none(at_k.speedup),
        recommended_k=validation.recommended_num_assistant_tokens,
        profile=built.toolchain.profile,
        toolchain_fingerprint=fingerprints.toolchain,
        recipe_fingerprint=fingerprints.recipe,
        card_fingerprint=fingerprints.card,
        last_built=built_at if built_at.tzinfo is not None else built_at.replace(tzinfo=dt.UTC),
        last_checked=now,
    )


def finite_or_none(value: float | None) -> float | None:
    """A figure as the status may hold it: a finite number, or None for NaN and infinities (GenAI's acceptance
    rate is NaN on the DFlash path; an infinite speed-up is a timing artefact, not a result)."""
    return value if value is not None and math.isfinite(value) else None


def reason_text(reason: str) -> str:
    """A reason as the status keeps it: visible characters only (`bot.core.safe_text.clean`), at most
    `MAX_REASON_CHARS` (the run report keeps the whole text)."""
    text = clean(reason)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def problem_entry(
    source: str,
    revision: str | None,
    status: Literal["skipped", "failed"],
    reason: str,
    *,
    fingerprints: Fingerprints,
    now: dt.datetime,
    stage: str | None = None,
    kind: str | None = None,
    target: str | None = None,
    previous: StatusEntry | None = None,
) -> StatusEntry:
    """The entry of a source that was skipped or failed: what the memory needs to leave it alone next time.

    `previous` carries its published pair over (repos, shas, figures, profile, last build): a failed rebuild of
    a published source leaves the last good build published, and the page and the collection keep showing it.
    """
    kept: dict = {}
    if previous is not None and previous.repos:
        kept = previous.model_dump(
            include={
                "draft_repo",
                "target_repo",
                "repo_shas",
                "accept_length",
                "speedup",
                "recommended_k",
                "profile",
                "target_revision",
                "card_fingerprint",
            }
        )
    kept["kind"] = kind or (previous.kind if previous else None)
    facts = draft_formats.describe_reason(reason)
    kept["target"] = target or (facts.target if facts else None) or (previous.target if previous else None)
    if facts is not None:
        kept.update(_layout_fields(facts.layout, reason_text(facts.waits_for)))
    elif previous is not None and previous.layout is not None:
        kept.update(_layout_fields(previous.layout, None))
    return StatusEntry(
        **kept,
        source=source,
        revision=revision,
        status=status,
        reason=reason_text(reason),
        stage=stage,
        toolchain_fingerprint=fingerprints.toolchain,
        recipe_fingerprint=fingerprints.recipe,
        last_built=previous.last_built if previous else None,
        last_checked=now,
    )


def _layout_fields(layout_id: str | None, waits_for: str | None) -> dict:
    """An entry's layout, group and waits-for (all None for a layout the bot does not know)."""
    if layout_id not in draft_formats.LAYOUTS:
        return {"layout": None, "group": None, "waits_for": None}
    return {"layout": layout_id, "group": draft_formats.layout(layout_id).group, "waits_for": waits_for}


def now_utc() -> dt.datetime:
    """A run's timestamp, to the second (the page shows it; sub-second digits would only add noise)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)
