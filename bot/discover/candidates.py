"""Find candidate drafts on the Hub with few requests, and resolve what a build needs before any download.

`list_sources` costs one listing request per recipe source and classifies by architecture from the listing
itself. `resolve` runs only for repos the plan decided to build: it reads `config.json` and `README.md`, finds and
cross-checks the target (docs/design.md §4), and checks sizes and weight formats from file metadata, all before a single
weight byte is downloaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ConfigDict

from bot.core import draft_formats, log, naming, profiles
from bot.core.errors import Skip, Stage
from bot.core.hub_records import RepoFiles, RepoListing
from bot.core.recipe import Recipe
from bot.core.record import Approval
from bot.core.toolchain import Toolchain
from bot.core.watch import SourceQuery
from bot.discover.checkpoints import (
    DSPARK_ARCHITECTURES,
    LFM2_DSPARK_ARCHITECTURE,
    DraftSpec,
    TargetSpec,
    classify_draft,
    cross_check,
    load_config,
    parse_config_text,
    read_target,
    require_exportable,
)
from bot.discover.fetch import is_allowed
from bot.discover.source_card import SourceCard, read_source_card
from bot.discover.trust import Trust, exclusion
from bot.discover.weights import check_weights, require_safetensors
from bot.hub.client import Hub

_CARD_TARGET = re.compile(r"in conjunction with the target model\s*[\[`*]*([\w.-]+/[\w.-]+)", re.IGNORECASE)
_DFLASH_NAME = re.compile(r"^(?P<target>.+?)-DFlash2?(?:-b\d+)?(?:-.*)?$", re.IGNORECASE)
_DSPARK_NAME = re.compile(r"^(?:dspark|dflash)_(?P<target>[a-z0-9_.]+?)_block\d+$", re.IGNORECASE)


@dataclass(frozen=True)
class SkipRecord:
    """A source the run looked at and will not build, with the reason shown to maintainers."""

    repo_id: str
    revision: str | None
    reason: str
    stage: Stage
    kind: str | None = None  # what the listing's config shows (`kind_from_listing`), for the radar's page
    listing: RepoListing | None = None  # a not-approved source's listing: examined if something of it is published


@dataclass(frozen=True)
class Candidate:
    """A draft to build, with its target pinned: everything discovery learned before a weight byte moved.

    The build verifies the downloaded files against these facts instead of deriving them again. A planned build
    (`bot.plan.job.BuildJob`) holds its candidate as it is, and hands it on to the build job as JSON.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")  # a build job's JSON with a field discovery never writes

    repo_id: str | None  # None for a build from local folders
    revision: str | None
    kind: str
    draft_format: str
    target_repo: str | None
    target_revision: str | None
    target_model_type: str
    target_is_vlm: bool
    draft_bytes: int  # safetensors bytes (what sizing goes by)
    target_bytes: int
    profile: str  # the toolchain profile the target family builds in
    draft_files: tuple[str, ...] = ()  # exactly what the build downloads (top-level, allowed, size-checked)
    target_files: tuple[str, ...] = ()
    download_bytes: int = 0  # every file downloaded, weights or not: the size cap and the disk check
    card_notes: tuple[str, ...] = ()  # what was dropped from the draft's card and why (bot.discover.source_card)
    # Who approved the build (`bot.discover.trust`): the recipe's trusted authors, or a maintainer's dispatch.
    approved_by: Approval = "recipe"
    target_quantization: str | None = None  # a pre-quantised target's method: sizing dequantises its bytes

    @property
    def weight_bytes(self) -> int:
        return self.draft_bytes + self.target_bytes


def kind_from_listing(listing: RepoListing) -> str | None:
    """The draft kind the listing's config subset shows, or None when the listing carries no architecture."""
    if not listing.architectures:
        return None
    architecture = listing.architectures[0]
    if architecture in DSPARK_ARCHITECTURES or architecture == LFM2_DSPARK_ARCHITECTURE:
        return "dspark"
    if architecture == "DFlash2DraftModel":
        return "dflash2"
    if architecture == "DFlashDraftModel":
        return "dflash" if listing.model_type in (None, "qwen3") else "dflash-other-base"
    return "unknown"


