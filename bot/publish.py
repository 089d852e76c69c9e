"""Publish a validated bundle: one commit per repo, card and provenance included, target first (DESIGN §7).

This stage holds the write token and never loads a checkpoint: it reads JSON, renders Markdown and uploads files.
Before writing it re-reads the Hub, so a stale bundle never overwrites newer work and a second publisher of the
same build reports "up-to-date". Every commit carries every file of the repo and `parent_commit`, so a crash or a
race leaves a repo at its previous commit or at the complete new one.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bot import log
from bot.bundle import PROVENANCE_FILE, read_provenance
from bot.card import render_draft_card, render_target_card, template_fingerprint
from bot.errors import Failure, Skip
from bot.hub import Hub, is_precondition_failed
from bot.plan import draft_output_repo, read_published, target_output_repo
from bot.recipe import Recipe
from bot.toolchain import tracked_versions

PUBLISHED, UP_TO_DATE, CARD_UPDATED = "published", "up-to-date", "card-updated"
_CARD_FILES = ("README.md", PROVENANCE_FILE)
_RACE_ATTEMPTS = 3


@dataclass(frozen=True)
class PublishResult:
    status: str  # published | up-to-date | card-updated
    draft_repo: str
    target_repo: str
    commits: dict[str, str] = field(default_factory=dict)  # repo -> new commit id


def same_build(published: dict, provenance: dict) -> bool:
    """The published repo already holds this build's inputs (source, target, recipe, toolchain, format)."""
    def key(p: dict) -> tuple:
        return (p.get("source", {}).get("revision"), p.get("target", {}).get("revision"),
                p.get("recipe_fingerprint"), p.get("draft", {}).get("format"),
                tracked_versions(p))
    return key(published) == key(provenance)


def _target_inputs(p: dict) -> tuple:
    return (p.get("target", {}).get("revision"), p.get("recipe_fingerprint"),
            tracked_versions(p))


def draft_summary(draft_repo: str, provenance: dict) -> dict:
    """How a draft fared against the target: a row of the target card."""
    validation = provenance["validation"]
    best = max(validation["runs"], key=lambda run: run["tokens_per_s"])
    return {"repo": draft_repo, "source": provenance["source"]["repo"],
            "source_revision": provenance["source"]["revision"], "lossless": validation["lossless"],
            "accept_length": validation["accept_length"],
            "recommended_num_assistant_tokens": validation["recommended_num_assistant_tokens"],
            "speedup": best["speedup"]}


def target_provenance(provenance: dict, drafts: list[dict], card_fingerprint: str) -> dict:
    keep = ("schema_version", "bot_version", "built_at", "target", "toolchain", "recipe", "recipe_fingerprint",
            "export")
    record = {k: provenance[k] for k in keep if k in provenance}
    record["inspect"] = {"target": provenance["inspect"]["target"]}
    record["drafts"] = drafts
    record["card"] = {"template_fingerprint": card_fingerprint}
    return record


def _merge_drafts(existing: list[dict], new: dict) -> list[dict]:
    return sorted([d for d in existing if d.get("repo") != new["repo"]] + [new], key=lambda d: d["repo"])


def _draft_keys(drafts: list[dict]) -> set[tuple]:
    """Which draft builds a target card lists; speed figures differ run to run and do not make a card stale."""
    return {(d.get("repo"), d.get("source_revision")) for d in drafts}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def publish_bundle(hub: Hub, bundle_root: Path, recipe: Recipe) -> PublishResult:
    """Publish one bundle folder (draft/, target/, openvino_export.json).

    Raises:
        Failure: the bundle failed a validation gate (never published), or the Hub refused the commits.
        Skip: the published repo already holds newer work than this bundle.
    """
    provenance = read_provenance(bundle_root)
    source = provenance["source"]["repo"]
    if provenance.get("status") != "validated":
        gates = "; ".join(provenance.get("failed_gates", [])) or "status " + str(provenance.get("status"))
        raise Failure(f"bundle did not pass validation, not published ({gates})", subject=source, stage="publish")
    if not source or not provenance["target"].get("repo"):
        raise Failure("bundle was built from local folders: there is no source repo to publish under",
                      subject=str(bundle_root), stage="publish")
    draft_repo = draft_output_repo(recipe, source)
    target_repo = target_output_repo(recipe, provenance["target"]["repo"])
    card_fp = template_fingerprint()

    commits: dict[str, str] = {}
    for attempt in range(1, _RACE_ATTEMPTS + 1):
        try:
            status = _publish_once(hub, bundle_root, provenance, draft_repo, target_repo, card_fp, commits,
                                   recipe.publish.private)
            return PublishResult(status, draft_repo, target_repo, commits)
        except Failure as error:
            if not is_precondition_failed(error) or attempt == _RACE_ATTEMPTS:
                raise
            # Another writer committed first: re-read the Hub and decide again (it may hold this very build).
            log.step("%s: lost a commit race (412), re-reading the Hub", source)
    raise AssertionError("unreachable")


