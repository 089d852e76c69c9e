"""The status repo in a run: load the memory at planning, write the page and sync the collection at publishing.

Two calls for the orchestrator to make:

- `load_memory(reader, recipe, ...)` once per run, before planning: exactly two Hub requests (`status.json` and
  one listing of the output namespace). `StatusMemory.remembered(repo_id, revision)` then says, without any request,
  whether a listed source can be reported from memory (skipped or failed, unchanged) or must be examined
  (provenance read, config read, maybe a build). A remembered "published" is believed while the namespace listing
  shows its draft repo at the sha recorded after the bot's last commit (`head_unchanged`); otherwise `partition`
  hands it back for one read of the draft repo's record at its listed head (`believed`).
- `publish_status(writer, recipe, memory, updates, ...)` once per run, after publishing: merges what the run
  learned into the status, syncs the collection when the published pairs changed, and writes the status repo in
  one commit when its content changed. A run with nothing new sends nothing here, unless the status's `last_run`
  is due (`status.memory.run_stamp`: every 1.5 schedule periods, so the page shows the schedule still runs).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bot.core import log
from bot.core.errors import Failure, PreconditionFailed, Stage
from bot.core.fingerprints import Fingerprints
from bot.core.hub_records import RepoListing
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe
from bot.core.record import BuildRecord, Repos
from bot.discover.candidates import SkipRecord
from bot.hub.client import Hub
from bot.publish.collection import CollectionResult, sync_collection
from bot.status.memory import (
    PUBLISHED,
    StatusEntry,
    StatusFile,
    collection_needs_sync,
    merged,
    needs_recheck,
    now_utc,
    problem_entry,
    published_entry,
    reason_text,
    run_stamp,
    stale_published,
    with_repo_shas,
)
from bot.status.page import UNREAD, renderer_fingerprint, write_status
from bot.status.read import agrees, load_status

_STATUS_ATTEMPTS = 3  # a lost race (412) re-reads the page and merges again


@dataclass(frozen=True)
class StatusMemory:
    """What planning knows before examining any source: the last status and the output namespace's shas."""

    status: StatusFile | None
    namespace_listing: Mapping[str, str]
    stale: frozenset[str]
    fingerprints: Fingerprints  # this run's: what an entry must have been made with to be remembered
    now: dt.datetime
    recheck_after: dt.timedelta | None
    recheck: bool = False
    unreadable: bool = False  # the status file could not be read (Hub error): the page is not rewritten blind
    repaired: bool = False  # something in the file was dropped as invalid or foreign: written back without it

    def remembered(self, repo_id: str, revision: str | None) -> StatusEntry | None:
        """The entry to report for a listed source without examining it, or None to examine it.

        None when the source is new, its revision, the toolchain, the recipe or the card template changed,
        `--recheck` was given, a skip or failure is older than `recheck_after`, or one of its published repos
        was changed or deleted by someone else. A published entry returned here is still a claim: `partition`
        sends it to `believed`.
        """
        entry = self.status.entry(repo_id) if self.status is not None else None
        if entry is None or needs_recheck(
            entry,
            revision=revision,
            fingerprints=self.fingerprints,
            now=self.now,
            recheck_after=self.recheck_after,
            recheck=self.recheck,
        ):
            return None
        if self.stale & set(entry.repos):
            return None
        return entry

    def changed_outside(self, repo_id: str) -> bool:
        """Whether the memory marks a published repo as changed outside the bot: the status recorded a sha
        for it and the namespace listing shows another one, or none (`status.stale_published`)."""
        return repo_id in self.stale


