"""Reuse the published target: a new draft for a target the bot already published needs no target export.

The common event is a new draft (or draft revision) for a target whose int4 IR is already on the Hub. When the
published target repo was built from the same target revision, with the same export settings and the same tracked
toolchain (`record.TargetRecord.target_inputs`), exporting again would write the same IR; so the plan pins that
repo's commit (`ReusedTarget`) and the build downloads its IR (a quarter of the bf16 bytes) instead of the bf16
weights, and skips the target export and the quality measurement (its figures are in the published record).
Sizing then counts no target export (`bot.plan.sizing`), so a draft update for a target too large to export on a runner
still fits it.

The record is only believed for files the bot wrote (docs/design.md §3): a target is reused only when every file of the
repo at the pinned commit is the one its record lists (the Hub's LFS sha256 or git blob id against the record's),
every file was last written by the bot's own Hub user (the history from that commit back to the bot's commit that
wrote the files holds only the bot's commits, of either recipe that shares the target, and that commit's record
lists the same files: `why_not_the_bots`); otherwise the target is exported again and the plan says whose commit it
found. The build checks the record it downloaded with the IR against its own toolchain again, and every downloaded
file against the record's sha256 (`check_reused`): if another run republished the target in between, or the
builder's toolchain differs from the plan's, the build fails with the reason rather than publish a draft validated
against another IR.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bot.core import log
from bot.core.errors import BotError, Failure, Stage
from bot.core.hashes import read_manifest
from bot.core.recipe import ExportSettings
from bot.core.record import PROVENANCE_FILE, RecordError, TargetRecord, export_settings, parse_target_record
from bot.core.record_files import differs_from_record
from bot.core.toolchain import Toolchain
from bot.hub.client import Hub

# The title the bot's commit that writes a target's files starts with (`bot.publish.publisher`); every other commit
# of the bot to a target repo changes only its card and record.
EXPORT_COMMIT = "Export target "
# How far back a target repo's history is read to find that commit (one page of the Hub's commit listing is 50).
MAX_HISTORY = 200
# What a published target repo holds besides the IR: our card and charts are rendered again by publish.
_NOT_DOWNLOADED = ("README.md", ".gitattributes")
_RENDERED = (*_NOT_DOWNLOADED, PROVENANCE_FILE)


class ReusedTarget(BaseModel):
    """The published target repo, pinned to a commit, whose int4 IR a build downloads instead of exporting."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str
    files: tuple[str, ...]  # exactly what the build downloads (the IR folder and the record)
    ir_bytes: int = Field(ge=0)

    @property
    def pinned(self) -> str:
        return f"{self.repo}@{self.revision}"


def why_not_reusable(
    published: TargetRecord, target_revision: str, export: ExportSettings, target_task: str, toolchain: Toolchain
) -> str | None:
    """Why the published target IR is not the one this build would export (None: it is)."""
    if published.target.revision != target_revision:
        return f"built from target revision {(published.target.revision or 'none')[:7]}, not {target_revision[:7]}"
    if published.export.settings() != export_settings(export, target_task):
        return "built with other export settings"
    if published.toolchain.tracked() != toolchain.tracked():
        changed = sorted(
            name for name, version in toolchain.tracked().items() if published.toolchain.tracked().get(name) != version
        )
        return f"built with another toolchain ({', '.join(changed)})"
    return None


def plan_reuse(
    reader: Hub,
    target_repo: str,
    target_revision: str,
    export: ExportSettings,
    target_task: str,
    toolchain: Toolchain,
    *,
    bot_user: str | None = None,
    changed_outside: bool = False,
) -> tuple[ReusedTarget | None, str | None]:
    """The published target to reuse for a build, or None and why not (no reason: nothing is published there).
    A target built from other inputs, or not provably the bot's own build, is exported again.

    Args:
        bot_user: the Hub user the bot publishes as; the pinned commit must be its own (None: not known to this
            plan, so nothing is reused).
        changed_outside: the status memory marks the repo as changed outside the bot.

    Five requests or so: the repo's files at its head, its record at that commit, the hashes the Hub lists there,
    the history back to the bot's commit that wrote the files (a page per 50 commits), and that commit's record.
    """
    try:
        head = reader.repo_files(target_repo)
    except BotError:
        return None, None  # not published (or unreadable): export it
    published = reader.target_record(target_repo, revision=head.sha)  # None: no usable record there
    if published is None:
        return None, f"{target_repo} holds no usable record"
    reason = why_not_reusable(published, target_revision, export, target_task, toolchain)
    if reason is None:
        reason = _why_not_trusted(reader, target_repo, head.sha, published, bot_user, changed_outside)
    if reason is not None:
        log.step("%s: not reused, the target is exported again: %s", target_repo, reason)
        return None, f"{target_repo} not reused: {reason}"
    files = tuple(sorted(n for n in head.sizes if n not in _NOT_DOWNLOADED))
    ir_bytes = sum(head.sizes[n] for n in files)
    log.step("%s@%s: its int4 IR is reused (%.1f GB to download)", target_repo, head.sha[:7], ir_bytes / 1e9)
    return ReusedTarget(repo=target_repo, revision=head.sha, files=files, ir_bytes=ir_bytes), None