def list_sources(hub: Hub, recipe: Recipe, trust: Trust | None = None) -> tuple[list[RepoListing], list[SkipRecord]]:
    """Every listed repo worth a closer look, and skip records for the ones the listing already rules out.

    Trusted authors are listed whole (`WatchRules.authored_queries`: every page), so no number of other repos can
    push their drafts out; the radar (`WatchRules.radar_queries`, the whole Hub) lists the newest `max_candidates`
    of each search apart, so one search's flood never starves another. The listing rules out what the recipe
    excludes (`watch.exclude`, matched as the Hub matches ids; its kinds), the bot's own kind of output
    (`excluded`), and what nobody approved (`bot.discover.trust`: seen, not approved, with its listed kind). A
    draft's exportability is not judged from the listing's architecture: a speculators-format draft borrows the
    architecture names of the layouts it repackages, so only its `config.json` names its layout (`resolve`, one
    read, remembered by the status memory).

    Args:
        trust: this run's approvals (default: the recipe's, no dispatch).
    """
    trust = trust or Trust.of(recipe)
    seen: dict[str, RepoListing] = {}
    watch = recipe.watch
    queries: list[tuple[SourceQuery, int | None]] = [(query, None) for query in watch.authored_queries()]
    queries += [(query, watch.max_candidates) for query in watch.radar_queries()]
    for query, limit in queries:
        for listing in hub.list_models(
            author=query.author, search=query.search, filter_tags=query.filter_tags, limit=limit
        ):
            if excluded(listing.repo_id, recipe) is None:
                seen.setdefault(listing.repo_id.lower(), listing)
    keep, skips = [], []
    for listing in seen.values():
        skip = _ruled_out(listing, recipe, trust)
        if skip is None:
            keep.append(listing)
        else:
            skips.append(skip)
    return keep, skips


def _ruled_out(listing: RepoListing, recipe: Recipe, trust: Trust) -> SkipRecord | None:
    """Why the listing alone rules a repo out (None: examine it): excluded, not approved, or a kind not watched."""
    repo, kind = listing.repo_id, kind_from_listing(listing)
    if reason := exclusion(repo, recipe.watch.exclude):
        return SkipRecord(repo, listing.sha, reason, Stage.DISCOVER)
    if trust.approval(repo) is None:
        return SkipRecord(repo, listing.sha, trust.draft_reason(repo), Stage.APPROVE, kind=kind, listing=listing)
    if kind is not None and kind not in recipe.watch.kinds:
        reason = f"{kind} drafts are not in the recipe's watch.kinds {recipe.watch.kinds}"
        return SkipRecord(repo, listing.sha, reason, Stage.DISCOVER)
    return None


OUTPUT_SUFFIX = "-ov"  # every OpenVINO export on the Hub (the bot's own, OpenVINO's, anyone's) ends so


def excluded(repo_id: str, recipe: Recipe) -> str | None:
    """Why a listed repo is no source at all (None: it may be one): the bot's own output namespace, and OpenVINO
    exports anywhere (`*-ov`), which a Hub-wide search for "dflash" finds beside the drafts they were made from."""
    namespace, _, name = repo_id.partition("/")
    if namespace.lower() == recipe.publish.namespace.lower():
        return f"in the bot's own output namespace {recipe.publish.namespace}"
    if name.lower().endswith(OUTPUT_SUFFIX):
        return f"an OpenVINO export (*{OUTPUT_SUFFIX}), not a source checkpoint"
    return None


def resolve_target_name(repo_id: str, card: SourceCard, recipe: Recipe) -> tuple[str, str]:
    """The target repo id and the rule that named it, trying the recipe's order (docs/design.md §4).

    `card` is the draft's validated card: its `base_models` are the Hub's `cardData.base_model` when the listing
    carried it, so the bot resolves the target the Hub shows. Whatever a rule names is checked as a repo id
    (`bot.core.naming.validate_repo_id`) before anything asks the Hub about it.

    Raises:
        Skip: no rule names a target, or the one that does names something that is not a repo id.
    """
    target, how = _target_name(repo_id, card, recipe)
    try:
        return naming.validate_repo_id(target, what=f"the target ({how})"), how
    except Skip as skip:
        raise skip.at(subject=repo_id, stage=Stage.DISCOVER) from None