def load_memory(
    reader: Hub,
    recipe: Recipe,
    *,
    fingerprints: Fingerprints | None = None,
    recheck: bool = False,
    now: dt.datetime | None = None,
) -> StatusMemory:
    """Read the status repo and list the output namespace: two requests, whatever the number of sources.

    Args:
        reader: the planning Hub (read token is enough for a public status repo).
        recipe: the run's recipe (status repo, namespace, `watch.recheck_after`).
        fingerprints: this run's (default: `Fingerprints.of(recipe)`, this environment's toolchain and no card
            template compared).
        recheck: the `--recheck` option.

    Raises:
        Failure: the Hub kept failing (a missing status repo is not an error: the memory is then empty).
    """
    try:
        read = load_status(reader, recipe.status_repo_id, recipe)
        status, repaired, unreadable = read.status, read.repaired, False
    except Failure as error:
        # Examine everything this run, and do not write the page blind over one we could not read.
        log.get().info(
            "status repo unreadable (%s): every source is examined, the page is left as it is", error.message
        )
        status, repaired, unreadable = None, False, True
    listing = reader.list_namespace(recipe.publish.namespace)
    entries = status.entries if status is not None else ()
    stale = frozenset(stale_published(entries, listing, namespace=recipe.publish.namespace))
    if stale:
        log.get().info("published repos changed outside the bot, re-examined: %s", ", ".join(sorted(stale)))
    return StatusMemory(
        status=status,
        namespace_listing=dict(listing),
        stale=stale,
        fingerprints=fingerprints or Fingerprints.of(recipe),
        now=now or now_utc(),
        recheck_after=recipe.watch.recheck_after,
        recheck=recheck,
        unreadable=unreadable,
        repaired=repaired,
    )


@dataclass(frozen=True)
class MemoryPlan:
    """Listed sources split by the memory: reported as remembered, to verify, or examined as before."""

    remembered: tuple[StatusEntry, ...]
    examine: tuple[RepoListing, ...]
    listing_skips: tuple[StatusEntry, ...]  # ruled out by the listing itself and not remembered: new entries
    # Remembered as published: believed only after the draft repo's record at its head agrees (`believed`).
    verify: tuple[tuple[StatusEntry, RepoListing], ...] = ()


def partition(memory: StatusMemory, listings: Iterable[RepoListing], skips: Iterable) -> MemoryPlan:
    """Split `discover.list_sources`' result by the memory, without any Hub request.

    Args:
        listings: the listed candidates; those not remembered go on to the provenance read (plan) as before.
        skips: the listing's own skip records (`discover.SkipRecord`: repo_id, revision, reason, stage); a
            remembered one is reused as it is (so its `last_checked` does not move and the status stays equal),
            a new one becomes a `problem_entry`.
    """
    remembered, examine, listing_skips, verify = [], [], [], []
    for skip in skips:
        entry = memory.remembered(skip.repo_id, skip.revision) or _same_listing_skip(memory, skip)
        if entry is not None and entry.status == "skipped" and entry.reason == reason_text(skip.reason):
            remembered.append(entry)
        else:
            listing_skips.append(
                problem_entry(
                    skip.repo_id,
                    skip.revision,
                    "skipped",
                    skip.reason,
                    stage=skip.stage,
                    kind=skip.kind,
                    fingerprints=memory.fingerprints,
                    now=memory.now,
                )
            )
    for listing in listings:
        entry = memory.remembered(listing.repo_id, listing.sha)
        if entry is None:
            examine.append(listing)
        elif entry.status == PUBLISHED and not head_unchanged(memory, entry):
            verify.append((entry, listing))
        else:
            remembered.append(entry)
    return MemoryPlan(tuple(remembered), tuple(examine), tuple(listing_skips), tuple(verify))


def _same_listing_skip(memory: StatusMemory, skip: SkipRecord) -> StatusEntry | None:
    """The previous entry of a source the listing rules out exactly as before (same revision, stage and reason):
    kept as it is, so a radar that sees the same strangers commits nothing. A "seen, not approved" is never
    remembered for planning (`Fault.DECISION`), but the listing alone decides it, so its line need not change."""
    if skip.stage != Stage.APPROVE:
        return None
    entry = memory.status.entry(skip.repo_id) if memory.status is not None else None
    if entry is None or entry.revision != skip.revision or entry.stage != skip.stage:
        return None
    return entry