def _why_not_trusted(
    reader: Hub, repo: str, commit: str, published: TargetRecord, bot_user: str | None, changed_outside: bool
) -> str | None:
    """Why the published target at `commit` is not provably what the bot built (None: it is).

    `changed_outside` (the status memory saw another sha than it recorded) is only a hint: another recipe that
    shares the target commits to its card too, so the history decides (`why_not_the_bots`).
    """
    if published.files is None:
        return "its record lists no file hashes (built by an older bot)"
    if published.inspect.target.ir_file not in published.files:
        return "its record does not list its IR file"
    try:
        changed = differs_from_record(reader.listed_hashes(repo, commit), published.files, _RENDERED)
        if changed is not None:
            return f"target repo changed outside the bot: {changed}"
        if bot_user is None:
            return "the bot's own Hub user is not known to this plan (no write token; set publish.bot_user)"
        if changed_outside:
            log.step("%s: the status memory recorded another commit; its history decides", repo)
        return why_not_the_bots(reader, repo, commit, published, bot_user)
    except BotError as error:
        return f"its files could not be checked ({error.message})"


def why_not_the_bots(reader: Hub, repo: str, commit: str, published: TargetRecord, bot_user: str) -> str | None:
    """Why the files of a target repo at `commit` are not provably written by the bot (None: they are).

    Who made the head commit says nothing about who wrote the files in it: a card-only commit of the bot lands on
    top of whatever the repo held. So the history is read back from `commit` to the newest commit that wrote the
    target's files (`EXPORT_COMMIT`, the only commit of the bot that writes more than the card and the record):
    every commit on the way, and that one, must be by the bot's user (whichever recipe made it: recipes that
    share a target publish as one user), and that commit's record must list the files `published` lists (so the
    list was the bot's own export's, not copied by a card commit from a record someone else wrote). The files at
    `commit` match `published` (checked before), so each was last written by the bot.

    Raises:
        BotError: the history or that record could not be read.
    """
    history = reader.commit_log(repo, commit, limit=MAX_HISTORY)
    for entry in history:
        if entry.author != bot_user:
            return (
                f"target repo changed outside the bot: commit {entry.commit[:7]} ({entry.title[:60]!r}) is by "
                f"{entry.author or 'nobody'}, not {bot_user}"
            )
        if entry.title.startswith(EXPORT_COMMIT):
            written = reader.target_record(repo, revision=entry.commit)
            if written is None or written.files != published.files:
                return (
                    f"target repo changed outside the bot: its record lists other files than the bot's export "
                    f"commit {entry.commit[:7]} wrote"
                )
            return None
    return f"no commit of the bot's that wrote its files among the last {len(history)} commits"


def check_reused(
    folder: Path, target_revision: str, export: ExportSettings, target_task: str, toolchain: Toolchain
) -> TargetRecord:
    """The downloaded target record, checked again against the builder's own toolchain, and every downloaded file
    against the sha256 the record lists (the hashes `bot.hub.client.Hub.download` computed and verified,
    `read_manifest`).

    Raises:
        Failure: the downloaded IR is not what this build would export (republished meanwhile, or another
            toolchain in the builder than the plan assumed), or a file is not the one the record lists.
    """
    try:
        published = parse_target_record((folder / PROVENANCE_FILE).read_bytes())
    except (OSError, RecordError) as error:
        raise Failure(f"the reused target's record is unusable: {error}", stage=Stage.REUSE_TARGET) from None
    reason = why_not_reusable(published, target_revision, export, target_task, toolchain)
    if reason is not None:
        raise Failure(
            f"the published target IR changed since planning ({reason}); plan again", stage=Stage.REUSE_TARGET
        )
    recorded = published.files or {}
    # The download hashed every file it wrote (checked against the Hub's hashes): compare those, not the GBs again.
    downloaded = {name: f for name, f in read_manifest(folder).items() if name != PROVENANCE_FILE}
    present = {p.name for p in folder.iterdir() if p.name != PROVENANCE_FILE}
    differ = sorted((present | set(downloaded)) ^ set(recorded)) + sorted(present ^ set(downloaded))
    differ += [
        name
        for name in sorted(set(downloaded) & set(recorded))
        if (downloaded[name].sha256, downloaded[name].size) != (recorded[name].sha256, recorded[name].size)
    ]
    if not recorded or differ:
        detail = ", ".join(differ[:5]) or "its record lists no files"
        raise Failure(
            f"the reused target's files do not match its record ({detail}); not built", stage=Stage.REUSE_TARGET
        )
    return published
