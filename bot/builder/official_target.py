"""Serve a group from an official target IR: download it, hold it to the target IR rules, or say why not.

The plan pinned an official repo for the group's target (`bot.plan.official`). Before the source target is
downloaded, the builder downloads that repo's files (each checked against the Hub's hash) and the source target's
config, tokenizer files and card (small), and checks what a DFlash draft needs of its target:

- the same model: the official `config.json` gives the source target's dimensions (`TargetSpec`);
- the same tokenizer: the vocabulary, merges and added tokens equal the source target's
  (`tokenizer_fingerprints`: parsed, so a re-serialised `tokenizer.json` still compares equal);
- SDPA→PagedAttention converts it to one PagedAttention op per attention layer, and its
  `hidden_states_decoder_layers` annotation covers every layer the group's drafts tap. GenAI adds the hidden-state
  output itself when it loads the pair, from that annotation (2026.4.1 falls back to an Eagle3 pattern search when
  it is missing; later releases require it), so an IR without it is refused rather than changed: the card points
  users to the official repo as it is (`bot.builder.check_ir.inspect_target`, in a sandboxed child).

When all hold, the group is validated against it with the same gates and no target is exported or published
(`OfficialCheck.ir`); otherwise the downloaded files are removed, the target is exported as usual and the record
says why the official one did not serve (`OfficialCheck.record`). The official IR is untrusted input like any
checkpoint: it is parsed by OpenVINO only in the inspection and validation children.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.builder.bundle import local_path_markers
from bot.builder.inspect_child import inspect_target_in_child
from bot.core import log
from bot.core.errors import BotError, Failure, Stage
from bot.core.hashes import hash_file, write_manifest
from bot.core.recipe import Recipe
from bot.core.record import FileDigest, FileList, OfficialTarget
from bot.core.record_checks import TargetInspect
from bot.core.settings import Settings
from bot.discover.candidates import MAX_SMALL_FILE_BYTES, Candidate
from bot.discover.checkpoints import DraftSpec, TargetSpec, classify_draft, load_config, read_target
from bot.discover.source_card import card_license
from bot.hub.client import Hub
from bot.hub.download import Download
from bot.plan.official import IR_FILE, OfficialRepo
from bot.plan.sizing import local_runner

# The source target's files the check reads: its config and card, and whatever holds its vocabulary.
_SOURCE_FILES = ("config.json", "README.md", "tokenizer_config.json")
_VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model", "vocab.txt", "*.tiktoken")
# The Hub keeps every file over 10 MiB in LFS, where it lists the sha256; smaller ones may be listed by git blob id.
_REGULAR_FILE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class OfficialIr:
    """The official target IR a group is validated against, and what its record says about it.

    Attributes:
        path: the downloaded repo folder (the group's target IR folder).
        files: every file downloaded from it, as checked against the Hub (the record's `files.target`: what
            `dflash-bot try` downloads again).
        sources: the source target's files the check compared it with (the record's `files.target_source`).
        license: the source target's card license (the target's license is the model's, whoever exported it).
        inspection: the target IR check, with every tapped layer of the group's drafts.
    """

    record: OfficialTarget
    path: Path
    files: FileList
    sources: FileList
    license: dict[str, str | None]
    inspection: TargetInspect

    @property
    def short(self) -> str:
        return f"{self.record.repo}@{self.record.revision[:7]}"


@dataclass(frozen=True)
class OfficialCheck:
    """What the builder found of the group's official target: the IR to use, or None and the record's reason."""

    record: OfficialTarget
    ir: OfficialIr | None


def check_official(
    reader: Hub,
    official: OfficialRepo,
    candidate: Candidate,
    drafts: Sequence[Path],
    folder: Path,
    *,
    recipe: Recipe,
    settings: Settings,
) -> OfficialCheck:
    """Download the official target and hold it to the target IR rules; never raises: a refusal is a result.

    Args:
        reader: the builder's Hub (read token only).
        official: the repo and commit the plan pinned, and the files to download.
        candidate: the group's first candidate (the source target repo, revision and files).
        drafts: the group's downloaded draft folders (their configs name the target layers to tap).
        folder: the group's download folder (the official files go to `official-target/` in it, removed when
            refused).
        recipe: the validation time limit for the inspection child.
        settings: the children's OS confinement.

    Returns:
        The check: `ir` set when the official target serves, else `record.reason` says why not.
    """
    dest = folder / "official-target"
    with log.group(f"official target {official.short}"):
        try:
            ir = _serve(reader, official, candidate, drafts, dest, folder, recipe=recipe, settings=settings)
        except BotError as error:
            reason = error.message
            for marker in local_path_markers(folder):
                reason = reason.replace(marker, "…")
            log.step("%s: not used, the target is exported: %s", official.short, reason)
            shutil.rmtree(dest, ignore_errors=True)
            refused = OfficialTarget(repo=official.repo, revision=official.revision, used=False, reason=reason[:300])
            return OfficialCheck(record=refused, ir=None)
    log.step(
        "%s: serves as the target (%d PagedAttention ops, hidden states of layers %s annotated): no target export",
        ir.short,
        ir.inspection.paged_attention_ops,
        ir.inspection.hidden_state_layers,
    )
    return OfficialCheck(record=ir.record, ir=ir)


def _serve(
    reader: Hub,
    official: OfficialRepo,
    candidate: Candidate,
    drafts: Sequence[Path],
    dest: Path,
    folder: Path,
    *,
    recipe: Recipe,
    settings: Settings,
) -> OfficialIr:
    """The checks of `check_official`, in order of cost: the configs and tokenizers first (kilobytes), then the
    IR (gigabytes at real sizes) and its inspection.

    Raises:
        BotError: a download failed, or a rule does not hold (the message says which).
    """
    source = _download_source(reader, candidate, folder / "official-source")
    small = [name for name in official.files if not IR_FILE.fullmatch(name)]
    configs = reader.download(official.repo, official.revision, dest, small)
    spec = same_model(read_target(load_config(source.path)), read_target(load_config(dest, subject=official.repo)))
    compare_tokenizers(source.path, dest)
    irs = reader.download(official.repo, configs.revision, dest, [name for name in official.files if name not in small])
    downloaded = dataclasses.replace(irs, files={**configs.files, **irs.files})
    write_manifest(dest, downloaded.files)  # every file of the folder, as both downloads verified them
    specs = _draft_specs(drafts)
    layers = tuple(sorted({layer for draft in specs for layer in draft.target_layer_ids}))
    inspection = inspect_target_in_child(
        dest,
        spec,
        dataclasses.replace(specs[0], target_layer_ids=layers),
        work=folder / "inspect-official",
        timeout_s=recipe.validation.timeout_s,
        memory_budget_bytes=local_runner(folder).max_memory_bytes,
        layers=settings.sandbox_layers,
    )
    return OfficialIr(
        record=OfficialTarget(repo=official.repo, revision=downloaded.revision, used=True),
        path=dest,
        files=downloaded_files(downloaded),
        sources={name: FileDigest(sha256=f.sha256, size=f.size) for name, f in source.files.items()},
        license={
            key: value if isinstance(value, str) else None
            for key, value in card_license(source.path, repo_id=candidate.target_repo).items()
        },
        inspection=inspection,
    )


def _draft_specs(drafts: Sequence[Path]) -> list[DraftSpec]:
    """The configs of the group's drafts that classify (a broken one fails its own verification later).

    Raises:
        Failure: none of them does.
    """
    specs = []
    for path in drafts:
        try:
            specs.append(classify_draft(load_config(path)))
        except BotError:
            continue
    if not specs:
        raise Failure("no draft config names the target layers to tap", stage=Stage.VERIFY)
    return specs


def _download_source(reader: Hub, candidate: Candidate, dest: Path) -> Download:
    """The source target's config, card and tokenizer files at the pinned revision (no weights)."""
    assert candidate.target_repo and candidate.target_revision  # a planned build pins both (BuildJob)
    wanted = [
        name
        for name in candidate.target_files
        if name in _SOURCE_FILES or any(fnmatch.fnmatch(name, pattern) for pattern in _VOCABULARY_FILES)
    ]
    return reader.download(candidate.target_repo, candidate.target_revision, dest, wanted)