def published_sources(memory: StatusMemory) -> dict[str, str]:
    """Every source the memory holds a published pair of (lower-cased id -> id): watched whatever the listings
    return, so a pair never leaves the page or the update cycle because a search stopped finding it."""
    entries = memory.status.entries if memory.status is not None else ()
    return {entry.source.lower(): entry.source for entry in entries if entry.repos}


def head_unchanged(memory: StatusMemory, entry: StatusEntry) -> bool:
    """Whether the namespace listing shows the entry's draft repo at the sha the bot recorded after its own last
    commit there: the record at that commit is the one the entry was made from (and a commit's files never change),
    so a remembered publish is believed without reading it again, and a no-op run costs the listing pages plus two
    requests however many drafts are published (issue 32). A head that differs is stale (`StatusMemory.remembered`) and
    examined; the memory of a published pair is re-examined by age too (`watch.recheck_after`)."""
    draft = entry.draft_repo
    return (
        draft is not None and draft in entry.repo_shas and memory.namespace_listing.get(draft) == entry.repo_shas[draft]
    )


def believed(entry: StatusEntry, record: BuildRecord | None) -> bool:
    """Whether a remembered published entry can be reported as up to date without examining its source.

    Args:
        entry: from `MemoryPlan.verify`: unchanged revision, toolchain, recipe and card template, and repos the
            namespace listing shows at the recorded shas.
        record: the draft repo's `openvino_export.json` read at the listed sha (`draft_head`), the one request
            this costs; None when it is missing or unreadable.

    Returns:
        True when the record says exactly what the entry says (`status_read.agrees`); the caller still compares the
        record with this run's recipe and toolchain (`plan.decide`). False: examine the source.
    """
    if not agrees(entry, record):
        log.step("%s: the status repo's entry does not match %s's record: examined", entry.source, entry.draft_repo)
        return False
    return True


def draft_head(memory: StatusMemory, entry: StatusEntry) -> str | None:
    """The draft repo's sha in the namespace listing: the revision its record is read at."""
    return memory.namespace_listing.get(entry.draft_repo) if entry.draft_repo else None


def entries_for(
    memory: StatusMemory, outcomes: Iterable[Outcome], published: Mapping[str, tuple[BuildRecord, Repos]]
) -> list[StatusEntry]:
    """Status entries for the sources a run examined, from their outcomes and the records it holds in memory.

    Args:
        outcomes: the run's outcomes of examined sources (not of those reported from memory).
        published: source -> (build record, repos) for every source the run published or found up to date.
    """
    entries = []
    for outcome in outcomes:
        try:
            entry = _entry_for(memory, outcome, published)
        except ValueError as error:  # a value the strict status model refuses: not remembered, examined next run
            log.get().warning("%s: not remembered in the status repo (%s)", outcome.source, str(error)[:200])
            continue
        if entry is not None:
            entries.append(entry)
    return entries


def _entry_for(
    memory: StatusMemory, outcome: Outcome, published: Mapping[str, tuple[BuildRecord, Repos]]
) -> StatusEntry | None:
    if outcome.status in (Status.PUBLISHED, Status.UP_TO_DATE) and outcome.source in published:
        built, repos = published[outcome.source]
        return published_entry(
            built,
            draft_repo=repos.draft,
            target_repo=repos.target,
            fingerprints=memory.fingerprints,
            now=memory.now,
        )
    if outcome.status not in (Status.SKIPPED, Status.FAILED):
        return None
    previous = memory.status.entry(outcome.source) if memory.status is not None else None
    return problem_entry(
        outcome.source,
        outcome.revision,
        "skipped" if outcome.status == Status.SKIPPED else "failed",
        outcome.reason,
        stage=outcome.stage,
        previous=previous,
        fingerprints=memory.fingerprints,
        now=memory.now,
    )


