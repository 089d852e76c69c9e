"""Publish a validated bundle: one commit per repo, card and record included, target first (docs/design.md §7).

This stage holds the write token and never loads a checkpoint: it renders Markdown and uploads files. The output
repos come from the build job (plan named them) and the record from memory. Before writing it re-reads the Hub,
so a stale bundle never overwrites newer work, a repo that holds another source's build is never overwritten, and
a second publisher of the same build reports "up-to-date". Every commit carries every file of the repo and
`parent_commit`, so a crash or a race leaves a repo at its previous commit or at the complete new one.

A draft is published to the repo named after its weight format (`bot.core.naming`). When a build moved it to
another format, the repo it was in before keeps its files, and its card is rewritten in the same step to say
which repo supersedes it; the target's card then lists the new repo in place of the old one. Every format repo of
the source is read, before the draft commit and after it, so overlapping runs that chose different formats leave
one live repo (`bot.publish.one_repo`).

A draft validated against an official target (`BuildRecord.official_target`, `bot.builder.official_target`) has no
target repo of the bot's own: only the draft repo is committed, and its record names the official repo as target.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bot.builder.bundle import DRAFT_PUBLISHED, TARGET_FILES, Bundle, check_folder, check_publishable
from bot.core import log, record
from bot.core.errors import BotError, Failure, PreconditionFailed, Skip, Stage
from bot.core.fingerprints import template_fingerprint
from bot.core.hub_records import RepoFiles
from bot.core.outcome import Status
from bot.core.record import PROVENANCE_FILE, BuildRecord, DraftSummary, Repos, TargetRecord
from bot.core.record_files import differs_from_record
from bot.hub.client import Hub
from bot.plan.reuse import EXPORT_COMMIT, why_not_the_bots
from bot.publish.card import render_draft_card, render_target_card
from bot.publish.card_check import refused_card
from bot.publish.charts import ACCEPTANCE_CHART, write_acceptance_chart
from bot.publish.one_repo import held_elsewhere, settle

CARD_FILES = ("README.md", PROVENANCE_FILE)  # what a card-only commit holds (here and `bot.publish.refresh`)
_DRAFT_RENDERED = (*CARD_FILES, ACCEPTANCE_CHART)  # rendered from the record at publish, so not listed in it
_RACE_ATTEMPTS = 6  # another publisher of the same group makes up to three commits in a row


@dataclass(frozen=True)
class CardPins:
    """What a draft card pins besides its own record: the install line and the target commit it was validated with."""

    install: str | None = None
    target_commit: str | None = None


@dataclass(frozen=True)
class _Read:
    """A repo as read at one moment (`head` None: it did not exist)."""

    head: RepoFiles | None


@dataclass(frozen=True)
class PublishResult:
    status: Status  # PUBLISHED (something was committed) or UP_TO_DATE
    repos: Repos
    commits: list[tuple[str, str]] = field(default_factory=list)  # (repo, new commit id), in commit order
    # The build `repos.draft` holds when another run published it there, in another weight format (None: this one's).
    record: BuildRecord | None = None


def publish_bundle(
    hub: Hub, bundle: Bundle, repos: Repos, *, private: bool, family: Sequence[str] = ()
) -> PublishResult:
    """Publish one bundle to the draft and target repos its build is published to, as `OutputRepos.for_build`
    gives them (`bot.plan.job`: an official target's repo when the draft was validated against it), used as they are.

    Args:
        family: every format repo of the bundle's source (`bot.core.naming.draft_output_repos`), read before and
            after the draft commit so that the source keeps one live repo (`bot.publish.one_repo`).

    Raises:
        Failure: the bundle failed a validation gate (never published), or the Hub refused the commits.
        Skip: an output repo holds newer work, or another source's build.
    """
    (result,) = publish_group(hub, [(bundle, repos)], private=private, families={repos.draft: family})
    if isinstance(result, BaseException):
        raise result
    return result


def publish_group(
    hub: Hub,
    members: list[tuple[Bundle, Repos]],
    *,
    private: bool,
    replaces: Mapping[str, str] | None = None,
    install: str | None = None,
    families: Mapping[str, Sequence[str]] | None = None,
) -> list[PublishResult | BotError]:
    """Publish the drafts of one target: the target repo once (listing every draft built now), then each draft.

    Args:
        members: each bundle with the repos it is published to, as its job gives them (`BuildJob.publish_repos`:
            an official target's repo when the draft was validated against it), used as they are.
        replaces: new draft repo -> the repo the same source was published in before (another weight format's
            name): once the new repo is published, the old one's card is rewritten to point to it.
        install: the requirement the draft cards' install line gives (`bot.publish.install.install_line`; None:
            no install line).
        families: draft repo -> every format repo of its source, in naming order (`BuildJob.draft_repos`): each is
            read before and after the draft commit, so that the source keeps one live repo (`bot.publish.one_repo`).

    Returns:
        per member, in order, its result or the skip/failure that stopped it (one member's problem never stops
        the others).
    """
    card_fp = template_fingerprint()
    replaces = replaces or {}
    families = {
        repos.draft: (
            *(families or {}).get(repos.draft, ()),
            repos.draft,
            *([replaces[repos.draft]] if repos.draft in replaces else []),
        )
        for _, repos in members
    }
    refused = _refused_bundle(members, card_fp)
    if refused is not None:
        return [refused] * len(members)  # one tampered bundle: nothing of its group is committed
    card_refused = refused_card(hub, members, card_fp)  # the Hub's card check, before any upload (issue 33)
    if card_refused is not None:
        return [card_refused] * len(members)
    results: list[PublishResult | BotError | None] = [None] * len(members)
    for attempt in range(1, _RACE_ATTEMPTS + 1):
        pending = [i for i, result in enumerate(results) if result is None]
        if not pending:
            break
        try:
            _publish_once(hub, members, pending, results, card_fp, private, replaces, install, families)
        except PreconditionFailed as error:
            # Another writer committed first: re-read the Hub and decide again (it may hold this very build).
            log.step("%s: lost a commit race (412), re-reading the Hub", members[pending[0]][1].target)
            if attempt == _RACE_ATTEMPTS:
                for i in pending:
                    if results[i] is None:
                        results[i] = error
            else:
                time.sleep(random.uniform(0.2, 1.0) * attempt)  # let the other writer finish its commits
    return [r if r is not None else Failure("not published", stage=Stage.PUBLISH) for r in results]


def _publish_once(
    hub: Hub,
    members: list[tuple[Bundle, Repos]],
    pending: list[int],
    results: list[PublishResult | BotError | None],
    card_fp: str,
    private: bool,
    replaces: Mapping[str, str],
    install: str | None,
    families: Mapping[str, Sequence[str]],
) -> None:
    """Target weights first (its card listing only drafts already published), then each draft (and the cards of
    its source's other format repos, pointed to the live one), then the target's card listing the drafts now
    published: a run killed at any point leaves no card linking a missing repo, and the next run finishes the work."""
    ready, current, seen = _decide_drafts(hub, members, pending, results, card_fp, replaces, families)
    commits: dict[int, list[tuple[str, str]]] = {i: [] for i in ready + current}
    published: list[int] = []
    ready, target_commit = _publish_target_weights(hub, members, ready, results, commits, card_fp, private)
    for i in ready:
        bundle, repos = members[i]
        try:
            pins = CardPins(install=install, target_commit=target_commit)
            _publish_draft(hub, bundle, repos, commits[i], private, seen[i], pins)
        except PreconditionFailed:
            raise
        except BotError as error:
            results[i] = error
            continue
        published.append(i)
    # The target is read before the source's repos are settled: a draft another run makes live after this read has
    # its target-card commit after it too, so ours fails on its parent (412) and is decided again.
    own_target = [members[i][1].target for i in published + current if not _official_target_used(members[i][0].record)]
    target_seen = _Read(hub.files_or_none(own_target[0])) if own_target else None
    listed = []
    for i in published + current:
        bundle, repos = members[i]
        now = settle(hub, bundle.record.source.repo or "", families[repos.draft], commits[i], private)
        if now is not None and now.repo_id != repos.draft:  # another run published a newer build since our decision
            log.step("%s: %s holds the live build, its card points there", repos.draft, now.repo_id)
            update = {"draft": now.repo_id}
            results[i] = PublishResult(Status.UP_TO_DATE, repos.model_copy(update=update), commits[i], now.record)
        else:
            listed.append(i)
    listed_own = [i for i in listed if not _official_target_used(members[i][0].record)]
    if listed_own:
        # Every draft that is on the Hub now, current ones included (a run killed before this step left them
        # off the target's card): one card-only commit when the list changed.
        listing = [members[i] for i in listed_own]
        _publish_target(hub, listing, card_fp, commits[listed_own[0]], private, list_new=True, seen=target_seen)
    for i in listed:
        # Nothing committed: another writer published this very build between our check and our commit.
        results[i] = PublishResult(Status.PUBLISHED if commits[i] else Status.UP_TO_DATE, members[i][1], commits[i])


def _decide_drafts(
    hub: Hub,
    members: list[tuple[Bundle, Repos]],
    pending: list[int],
    results: list[PublishResult | BotError | None],
    card_fp: str,
    replaces: Mapping[str, str],
    families: Mapping[str, Sequence[str]],
) -> tuple[list[int], list[int], dict[int, tuple[RepoFiles | None, BuildRecord | None]]]:
    """(the pending members to publish, those the Hub already holds, the draft repo as each decision read it); a
    member whose repo cannot be read gets its error in `results`, and one whose build another format's repo holds
    (another run published it) is up to date there."""
    ready: list[int] = []
    current: list[int] = []
    seen: dict[int, tuple[RepoFiles | None, BuildRecord | None]] = {}
    for i in pending:
        bundle, repos = members[i]
        try:
            is_current, head, found = _draft_is_current(
                hub, bundle.record, repos, card_fp, replacing=repos.draft in replaces
            )
            there = held_elsewhere(
                hub,
                bundle.record,
                repos.draft,
                families[repos.draft],
                (head, found),
                replacing=replaces.get(repos.draft),
            )
        except BotError as error:
            results[i] = error
            continue
        if there is not None:
            results[i] = PublishResult(
                Status.UP_TO_DATE, repos.model_copy(update={"draft": there.repo_id}), [], there.record
            )
            continue
        seen[i] = (head, found)
        (current if is_current else ready).append(i)
    return ready, current, seen


def _publish_target_weights(
    hub: Hub,
    members: list[tuple[Bundle, Repos]],
    ready: list[int],
    results: list[PublishResult | BotError | None],
    commits: dict[int, list[tuple[str, str]]],
    card_fp: str,
    private: bool,
) -> tuple[list[int], str | None]:
    """Commit the target repo's weights for the members that export their own target (an official target is not
    ours), its card listing only drafts already published.

    Returns:
        (the members still to publish: without those whose target failed, which get the error in `results`; the
        target repo's commit holding the IR the drafts were validated with, None when no target of ours).
    """
    own = [i for i in ready if not _official_target_used(members[i][0].record)]
    if not own:
        return ready, None
    try:
        commit = _publish_target(hub, [members[i] for i in own], card_fp, commits[own[0]], private, list_new=False)
    except PreconditionFailed:
        raise
    except BotError as error:
        for i in own:
            results[i] = error
        return [i for i in ready if i not in own], None
    return ready, commit


def _refused_bundle(members: list[tuple[Bundle, Repos]], card_fp: str) -> Failure | None:
    """The failure of a group with a bundle that cannot be published as it is, naming that bundle; None when every
    bundle can.

    A bundle's record is committed as the builder wrote it, so it must name the repos the publisher was handed for it
    (its job's, `bot.plan.job.BuildJob.repos_for`; the record travels with the bundle and never picks them) and the
    card templates this publisher renders with. Its files must be only what its format publishes (by name or kind,
    an IR without its pair, `auto_map` in a config; `bot.builder.bundle.check_publishable`).
    """
    for bundle, repos in members:
        built = bundle.record
        name = f"bundle {bundle.root.name} ({built.source.repo})"
        try:
            if (why := not_as_written(built, repos, card_fp)) is not None:
                raise Failure(f"{name}: {why}")
            check_publishable(bundle.draft_dir, "draft", f"{name}: draft/", (ACCEPTANCE_CHART,))
            if _official_target_used(built):
                check_publishable(bundle.target_dir, "official", f"{name}: target/ (an official target's)", ())
            else:
                check_publishable(bundle.target_dir, "target", f"{name}: target/")
        except Failure as error:
            members_named = ", ".join(b.record.source.repo or "?" for b, _ in members)
            return Failure(
                f"{error.message}; nothing of its group is published ({members_named})",
                subject=built.source.repo,
                stage=Stage.PUBLISH,
            )
    return None


def not_as_written(built: BuildRecord, repos: Repos, card_fp: str) -> str | None:
    """Why a build's record cannot be committed as written to `repos` with the card templates `card_fp` (None: it
    can): it names other repos (or none), or was made for other templates. The publisher asks it of every bundle,
    and so does the hand-off with the plan's repos (`bot.run.handoff`)."""
    if built.repos != repos:
        named = f"{built.repos.draft} and {built.repos.target}" if built.repos else "no repos"
        return f"its record names {named}, not {repos.draft} and {repos.target}, the repos it is published to"
    if built.card is None or built.card.template_fingerprint != card_fp:
        made = built.card.template_fingerprint[:12] if built.card else "none"
        return f"its record was made for other card templates ({made}, these are {card_fp[:12]}): build it again"
    return None


def _official_target_used(built: BuildRecord) -> bool:
    return built.official_target is not None and built.official_target.used


def _draft_is_current(
    hub: Hub, built: BuildRecord, repos: Repos, card_fp: str, *, replacing: bool = False
) -> tuple[bool, RepoFiles | None, BuildRecord | None]:
    """Whether the draft repo already holds this build with this card, the repo as it was read (None: no repo) and
    its record there; a commit of this bundle must have that commit as its parent (`Hub.publish_folder(seen=...)`).

    With `replacing` (the draft comes back to this repo from another format's), only this very bundle is current:
    an equal build published here before is the one whose card now points away.

    Raises:
        Failure: the bundle did not pass its gates, or was built from local folders.
        Skip: the repo holds another source's build, or a newer build of this source.
    """
    source = built.source.repo
    if not built.passed:
        gates = "; ".join(built.failed_gates) or f"status {built.status}"
        raise Failure(f"bundle did not pass validation, not published ({gates})", subject=source, stage=Stage.PUBLISH)
    if not source or not built.target.repo:
        raise Failure(
            "bundle was built from local folders: there is no source repo to publish under",
            subject=source,
            stage=Stage.PUBLISH,
        )
    head = hub.files_or_none(repos.draft)
    published = hub.draft_record(repos.draft, revision=head.sha) if head is not None else None
    if published is None:
        return False, head, None
    if published.source.repo != source:
        raise Skip(
            f"{repos.draft} holds a build of {published.source.repo}, not of {source}: not overwritten "
            "(two sources map to one output repo; rename one in the recipe)",
            subject=source,
            stage=Stage.PUBLISH,
        )
    if not published.inputs().changes_to(built.inputs()) and (not replacing or published.built_at == built.built_at):
        if published.card is not None and published.card.template_fingerprint == card_fp:
            log.step("%s already holds this build", repos.draft)
            return True, head, published
    elif published.built_at > built.built_at and published.source.revision != built.source.revision:
        raise Skip(
            f"{repos.draft} already holds a newer build (source {str(published.source.revision)[:7]}); "
            "this bundle is stale",
            subject=source,
            stage=Stage.PUBLISH,
        )
    return False, head, published


def _not_the_bots_repo(repo: str, head: RepoFiles | None, listed: Iterable[str] | None, subject: str | None) -> None:
    """Refuse a commit of a bundle's files (it adds, replaces and deletes) over a repo that holds files the bot did
    not publish: only the `listed` files (what its record lists; a record of an older bot that lists none: the
    format's names), the card, record and chart the bot renders, and `.gitattributes` may be there (a repo without
    a record of the bot's, `listed` None: `.gitattributes` alone). A hand-made repo, or one a collaborator added
    files to, keeps every file.

    Raises:
        Skip: naming the files the bot did not publish.
    """
    if head is None:
        return
    own = {".gitattributes", *((*_DRAFT_RENDERED, *listed) if listed is not None else ())}
    others = sorted(set(head.sizes) - own)
    if others:
        raise Skip(
            f"{repo} is not the bot's repo: it holds {', '.join(others[:5])}"
            f"{f' and {len(others) - 5} more' if len(others) > 5 else ''}, which the bot did not publish; "
            "nothing committed to it",
            subject=subject,
            stage=Stage.PUBLISH,
        )


def _publish_target(
    hub: Hub,
    members: list[tuple[Bundle, Repos]],
    card_fp: str,
    commits: list[tuple[str, str]],
    private: bool,
    *,
    list_new: bool,
    seen: _Read | None = None,
) -> str | None:
    """One commit to the target repo, or none when it is current.

    Args:
        list_new: add these members' drafts to the target card's list (only once they are published); without it
            the card lists only the drafts already there.
        seen: the target repo as read earlier, the commit's parent (None: read it now).

    Returns:
        the target repo's commit after this step (the one holding the IR, when weights were committed).
    """
    first, repos = members[0]
    built = first.record
    head = seen.head if seen is not None else hub.files_or_none(repos.target)
    published = hub.target_record(repos.target, revision=head.sha) if head is not None else None
    if published is not None and published.target.repo != built.target.repo:
        raise Skip(
            f"{repos.target} holds an export of {published.target.repo}, not of {built.target.repo}: not "
            "overwritten (two targets map to one output repo)",
            subject=built.source.repo,
            stage=Stage.PUBLISH,
        )
    fresh = TargetRecord.from_build(built, [], card_fp)
    weights_current = (
        published is not None
        and head is not None
        and published.target_inputs() == fresh.target_inputs()
        and _as_recorded(hub, repos.target, head.sha, published)
    )
    target_record = published if published is not None and weights_current else fresh
    if list_new:
        for bundle, draft_repos in members:
            target_record = _listing(target_record, bundle.record.summary(draft_repos.draft), card_fp)
    else:
        target_record = target_record.model_copy(update={"card": fresh.card})
    if (
        published is not None
        and weights_current
        and published.draft_keys() == target_record.draft_keys()
        and published.card.template_fingerprint == card_fp
    ):
        log.step("%s is current", repos.target)
        return head.sha if head is not None else None  # weights_current implies a head
    folder = first.target_dir
    if not weights_current:  # the weights are committed: exactly the files the record lists
        listed = None if published is None else published.files if published.files is not None else TARGET_FILES
        _not_the_bots_repo(repos.target, head, listed, built.source.repo)
        check_folder(folder, _listed(target_record.files, repos.target), CARD_FILES, repos.target)
    record.write(target_record, folder)
    (folder / "README.md").write_text(render_target_card(target_record, target_repo=repos.target), encoding="utf-8")
    message = (
        _message("target", built.target, built.export.weight_format)
        if not weights_current
        else f"List {len(target_record.drafts)} validated draft(s) on the model card"
    )
    result = hub.publish_folder(
        repos.target,
        folder,
        message=message,
        private=private,
        only=CARD_FILES if weights_current else None,
        seen=head,
    )
    if result.commit:
        commits.append((repos.target, result.commit))
        log.step(
            "%s: commit %s (%s)",
            repos.target,
            result.commit[:7],
            "card and record" if weights_current else f"{len(result.files)} files",
        )
    if not weights_current:
        hub.tag(repos.target, f"src-{str(built.target.revision)[:7]}", result.commit)
    return result.commit or (head.sha if head is not None else None)


def _publish_draft(
    hub: Hub,
    bundle: Bundle,
    repos: Repos,
    commits: list[tuple[str, str]],
    private: bool,
    seen: tuple[RepoFiles | None, BuildRecord | None],
    pins: CardPins,
) -> None:
    head, published = seen
    built = bundle.record  # as the builder wrote it: its repos and card templates are these (`_refused_bundle`)
    listed = None if published is None else published.files.draft if published.files else DRAFT_PUBLISHED
    _not_the_bots_repo(repos.draft, head, listed, built.source.repo)
    folder = bundle.draft_dir
    check_folder(folder, _listed(built.files.draft if built.files else None, repos.draft), _DRAFT_RENDERED, repos.draft)
    record.write(built, folder)
    write_acceptance_chart(folder, built.validation)
    # The card cannot name the commit it is part of, so it names a tag made for this very record, set on that
    # commit below: the snippet downloads the draft files that were validated with the pinned target commit.
    pin = f"build-{hashlib.sha256((folder / PROVENANCE_FILE).read_bytes()).hexdigest()[:12]}"
    card = render_draft_card(built, install=pins.install, target_commit=pins.target_commit, draft_revision=pin)
    (folder / "README.md").write_text(card, encoding="utf-8")
    result = hub.publish_folder(
        repos.draft,
        folder,
        message=_message("draft", built.source, built.draft_weight_format),
        private=private,
        seen=head,
    )
    if result.commit:
        commits.append((repos.draft, result.commit))
        log.step("%s: commit %s (%d files)", repos.draft, result.commit[:7], len(result.files))
    hub.tag(repos.draft, f"src-{str(built.source.revision)[:7]}", result.commit)
    hub.tag(repos.draft, pin, result.commit or (head.sha if head is not None else None))


def _listing(target: TargetRecord, summary: DraftSummary, card_fp: str) -> TargetRecord:
    """The target record listing `summary`'s draft, and no other repo of its source (the one a format switch left
    behind)."""
    kept = [d for d in target.drafts if d.source != summary.source or d.repo == summary.repo]
    return target.model_copy(update={"drafts": kept}).with_draft(summary, card_fp)


def _as_recorded(hub: Hub, repo: str, commit: str, published: TargetRecord) -> bool:
    """Whether the target repo holds exactly the files its record lists; if not (edited outside the bot, or built
    before records listed files), its weights are committed again from this build."""
    if published.files is None:
        return False
    changed = differs_from_record(hub.listed_hashes(repo, commit), published.files, (*CARD_FILES, ".gitattributes"))
    if changed is None:
        # Files that match a record someone else rewrote are not the bot's: a card-only commit must not certify them.
        try:
            changed = why_not_the_bots(hub, repo, commit, published, hub.user())
        except BotError as error:
            changed = f"its history could not be read ({error.one_line()})"
    if changed is not None:
        log.step("%s changed outside the bot (%s): its files are published again from this build", repo, changed)
    return changed is None


def _listed(files: record.FileList | None, repo: str) -> record.FileList:
    """The files a record says a repo folder holds; a record without that list certifies nothing.

    Raises:
        Failure: the bundle's record lists no files (built by a bot before records listed them).
    """
    if files is None:
        raise Failure(f"the build record lists no file hashes for {repo}: not published", stage=Stage.PUBLISH)
    return files


def _message(role: str, ref: record.SourceRef, weight_format: str) -> str:
    """A weights commit's title; a target's starts with `EXPORT_COMMIT` (reuse reads the history by it)."""
    title = f"Export {role} {ref.repo}@{str(ref.revision)[:7]} to OpenVINO {weight_format} (dflash-bot)"
    assert role != "target" or title.startswith(EXPORT_COMMIT)
    return title