def _target_name(repo_id: str, card: SourceCard, recipe: Recipe) -> tuple[str, str]:
    name = repo_id.split("/")[-1]
    for rule in recipe.targets.order:
        if rule == "map" and repo_id in recipe.targets.map:
            return recipe.targets.map[repo_id], "recipe map"
        if rule == "card_metadata":
            base = next((model for model in card.base_models if "/" in model), None)
            if base:
                return base, "card base_model"
        if rule == "card_text":
            match = _CARD_TARGET.search(card.text)
            if match:
                return match.group(1).rstrip(".,)"), "card text"
        if rule == "repo_name":
            if match := _DSPARK_NAME.match(name):
                parts = match.group("target").split("_")
                target = "-".join([parts[0].capitalize(), *[p.upper() for p in parts[1:]]])
                return f"{_namespace_for(target, recipe)}/{target}", "repo name"
            if (match := _DFLASH_NAME.match(name)) and match.group("target"):
                target = match.group("target")
                return f"{_namespace_for(target, recipe)}/{target}", "repo name"
    raise Skip(
        "cannot tell which target this draft is for: add it to the recipe's targets.map",
        subject=repo_id,
        stage=Stage.DISCOVER,
    )


def _namespace_for(target_name: str, recipe: Recipe) -> str:
    lowered = target_name.lower()
    for prefix, namespace in recipe.targets.namespace_by_prefix.items():
        if lowered.startswith(prefix.lower()):
            return namespace
    return recipe.targets.default_namespace


def resolve(
    hub: Hub, listing: RepoListing, recipe: Recipe, *, profiles_dir: Path | None = None, trust: Trust | None = None
) -> Candidate:
    """Read the draft's config and card, find and cross-check its target, and check sizes: no weights downloaded.

    The draft must be approved (`bot.discover.trust`) before anything is read. A layout no toolchain can export
    yet is skipped right after its config and card are read (two requests), naming its layout, the field that
    decided it, the capability it waits for and its target (`draft_formats.skip_reason`); the target's author must
    be trusted (or the draft dispatched) before the target is looked up.

    `profiles_dir` is where profile environments live (`Settings.profiles_dir`, for `planned_toolchain`); `trust`
    this run's approvals (default: the recipe's, no dispatch).

    Raises:
        Skip: not approved (at `Stage.APPROVE`); unsupported, broken, gated or oversized source, or a target that
            does not fit (a reason about the target names the target repo).
    """
    repo, revision = listing.repo_id, listing.sha
    trust = trust or Trust.of(recipe)
    approved_by = trust.require_draft(repo)
    revision = revision or hub.repo_files(repo).sha
    config_bytes = hub.read_file(repo, "config.json", revision)
    if config_bytes is None:
        raise Skip("no config.json in the repo", subject=repo, stage=Stage.DISCOVER)
    draft = classify_draft(parse_config_text(config_bytes, subject=repo), subject=repo)
    card = read_source_card(
        hub.read_file(repo, "README.md", revision), repo_id=repo, hub_card_data=listing.card_data or None
    )
    for note in card.notes:
        log.step("%s: %s", repo, note)
    named = _named_target(repo, draft, card, recipe)
    # The layout first: what it waits for is the map's answer, whatever the target turns out to be.
    require_exportable(
        draft, planned_toolchain("", subject=repo, profiles_dir=profiles_dir), subject=repo, target=named
    )
    if draft.kind not in recipe.watch.kinds:
        raise Skip(
            f"{draft.kind} drafts are not in the recipe's watch.kinds {recipe.watch.kinds}",
            subject=repo,
            stage=Stage.DISCOVER,
        )
    target_repo, _how = resolve_target_name(repo, card, recipe)
    trust.require_target(repo, target_repo)

    draft_files = hub.repo_files(repo, revision)
    _check_file_names(repo, draft_files.sizes)
    target_files, target = _read_target(hub, repo, target_repo)
    try:
        families = {family for profile in profiles.load_profiles().profiles for family in profile.model_types}
        if target.model_type not in families:
            raise Skip(f"no toolchain profile lists it among its target families ({', '.join(sorted(families))})")
        toolchain = planned_toolchain(target.model_type, subject=target_repo, profiles_dir=profiles_dir)
    except Skip as skip:
        # A draft over a target family no profile exports (gpt-oss, LLaMA, LFM2): the map names the family.
        reason = draft_formats.skip_reason(
            draft.layout,
            target_repo,
            f"target model_type '{target.model_type}' decided it: {skip.message}",
            f"a toolchain profile for {target.model_type or 'this'} targets (model_types in toolchains/profiles.yaml)",
        )
        raise Skip(reason, subject=repo, stage=Stage.CLASSIFY) from None
    draft_format = require_exportable(draft, toolchain, subject=repo, target=target_repo)
    cross_check(draft, target, subject=repo, target_name=target_repo)
    draft_fetch = select_files(draft_files.sizes, subject=repo)
    target_fetch = select_files(target_files.sizes, subject=f"target {target_repo}")
    total = sum(draft_fetch.values()) + sum(target_fetch.values())
    check_size(total, 0, recipe, subject=repo, stage=Stage.DISCOVER)
    return Candidate(
        repo_id=repo,
        revision=revision,
        kind=draft.kind,
        draft_format=draft_format,
        target_repo=target_repo,
        target_revision=target_files.sha,
        target_model_type=target.model_type,
        target_is_vlm=target.is_vlm,
        draft_bytes=_safetensors_bytes(draft_fetch),
        target_bytes=_safetensors_bytes(target_fetch),
        profile=toolchain.profile,
        draft_files=tuple(sorted(draft_fetch)),
        target_files=tuple(sorted(target_fetch)),
        download_bytes=total,
        card_notes=card.notes,
        approved_by=approved_by,
        target_quantization=target.quantization,
    )


