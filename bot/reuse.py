"""Reuse the published target: a new draft for a target the bot already published needs no target export.

The common event is a new draft (or draft revision) for a target whose int4 IR is already on the Hub. When the
published target repo was built from the same target revision, with the same export settings and the same tracked
toolchain (`record.TargetRecord.target_inputs`), exporting again would write the same IR; so the plan pins that
repo's commit (`ReusedTarget`) and the build downloads its IR (a quarter of the bf16 bytes) instead of the bf16
weights, and skips the target export and the quality measurement (its figures are in the published record).
Sizing then counts no target export (`bot.sizing`), so a draft update for a target too large to export on a runner
still fits it.

The plan decides from the published record; the build checks the record it downloaded with the IR against its own
toolchain again (`check_reused`): if another run republished the target in between, or the builder's toolchain
differs from the plan's, the build fails with the reason rather than publish a draft validated against another IR.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bot import log
from bot.errors import BotError, Failure
from bot.hub import Hub
from bot.recipe import ExportSettings
from bot.record import PROVENANCE_FILE, RecordError, TargetRecord, export_settings, parse_target_record
from bot.toolchain import Toolchain

# What a published target repo holds besides the IR: our card and charts are rendered again by publish.
_NOT_DOWNLOADED = ("README.md", ".gitattributes")


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
) -> ReusedTarget | None:
    """The published target to reuse for a build, or None (nothing published, or built from other inputs).

    Two requests: the repo's files at its head, and its record at that commit.
    """
    try:
        head = reader.repo_files(target_repo)
    except BotError:
        return None  # not published (or unreadable): export it
    published = reader.target_record(target_repo, revision=head.sha)  # None: no usable record there
    if published is None:
        return None
    reason = why_not_reusable(published, target_revision, export, target_task, toolchain)
    if reason is not None:
        log.step("%s: not reused: %s", target_repo, reason)
        return None
    files = tuple(
        sorted(
            n
            for n in head.sizes
            if "/" not in n
            and n not in _NOT_DOWNLOADED
            and n.endswith((".xml", ".bin", ".json", ".jinja", ".txt", ".model"))
        )
    )
    if published.inspect.target.ir_file not in files or PROVENANCE_FILE not in files:
        log.step("%s: not reused: its IR files are not all there", target_repo)
        return None
    ir_bytes = sum(head.sizes[n] for n in files)
    log.step("%s@%s: its int4 IR is reused (%.1f GB to download)", target_repo, head.sha[:7], ir_bytes / 1e9)
    return ReusedTarget(repo=target_repo, revision=head.sha, files=files, ir_bytes=ir_bytes)


def check_reused(
    folder: Path, target_revision: str, export: ExportSettings, target_task: str, toolchain: Toolchain
) -> TargetRecord:
    """The downloaded target record, checked again against the builder's own toolchain.

    Raises:
        Failure: the downloaded IR is not what this build would export (republished meanwhile, or another
            toolchain in the builder than the plan assumed).
    """
    try:
        published = parse_target_record((folder / PROVENANCE_FILE).read_bytes())
    except (OSError, RecordError) as error:
        raise Failure(f"the reused target's record is unusable: {error}", stage="reuse-target") from None
    reason = why_not_reusable(published, target_revision, export, target_task, toolchain)
    if reason is not None:
        raise Failure(f"the published target IR changed since planning ({reason}); plan again", stage="reuse-target")
    return published
