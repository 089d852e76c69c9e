"""Reading `status.json` as what it is: a hint that saves work, bounded, typed, and believed entry by entry.

The status repo is writable by anyone who can write to the publish namespace, and a damaged file must never stop
a run: before this module, a `last_checked` without a time zone raised `TypeError` in every run and a deeply
nested file raised `RecursionError`, and neither was ever repaired. So the file is read with a size limit, parsed
with a depth limit, and validated entry by entry against the strict models of `bot.status.memory` (aware timestamps,
finite figures, bounded text); an entry that fails, or that names a repo this recipe does not publish, is dropped
with a warning, and the publish step writes the file back without it. Nothing here raises for bad content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from bot.core import log, naming
from bot.core.errors import Skip
from bot.core.recipe import PublishSettings, Recipe
from bot.core.record import BuildRecord
from bot.hub.client import Hub
from bot.status.memory import READABLE_SCHEMA_VERSIONS, STATUS_JSON, StatusEntry, StatusFile, published_entry

MAX_STATUS_BYTES = 8 * 1024 * 1024  # about 20 000 entries; more than any recipe's `watch.max_candidates`
MAX_ENTRIES = 20_000
# Nesting an entry may have: the entry object, then `repo_shas`; the file adds its root and `entries`.
MAX_ENTRY_DEPTH = 2
MAX_PROBLEMS_LOGGED = 5
READABLE = " and ".join(map(str, READABLE_SCHEMA_VERSIONS))  # for the message naming a version this bot cannot read


@dataclass(frozen=True)
class StatusRead:
    """What a read of the status repo left: the believable status and why anything was not believed.

    Attributes:
        status: the file with every invalid or foreign entry dropped; None when there is no usable file.
        problems: one line per dropped file or entry (empty: the file was whole and ours).
    """

    status: StatusFile | None
    problems: tuple[str, ...] = ()

    @property
    def repaired(self) -> bool:
        """Whether the file on the Hub holds something dropped here, so it must be written back."""
        return bool(self.problems)


def parse_status(data: bytes) -> StatusRead:
    """Parse `status.json` bytes into the strict model, dropping what is invalid (never raises).

    Returns:
        A status without the invalid entries (None when the file as a whole is unusable: too large, not JSON,
        nested too deeply, another schema version, an invalid header), and the reason for each drop.
    """
    if len(data) > MAX_STATUS_BYTES:
        return StatusRead(None, (f"{STATUS_JSON} is {len(data)} bytes, over the {MAX_STATUS_BYTES}-byte limit",))
    try:
        raw = json.loads(data)
    except RecursionError:
        return StatusRead(None, (f"{STATUS_JSON} is nested too deeply to parse",))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        return StatusRead(None, (f"{STATUS_JSON} is not JSON ({str(exc)[:120]})",))
    if not isinstance(raw, dict) or raw.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        why = f"{STATUS_JSON} has schema version {str(version)[:40]!r} (this bot reads {READABLE})"
        return StatusRead(None, (why,))
    items = raw.pop("entries", [])
    if not isinstance(items, list) or len(items) > MAX_ENTRIES:
        return StatusRead(None, (f"{STATUS_JSON}: `entries` is not a list of at most {MAX_ENTRIES} entries",))
    if any(_deeper_than(value, 0) for value in raw.values()):
        return StatusRead(None, (f"{STATUS_JSON}: a header field is not a plain value",))
    try:
        header = StatusFile.model_validate(raw)
    except ValidationError as exc:
        return StatusRead(None, (f"{STATUS_JSON}: invalid header ({_first_error(exc)})",))
    entries, problems = _entries(items)
    return StatusRead(header.model_copy(update={"entries": tuple(entries)}), tuple(problems))


def _entries(items: list) -> tuple[list[StatusEntry], list[str]]:
    """The valid entries in file order, one per source (the first), and a reason for each one dropped."""
    entries: list[StatusEntry] = []
    problems: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        name = item.get("source") if isinstance(item, dict) else None
        label = f"entry {index}" + (f" ({name[:100]})" if isinstance(name, str) else "")
        if not isinstance(item, dict) or _deeper_than(item, MAX_ENTRY_DEPTH):
            problems.append(f"{label}: not an entry object of plain fields")
            continue
        try:
            entry = StatusEntry.model_validate(item)
        except ValidationError as exc:
            problems.append(f"{label}: {_first_error(exc)}")
            continue
        if entry.source.lower() in seen:
            problems.append(f"{label}: a second entry for the same source")
            continue
        seen.add(entry.source.lower())
        entries.append(entry)
    return sorted(entries, key=lambda entry: entry.source), problems


def vetted(read: StatusRead, recipe: Recipe) -> StatusRead:
    """Only what this recipe may remember: its own file, and entries naming only the repos it publishes.

    An entry that names another namespace's repos (or repos of ours under another source's name) would put
    them, with whatever figures it claims, in the recipe's collection and on its page; it is dropped instead.
    """
    status = read.status
    if status is None:
        return read
    publish = recipe.publish
    if status.recipe != recipe.name or status.namespace != publish.namespace:
        why = (
            f"{STATUS_JSON} was written for recipe {status.recipe[:60]!r} in {status.namespace!r}, not for "
            f"{recipe.name[:60]!r} in {publish.namespace!r} (give each recipe its own publish.status_repo)"
        )
        return StatusRead(None, (*read.problems, why))
    kept, problems = [], list(read.problems)
    if status.collection_url and f"/collections/{publish.collection_namespace}/" not in status.collection_url:
        problems.append(f"collection_url {status.collection_url[:100]!r} is not a collection of {publish.namespace}")
        status = status.model_copy(update={"collection_url": None})
    for entry in status.entries:
        why_not = foreign_repos(entry, publish)
        if why_not is None:
            kept.append(entry)
        else:
            problems.append(f"entry {entry.source}: {why_not}")
    return StatusRead(status.model_copy(update={"entries": tuple(kept)}), tuple(problems))


def foreign_repos(entry: StatusEntry, publish: PublishSettings) -> str | None:
    """Why an entry names a repo this recipe does not publish for its source (None: it names only its own).

    Its draft repo must be one `bot.core.naming` gives its source (one per weight format), its target repo the one it
    gives its target, both in `publish.namespace`, and its recorded shas may only be of those two.
    """
    if (entry.draft_repo is None) != (entry.target_repo is None):
        return "names a draft repo without a target repo, or the reverse"
    try:
        drafts = list(dict.fromkeys(naming.draft_output_repos(publish, entry.source).values()))
        expected = {
            entry.draft_repo: drafts if entry.draft_repo else [],
            # or an official target repo the drafts were validated with (`publish.official_targets`)
            entry.target_repo: [
                naming.target_output_repo(publish, entry.target),
                *publish.official_target_repos(entry.target),
            ]
            if entry.target
            else [],
        }
    except Skip as skip:
        return f"its repos cannot be named ({skip.message})"
    for repo, wanted in expected.items():
        if repo is not None and repo not in wanted:
            return f"names {repo}, which this recipe does not publish for it (expected {' or '.join(wanted)})"
    extra = set(entry.repo_shas) - set(entry.repos)
    if extra:
        return f"records shas of repos it does not name: {', '.join(sorted(extra))}"
    return None


def agrees(entry: StatusEntry, built: BuildRecord | None) -> bool:
    """Whether a remembered published entry says what the draft repo's record at its head says.

    The memory is only a hint: a forged or stale "published" (another source, another revision, other figures,
    other repos) must not hide a build. The record is the repo's own statement of what it holds (docs/design.md §2).

    Args:
        entry: a published entry that the namespace listing found unchanged.
        built: the draft repo's `openvino_export.json` at the listed head (None: missing or unreadable).

    Returns:
        True only when the entry is exactly the one `published_entry` makes from that record.
    """
    if built is None or entry.draft_repo is None or entry.target_repo is None:
        return False
    if built.repos is not None and (built.repos.draft, built.repos.target) != (entry.draft_repo, entry.target_repo):
        return False
    try:
        expected = published_entry(
            built,
            draft_repo=entry.draft_repo,
            target_repo=entry.target_repo,
            fingerprints=entry.fingerprints,
            now=entry.last_checked,
            repo_shas=entry.repo_shas,
        )
    except ValueError:  # a record whose values the status cannot hold (pydantic's ValidationError included)
        return False
    return expected == entry


def load_status(hub: Hub, repo_id: str, recipe: Recipe | None = None) -> StatusRead:
    """Read the status repo (one request) and keep what can be believed; each drop is a logged warning.

    Args:
        recipe: the recipe whose memory this is (`vetted`); None reads the file as it is (`dflash-bot status`).

    Raises:
        Failure: the Hub kept failing (a missing file is an empty read, an oversized one an invalid file).
    """
    try:
        data = hub.read_file(repo_id, STATUS_JSON, max_bytes=MAX_STATUS_BYTES, repo_type="dataset")
    except Skip as skip:  # over the size limit
        read = StatusRead(None, (skip.message,))
    else:
        read = StatusRead(None) if data is None else parse_status(data)
    if recipe is not None:
        read = vetted(read, recipe)
    for problem in read.problems[:MAX_PROBLEMS_LOGGED]:
        log.get().warning("%s: %s: dropped, rebuilt from the Hub", repo_id, problem)
    if len(read.problems) > MAX_PROBLEMS_LOGGED:
        log.get().warning("%s: %d more dropped", repo_id, len(read.problems) - MAX_PROBLEMS_LOGGED)
    return read


def _deeper_than(node: object, limit: int) -> bool:
    """Whether `node` is or holds a list or object at nesting level `limit` or deeper, `node` itself being level
    0 (iterative: no recursion limit to hit)."""
    stack = [(node, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, without the input value (which may be huge or hostile)."""
    error = exc.errors(include_input=False, include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "value"
    return f"{where}: {error['msg']}"[:200]


def read_status(hub: Hub, repo_id: str) -> StatusFile | None:
    """The status file (one request), or None when there is none or it is unusable as a whole.

    Invalid entries are dropped with a warning (`bot.status.read`: size and depth limits, strict models);
    planning uses `status_read.load_status` with the recipe, which also drops entries naming repos the recipe
    does not publish. None makes planning fall back to reading each candidate's published provenance, after
    which the publish step writes a fresh status: a deleted or damaged status repo is rebuilt from the published
    repos, without rebuilding any model.

    Raises:
        Failure: the Hub kept failing (a missing repo or file is None, not an error).
    """
    return load_status(hub, repo_id).status