def same_model(source: TargetSpec, official: TargetSpec) -> TargetSpec:
    """The official IR's target spec, when its config describes the source target's model.

    Raises:
        Failure: a dimension differs (another model, or another size of the family).
    """
    differ = [
        f"{field.name} {getattr(official, field.name)} (the source target has {getattr(source, field.name)})"
        for field in dataclasses.fields(TargetSpec)
        if field.name != "architecture" and getattr(official, field.name) != getattr(source, field.name)
    ]
    if differ:
        raise Failure(f"its config is not the source target's: {'; '.join(differ)}", stage=Stage.VERIFY)
    return official


def compare_tokenizers(source: Path, official: Path) -> None:
    """Hold the official tokenizer files to the source target's: the same vocabulary in every file both have.

    Raises:
        Failure: no vocabulary file in common, one that cannot be read, or one whose vocabulary differs.
    """
    ours, theirs = tokenizer_fingerprints(source), tokenizer_fingerprints(official)
    common = sorted(set(ours) & set(theirs))
    if not common:
        raise Failure(
            f"no tokenizer file to compare with the source target's (it has {sorted(theirs) or 'none'}, the source "
            f"{sorted(ours) or 'none'})",
            stage=Stage.VERIFY,
        )
    differ = [name for name in common if ours[name] != theirs[name]]
    if differ:
        raise Failure(
            f"its tokenizer is not the source target's ({', '.join(differ)}: another vocabulary, merges or added "
            "tokens)",
            stage=Stage.VERIFY,
        )