def _read_target(hub: Hub, repo: str, target_repo: str) -> tuple[RepoFiles, TargetSpec]:
    """The target's file list at its head and its config (two requests).

    Raises:
        Skip: for the draft `repo`, naming the target and what is wrong with it.
    """
    try:
        target_files = hub.repo_files(target_repo)
        _check_file_names(target_repo, target_files.sizes)
        target_bytes = hub.read_file(target_repo, "config.json", target_files.sha)
        if target_bytes is None:
            raise Skip("no config.json in the repo", subject=target_repo, stage=Stage.DISCOVER)
        return target_files, read_target(parse_config_text(target_bytes, subject=target_repo), subject=target_repo)
    except Skip as skip:
        raise Skip(f"target {target_repo}: {skip.message}", subject=repo, stage=skip.stage) from None


def _named_target(repo: str, draft: DraftSpec, card: SourceCard, recipe: Recipe) -> str | None:
    """The target a skip reason names: the recipe's rules, else the config's own (speculators' verifier); None
    when neither names one (a skip of the layout needs no target, so this never raises)."""
    try:
        return resolve_target_name(repo, card, recipe)[0]
    except Skip:
        pass
    try:
        return naming.validate_repo_id(draft.target_hint, what="the verifier") if draft.target_hint else None
    except Skip:
        return None


# Real non-weight files are a few MB (the largest, a big-vocabulary tokenizer.json, ~35 MB).
MAX_SMALL_FILE_BYTES = 64 * 1024 * 1024


def select_files(sizes: dict[str, int], *, subject: str) -> dict[str, int]:
    """The files a build downloads: top-level configs, tokenizer files, the card and safetensors; nothing in a
    subfolder, no code, no pickle (`bot.discover.fetch.is_allowed`), and no non-weight file over its size limit.

    Raises:
        Skip: a non-weight file the build needs is over `MAX_SMALL_FILE_BYTES`.
    """
    chosen = {name: size for name, size in sizes.items() if is_allowed(name)}
    oversized = sorted(
        n for n, size in chosen.items() if not n.endswith(".safetensors") and size > MAX_SMALL_FILE_BYTES
    )
    if oversized:
        raise Skip(
            f"{oversized[0]} is {chosen[oversized[0]]} bytes, over the {MAX_SMALL_FILE_BYTES}-byte limit for "
            "a non-weight file",
            subject=subject,
            stage=Stage.DISCOVER,
        )
    return chosen