def _publish_once(hub: Hub, bundle_root: Path, provenance: dict, draft_repo: str, target_repo: str, card_fp: str,
                  commits: dict[str, str], private: bool) -> str:
    source = provenance["source"]["repo"]
    published = read_published(hub, draft_repo)
    if published is not None:
        if same_build(published, provenance):
            if published.get("card", {}).get("template_fingerprint") == card_fp:
                log.step("%s already holds this build", draft_repo)
                return UP_TO_DATE
        elif published.get("built_at", "") > provenance.get("built_at", "") and \
                published.get("source", {}).get("revision") != provenance["source"]["revision"]:
            raise Skip(f"{draft_repo} already holds a newer build (source "
                       f"{str(published['source'].get('revision'))[:7]}); this bundle is stale", subject=source,
                       stage="publish")
    _publish_target(hub, bundle_root, provenance, draft_repo, target_repo, card_fp, commits, private)
    _publish_draft(hub, bundle_root, provenance, draft_repo, target_repo, card_fp, commits, private)
    return PUBLISHED


def _publish_target(hub: Hub, bundle_root: Path, provenance: dict, draft_repo: str, target_repo: str,
                    card_fp: str, commits: dict[str, str], private: bool) -> None:
    published = read_published(hub, target_repo)
    weights_current = published is not None and _target_inputs(published) == _target_inputs(provenance)
    drafts = _merge_drafts((published or {}).get("drafts", []) if weights_current else [],
                           draft_summary(draft_repo, provenance))
    record = target_provenance(published if weights_current else provenance, drafts, card_fp)
    if weights_current and _draft_keys(published.get("drafts", [])) == _draft_keys(drafts) and \
            published.get("card", {}).get("template_fingerprint") == card_fp:
        log.step("%s is current", target_repo)
        return
    folder = bundle_root / "target"
    _write_json(folder / PROVENANCE_FILE, record)
    (folder / "README.md").write_text(render_target_card(record, target_repo=target_repo, drafts=drafts),
                                      encoding="utf-8")
    result = hub.publish_folder(target_repo, folder, message=_message("target", provenance["target"]),
                                private=private, only=_CARD_FILES if weights_current else None)
    if result.commit:
        commits[target_repo] = result.commit
        log.step("%s: commit %s (%s)", target_repo, result.commit[:7],
                 "card and provenance" if weights_current else f"{len(result.files)} files")
    hub.tag(target_repo, f"src-{provenance['target']['revision'][:7]}", result.commit)


def _publish_draft(hub: Hub, bundle_root: Path, provenance: dict, draft_repo: str, target_repo: str,
                   card_fp: str, commits: dict[str, str], private: bool) -> None:
    folder = bundle_root / "draft"
    record = {**provenance, "card": {"template_fingerprint": card_fp},
              "repos": {"draft": draft_repo, "target": target_repo}}
    _write_json(folder / PROVENANCE_FILE, record)
    (folder / "README.md").write_text(render_draft_card(record, draft_repo=draft_repo, target_repo=target_repo),
                                      encoding="utf-8")
    result = hub.publish_folder(draft_repo, folder, message=_message("draft", provenance["source"]),
                                private=private)
    if result.commit:
        commits[draft_repo] = result.commit
        log.step("%s: commit %s (%d files)", draft_repo, result.commit[:7], len(result.files))
    hub.tag(draft_repo, f"src-{provenance['source']['revision'][:7]}", result.commit)


def refresh_cards(hub: Hub, published: dict, recipe: Recipe) -> PublishResult:
    """Re-render the draft card from its published provenance after a template change: no rebuild, no weights."""
    source = published["source"]["repo"]
    draft_repo = draft_output_repo(recipe, source)
    target_repo = target_output_repo(recipe, published["target"]["repo"])
    card_fp = template_fingerprint()
    record = {**published, "card": {"template_fingerprint": card_fp}}
    commits: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dflash-bot-card-") as tmp:
        folder = Path(tmp)
        _write_json(folder / PROVENANCE_FILE, record)
        (folder / "README.md").write_text(render_draft_card(record, draft_repo=draft_repo, target_repo=target_repo),
                                          encoding="utf-8")
        result = hub.publish_folder(draft_repo, folder, message="Update model card", private=recipe.publish.private,
                                    only=_CARD_FILES)
        if result.commit:
            commits[draft_repo] = result.commit
        target = read_published(hub, target_repo)
        if target is not None and target.get("card", {}).get("template_fingerprint") != card_fp:
            target = {**target, "card": {"template_fingerprint": card_fp}}
            _write_json(folder / PROVENANCE_FILE, target)
            (folder / "README.md").write_text(
                render_target_card(target, target_repo=target_repo, drafts=target.get("drafts", [])),
                encoding="utf-8")
            result = hub.publish_folder(target_repo, folder, message="Update model card", private=recipe.publish.private,
                                        only=_CARD_FILES)
            if result.commit:
                commits[target_repo] = result.commit
    return PublishResult(CARD_UPDATED, draft_repo, target_repo, commits)


def _message(role: str, ref: dict) -> str:
    return f"Export {role} {ref['repo']}@{str(ref['revision'])[:7]} to OpenVINO int4 (dflash-bot)"