def tokenizer_fingerprints(folder: Path) -> dict[str, str]:
    """file name -> hash of the vocabulary it holds, for each vocabulary file in `folder`.

    `tokenizer.json` counts by its model type, vocabulary, merges (either spelling) and added tokens (id and text),
    `vocab.json` by its parsed mapping, `merges.txt` by its merge lines; anything else by its bytes. Formatting and
    the keys an exporter adds on saving do not count.

    Raises:
        Failure: a file is oversized or not the JSON its name says.
    """
    prints = {}
    for path in sorted(folder.iterdir()):
        if not any(fnmatch.fnmatch(path.name, pattern) for pattern in _VOCABULARY_FILES) or not path.is_file():
            continue
        if path.stat().st_size > MAX_SMALL_FILE_BYTES:
            raise Failure(f"{path.name} is over the {MAX_SMALL_FILE_BYTES}-byte limit", stage=Stage.VERIFY)
        payload: Any
        if path.name == "tokenizer.json":
            payload = _tokenizer_vocabulary(path)
        elif path.name == "vocab.json":
            payload = _json(path)
        elif path.name == "merges.txt":
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            payload = [line for line in lines if line.strip() and not line.startswith("#version")]
        else:
            payload = hash_file(path).file.sha256
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        prints[path.name] = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    return prints


def _tokenizer_vocabulary(path: Path) -> dict[str, Any]:
    """What decides the token ids in a `tokenizer.json`.

    Raises:
        Failure: it is not a tokenizers JSON object.
    """
    data = _json(path)
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise Failure("tokenizer.json holds no tokenizer model", stage=Stage.VERIFY)
    merges = model.get("merges") or []
    added = data.get("added_tokens") or []
    if not isinstance(merges, list) or not isinstance(added, list):
        raise Failure("tokenizer.json's merges or added tokens are not lists", stage=Stage.VERIFY)
    return {
        "type": model.get("type"),
        "vocab": model.get("vocab"),
        "merges": [" ".join(map(str, merge)) if isinstance(merge, list) else merge for merge in merges],
        "added": sorted(
            (str(token.get("id")), str(token.get("content"))) for token in added if isinstance(token, dict)
        ),
    }


def _json(path: Path) -> Any:
    """A JSON file of an untrusted repo (size-checked by the caller).

    Raises:
        Failure: not JSON (or nested or numbered beyond what the parser takes).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise Failure(f"{path.name} is not readable JSON", stage=Stage.VERIFY) from None


def downloaded_files(downloaded: Download) -> FileList:
    """Each downloaded file as a record lists it: its verified sha256 and size, and the git blob id of a file small
    enough to be stored without LFS (what the Hub lists for it, `bot.core.record_files`)."""
    listed = {}
    for name, verified in downloaded.files.items():
        blob = hash_file(downloaded.path / name).blob_id if verified.size <= _REGULAR_FILE_BYTES else None
        listed[name] = FileDigest(sha256=verified.sha256, size=verified.size, git_blob_id=blob)
    return listed