def classify_folders(
    draft_dir: Path,
    target_dir: Path,
    recipe: Recipe,
    *,
    toolchain: Toolchain | None = None,
    profiles_dir: Path | None = None,
) -> Candidate:
    """Discovery for a pair of local folders (`dflash-bot build --draft --target`): the same checks, from disk.

    Args:
        toolchain: the toolchain to check against (default: the target family's planned profile).
        profiles_dir: where profile environments live (`Settings.profiles_dir`, for `planned_toolchain`).

    Raises:
        Skip: naming the first defect of the draft, the target or the pair.
    """
    draft_name, target_name = draft_dir.name, target_dir.name
    draft = classify_draft(load_config(draft_dir, subject=draft_name), subject=draft_name)
    target = read_target(load_config(target_dir, subject=target_name), subject=target_name)
    toolchain = toolchain or planned_toolchain(target.model_type, subject=target_name, profiles_dir=profiles_dir)
    _check_transformers(target.model_type, toolchain, subject=target_name)
    draft_format = require_exportable(draft, toolchain, subject=draft_name)
    cross_check(draft, target, subject=draft_name, target_name=target_name)
    sizes = check_size(
        check_weights(draft_dir, subject=draft_name),
        check_weights(target_dir, subject=target_name),
        recipe,
        subject=draft_name,
        stage=Stage.CLASSIFY,
    )
    return Candidate(
        repo_id=None,
        revision=None,
        kind=draft.kind,
        draft_format=draft_format,
        target_repo=None,
        target_revision=None,
        target_model_type=target.model_type,
        target_is_vlm=target.is_vlm,
        draft_bytes=sizes[0],
        target_bytes=sizes[1],
        profile=toolchain.profile,
        target_quantization=target.quantization,
    )


def planned_toolchain(model_type: str, *, subject: str, profiles_dir: Path | None = None):
    """The toolchain profile that builds this target family, without creating its environment (the capabilities
    recorded in its environment under `profiles_dir`, if any: `bot.core.profiles.planned_toolchain`).

    Raises:
        Skip: no profile covers the model type, or its transformers range excludes the profile's pin.
    """
    try:
        toolchain = profiles.planned_toolchain(model_type or None, root=profiles_dir)
    except Skip as skip:
        raise skip.at(subject=subject) from None
    _check_transformers(model_type, toolchain, subject=subject)
    return toolchain


def _check_transformers(model_type: str, toolchain: Toolchain, *, subject: str) -> None:
    """optimum-intel gates model types by a transformers range pip does not enforce: a mismatch is a skip naming
    the range, found here rather than as an ImportError deep inside the export."""
    profiles.check_transformers(
        model_type, toolchain.versions.get("transformers", "not installed"), profile=toolchain.profile, subject=subject
    )


def check_size(draft_bytes: int, target_bytes: int, recipe: Recipe, *, subject: str, stage: Stage) -> tuple[int, int]:
    """The recipe's own cap on draft + target bytes, when it sets one (the one definition of the size check).
    Unset, the runner classes decide: a pair no class takes is skipped at planning naming the class it needs
    (`bot.plan.sizing`), and a build checks its free disk before downloading (`bot.discover.fetch`).

    Raises:
        Skip: over `watch.max_checkpoint_bytes`.
    """
    total = draft_bytes + target_bytes
    if recipe.watch.max_checkpoint_bytes is not None and total > recipe.watch.max_checkpoint_bytes:
        raise Skip(
            f"draft + target weights are {total} bytes, over the recipe's max_checkpoint_bytes "
            f"{recipe.watch.max_checkpoint_bytes}",
            subject=subject,
            stage=stage,
        )
    return draft_bytes, target_bytes


def _safetensors_bytes(sizes: dict[str, int]) -> int:
    """Safetensors bytes of a file selection."""
    return sum(size for name, size in sizes.items() if name.endswith(".safetensors") and "/" not in name)


MAX_REPO_FILES = 5000
MAX_NAME_BYTES = 255


def _check_file_names(repo: str, sizes: dict[str, int]) -> None:
    """Refuse hostile listings before anything is downloaded: unsafe or absurd names, huge file counts.

    Weights must be safetensors: a pickle is never downloaded, let alone loaded.
    """
    if len(sizes) > MAX_REPO_FILES:
        raise Skip(
            f"repo lists {len(sizes)} files, over the limit of {MAX_REPO_FILES}", subject=repo, stage=Stage.DISCOVER
        )
    for name in sizes:
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or "\\" in name or any(ord(c) < 32 for c in name):
            raise Skip(f"repo lists a file with an unsafe path: {name[:80]!r}", subject=repo, stage=Stage.DISCOVER)
        if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in parts):
            raise Skip(
                f"repo lists a file name over {MAX_NAME_BYTES} bytes: {name[:60]!r}...",
                subject=repo,
                stage=Stage.DISCOVER,
            )
    require_safetensors(sizes, where="repo", subject=repo, stage=Stage.DISCOVER)