def remembered_outcome(entry: StatusEntry) -> Outcome:
    """How a source reported from memory appears in the run report (no Hub request was made for it)."""
    if entry.status == "published":
        return Outcome(entry.source, entry.revision, Status.UP_TO_DATE, "", entry.repos)
    when = entry.last_checked.date().isoformat()
    return Outcome(
        entry.source,
        entry.revision,
        Status.SKIPPED,
        f"{entry.status} when last examined ({when}), nothing changed since: {entry.reason}",
        stage=entry.stage,
    )


@dataclass(frozen=True)
class StatusResult:
    """What the status step did, for the run report and the step summary."""

    status: StatusFile
    repo_id: str
    page_url: str
    commit: str | None
    collection: CollectionResult | None = None

    @property
    def collection_url(self) -> str | None:
        return self.status.collection_url

    def summary_markdown(self) -> str:
        """Links for the publish job's step summary: the status page and the collection."""
        lines = [f"Status page: [{self.repo_id}]({self.page_url})" + (" (updated)" if self.commit else "")]
        if self.collection_url:
            lines.append(f"Collection: [{self.status.collection_title or 'collection'}]({self.collection_url})")
        return "\n\n".join(lines) + "\n"


def publish_status(
    writer: Hub,
    recipe: Recipe,
    memory: StatusMemory,
    updates: Iterable[StatusEntry],
    *,
    watched: Iterable[str] | None,
    committed: bool,
) -> StatusResult:
    """Merge this run's entries into the status, sync the collection if needed, write the status repo.

    Args:
        writer: the publishing Hub (write token).
        recipe: the run's recipe.
        memory: what `load_memory` returned at planning (in the Actions fan-out, the publish job calls
            `load_memory` again: one more status read and listing).
        updates: an entry for every source this run examined (`published_entry` for published and up-to-date
            sources, `problem_entry` for skipped and failed ones); sources reported from memory need none.
        watched: every source id this run's listing returned (entries of sources no longer listed are
            dropped); None for a run limited with `--only`.
        committed: whether this run committed to any published repo; then one more namespace listing records
            the repos' final shas (a shared target repo changes with every draft published against it).

    Returns:
        The new status, its commit (None when unchanged) and the collection sync (None when not needed).

    Raises:
        Failure: a Hub write failed (the models are published already; the next run retries the status).
    """
    publish, renderer, repo_id = recipe.publish, renderer_fingerprint(), recipe.status_repo_id
    updates, watched = list(updates), None if watched is None else list(watched)  # merged again after a lost race
    current = memory
    for attempt in range(1, _STATUS_ATTEMPTS + 1):
        status = merged(
            current.status,
            updates,
            recipe=recipe.name,
            namespace=publish.namespace,
            watched=watched,
            collection_title=recipe.collection_title,
            renderer=renderer,
            schedule=publish.schedule,
            last_run=run_stamp(current.status, schedule=publish.schedule, now=memory.now),
        )
        status = with_repo_shas(
            status, writer.list_namespace(publish.namespace) if committed else current.namespace_listing
        )
        collection = None
        # No collection is created before there is something to list in it.
        if collection_needs_sync(current.status, status) and (status.published_pairs() or status.collection_url):
            collection = sync_collection(writer, publish, status.published_pairs(), title=recipe.collection_title)
            status = status.model_copy(update={"collection_url": collection.url})
        try:
            # A repaired file is compared by its bytes on the Hub, not with the cleaned copy read at planning.
            known = UNREAD if current.repaired else current.status
            commit = write_status(writer, repo_id, status, current=known, private=publish.private)
        except PreconditionFailed:
            if attempt == _STATUS_ATTEMPTS:
                raise
            # Another run wrote the page meanwhile: merge into what it wrote, not over it.
            log.get().info("status page: another writer committed first, merging again")
            current = load_memory(writer, recipe, fingerprints=memory.fingerprints, recheck=memory.recheck)
            continue
        return StatusResult(
            status=status,
            repo_id=repo_id,
            page_url=f"{writer.endpoint}/datasets/{repo_id}",
            commit=commit,
            collection=collection,
        )
    raise AssertionError("unreachable")
