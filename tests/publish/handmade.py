"""Hand-made bundles for the publish tests: the folders and record a build leaves, without an export.

The IR files are a few bytes (publish never loads them); the record is `tests.records.build_record` listing the
files' real hashes, so a bundle is consistent with its record, as a build that rewrote both would leave it.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.builder.bundle import Bundle
from bot.core import record
from bot.core.fingerprints import template_fingerprint
from bot.core.hashes import hash_file
from bot.core.recipe import Recipe
from bot.core.record import BuildFiles, BuildRecord, FileDigest, FileList, Repos
from bot.plan.job import BuildJob
from tests import records
from tests.records import build_record

DRAFT = {
    "openvino_model.xml": b"<?xml version='1.0'?><net name='draft' version='11'/>",
    "openvino_model.bin": b"\x00" * 64,
    "config.json": json.dumps({"architectures": ["DFlashDraftModel"], "model_type": "qwen3"}).encode(),
}
TARGET = {
    **{f"{model}.xml": f"<?xml version='1.0'?><net name='{model}'/>".encode() for model in ("openvino_model",)},
    "openvino_model.bin": b"\x01" * 64,
    "openvino_tokenizer.xml": b"<?xml version='1.0'?><net name='tokenizer'/>",
    "openvino_tokenizer.bin": b"\x02" * 8,
    "openvino_detokenizer.xml": b"<?xml version='1.0'?><net name='detokenizer'/>",
    "openvino_detokenizer.bin": b"\x03" * 8,
    "config.json": json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}).encode(),
    "tokenizer_config.json": b"{}",
    "chat_template.jinja": b"{{ messages }}",
}


def make_bundle(
    root: Path,
    *,
    built: BuildRecord | None = None,
    draft: dict[str, bytes] | None = None,
    target: dict[str, bytes] | None = None,
    repos: Repos | None = None,
) -> Bundle:
    """A bundle folder at `root` (`draft/`, `target/`, `openvino_export.json`) holding exactly these files, its
    record listing each one's sha256 (default: `DRAFT`, `TARGET` and `build_record()`).

    With `repos`, the record names them, this checkout's card templates and the approval of a scheduled build
    (`approved_by: recipe`, as `tests.records.candidate` plans it), as a build of a planned job writes it
    (`bot.builder.draft_record`); a publisher commits only such a record, as written.
    """
    for sub, files in (("draft", DRAFT if draft is None else draft), ("target", TARGET if target is None else target)):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (root / sub / name).parent.mkdir(parents=True, exist_ok=True)
            (root / sub / name).write_bytes(data)
    listed = BuildFiles(
        draft=_listing(root / "draft"), target=_listing(root / "target"), draft_source={}, target_source={}
    )
    built = (built or build_record()).model_copy(update={"files": listed})
    if repos is not None:
        built = built.published_as(repos, template_fingerprint())
        if built.approved_by is None:
            built = built.model_copy(update={"approved_by": "recipe"})
    record.write(built, root)
    return Bundle(root=root, draft_dir=root / "draft", target_dir=root / "target", record=built)


def _listing(folder: Path) -> FileList:
    """Every file under `folder` as a record lists it (a nested one too: a record may list anything)."""
    listed = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        local = hash_file(path)
        digest = FileDigest(sha256=local.file.sha256, size=local.file.size, git_blob_id=local.blob_id)
        listed[path.relative_to(folder).as_posix()] = digest
    return listed


def seed_sources(hub_url: str, token: str, *repos: str) -> None:
    """Create the source and target repos the fixture records name (empty: the Hub checks a card's `base_model`
    names a model it has)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_url, token=token)
    for repo in repos or (build_record().source.repo, build_record().target.repo):
        api.create_repo(repo, exist_ok=True)


def planned_job(source: str, target: str, recipe: Recipe) -> BuildJob:
    """The job a plan makes for `source` (a stateful DFlash draft of the qwen3 `target`) at the records' shas."""
    candidate = records.candidate(repo_id=source, target_repo=target)
    return BuildJob.from_candidate(candidate, ("new",), recipe.publish, formats=recipe.export.draft_weight_formats)
