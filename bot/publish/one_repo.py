"""One live draft repo per source, whatever runs overlap (docs/design.md §2, §7; issue 41.1).

A draft's repo is named after its weight format (`bot.core.naming.draft_output_repos`), and `parent_commit` guards
one repo: two runs that chose different formats for one source committed to two repos, both cards saying
"published". So the publisher reads every format repo of the source (`holders`), and of those holding a build of
it the live one is the newest build, first in naming order on a tie: the rule planning finds a source's published
repo by (`bot.plan.planner`).

- Before the draft commit (`held_elsewhere`): when another format's repo holds the live build, the same build (the
  inputs plan compares, `BuildInputs`) is up to date there and is not published a second time; a newer one makes
  this bundle stale; an older one is replaced, as the format switch the plan foresaw is.
- After the draft commit, and when the repo was current (`settle`): every repo holding the source that is not the
  live one gets its card pointed to the live one (`supersede`).

Race-free with per-repo guards: the last draft commit of a source is followed by its publisher's `settle`, which
reads every format repo after that commit and so sees the final records. Superseding rewrites a card, never a
record, so it never changes which repo is live; each rewrite is guarded by `parent_commit` on its own repo, and a
412 sends the publisher back to decide again (`bot.publish.publisher.publish_group`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.core import log
from bot.core.errors import BotError, PreconditionFailed, Skip, Stage
from bot.core.hub_records import RepoFiles
from bot.core.record import BuildRecord
from bot.hub.client import Hub
from bot.publish.card import render_draft_card


@dataclass(frozen=True)
class Holder:
    """A format repo of a source as read now: its head and the record of the source's build it holds."""

    repo_id: str
    head: RepoFiles
    record: BuildRecord


def holders(
    hub: Hub, source: str, repos: Sequence[str], known: Mapping[str, tuple[RepoFiles | None, BuildRecord | None]]
) -> list[Holder]:
    """The repos of `repos` (in naming order) that hold a build of `source`; `known` repos as already read."""
    found = []
    for repo in dict.fromkeys(repos):
        head, held = known[repo] if repo in known else _read(hub, repo)
        if head is not None and held is not None and held.source.repo == source:
            found.append(Holder(repo, head, held))
    return found


def live(found: Sequence[Holder]) -> Holder | None:
    """The live repo: the newest build, the first in naming order on a tie (as planning's `max` finds it)."""
    return max(found, key=lambda holder: holder.record.built_at) if found else None


def held_elsewhere(
    hub: Hub,
    built: BuildRecord,
    repo: str,
    family: Sequence[str],
    seen: tuple[RepoFiles | None, BuildRecord | None],
    *,
    replacing: str | None,
) -> Holder | None:
    """The repo of another weight format holding the source's live build when that is this very build (it is up to
    date there and is not published to `repo` too); None when the bundle goes to `repo`.

    Args:
        built: the bundle's record.
        repo: the repo the bundle is published to (its weight format's).
        family: every format repo of the source, in naming order (`BuildJob.draft_repos`).
        seen: `repo` as the publisher read it (head and record).
        replacing: the repo the plan found the source published in, which this build replaces (None: none).

    Raises:
        Skip: another format's repo holds a newer build of the source than this bundle.
    """
    source = built.source.repo or ""
    current = live(holders(hub, source, (*family, repo), {repo: seen}))
    if current is None or current.repo_id == repo:
        return None
    if current.repo_id == replacing and current.record.built_at <= built.built_at:
        return None  # the switch the plan foresaw: `settle` points its card here
    if not current.record.inputs().changes_to(built.inputs()):
        log.step("%s already holds this build of %s: not published to %s too", current.repo_id, source, repo)
        return current
    if current.record.built_at > built.built_at:
        raise Skip(
            f"{current.repo_id} holds a newer build of {source} (source {str(current.record.source.revision)[:7]}, "
            f"built {current.record.built_at}), published by another run since this one planned: this bundle is "
            f"stale and is not published to {repo}",
            subject=source,
            stage=Stage.PUBLISH,
        )
    return None


def settle(
    hub: Hub, source: str, family: Sequence[str], commits: list[tuple[str, str]], private: bool
) -> Holder | None:
    """Point the card of every format repo holding `source` that is not the live one to the live one.

    Returns:
        the live repo and its build (None: no repo holds the source, or `family` is one repo: nothing is read).

    Raises:
        PreconditionFailed: a repo moved while its card was rewritten (the publisher decides again).
    """
    if len(set(family)) < 2:
        return None
    found = holders(hub, source, family, {})
    current = live(found)
    for holder in found:
        if current is not None and holder is not current:
            supersede(hub, holder, current.repo_id, commits, private)
    return current


def supersede(hub: Hub, old: Holder, new_repo: str, commits: list[tuple[str, str]], private: bool) -> None:
    """Rewrite the card of a repo the draft moved away from (another weight format's) to point to `new_repo` at its
    top; its files and record stay, and the card is still rendered from that record, so its metadata stays valid.

    A problem here is logged as a warning, never the new draft's failure: the new repo is published and the status
    page and collection list it.
    """
    if old.record.repos is None:
        log.step(
            "%s holds no published build of %s: no card to point to %s", old.repo_id, old.record.source.repo, new_repo
        )
        return
    try:
        card = hub.read_file(old.repo_id, "README.md", revision=old.head.sha) or b""
        if f"Superseded by [{new_repo}]".encode() in card:
            return
        with tempfile.TemporaryDirectory(prefix="dflash-bot-superseded-") as tmp:
            folder = Path(tmp)
            (folder / "README.md").write_text(render_draft_card(old.record, superseded_by=new_repo), encoding="utf-8")
            result = hub.publish_folder(
                old.repo_id,
                folder,
                message=f"Superseded by {new_repo}",
                private=private,
                only=("README.md",),
                seen=old.head,
            )
    except PreconditionFailed:
        raise  # another writer: the whole step is decided again
    except BotError as error:
        log.get().warning("%s: card not pointed to %s (%s)", old.repo_id, new_repo, error.one_line())
        return
    if result.commit:
        commits.append((old.repo_id, result.commit))
        log.step("%s: commit %s (card points to %s)", old.repo_id, result.commit[:7], new_repo)


def _read(hub: Hub, repo: str) -> tuple[RepoFiles | None, BuildRecord | None]:
    head = hub.files_or_none(repo)
    return head, hub.draft_record(repo, revision=head.sha) if head is not None else None
