"""Assemble a bundle: clean `draft/` and `target/` repo folders plus `openvino_export.json` (the build record).

A bundle is built from an allow-list, never by copying a folder: each published file is one the format needs,
copied from the place the bot's own step wrote it, and an export output folder holding any file the exporter does
not write fails the build with its name (a compromised child may have planted it). The export leaves local
artefacts behind (a junk draft tokenizer, a site-packages `auto_map`, the source path in `openvino_config.json`);
none of that may be published. The record lists the sha256 and size of every file published (`record.BuildFiles`),
and `check_folder` holds a repo folder to that list before publish commits it. The last step scans every text file
for paths of the machine the bot ran on (its work folder, its Python environment), not for any path-like string a
source shipped.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.core.errors import Failure, Stage
from bot.core.hashes import hash_file, read_manifest
from bot.core.record import PROVENANCE_FILE, BuildFiles, BuildRecord, FileDigest, FileList, read_bundle_record, write
from bot.discover.fetch import is_allowed

# GenAI needs only the IR pair in the draft folder; config.json is kept (sanitised) for people reading the repo.
DRAFT_FILES = ("openvino_model.xml", "openvino_model.bin")
DRAFT_PUBLISHED = (*DRAFT_FILES, "config.json")
# What publish renders from the record over a bundle's repo folder (the chart goes to a folder of its own there).
RENDERED_AT_PUBLISH = ("README.md", PROVENANCE_FILE)
# The IR models a target export writes: an LLM's one model, a VLM's language, embeddings and vision parts, and
# the tokenizer pair; each an .xml and a .bin.
TARGET_MODELS = (
    "openvino_model",
    "openvino_language_model",
    "openvino_text_embeddings_model",
    "openvino_text_embeddings_per_layer_model",  # Gemma 4's per-layer embeddings (its VLM export writes them)
    "openvino_vision_embeddings_model",
    "openvino_vision_embeddings_merger_model",
    "openvino_vision_embeddings_pos_model",
    "openvino_tokenizer",
    "openvino_detokenizer",
)
# The other files a target repo carries: model, generation and OpenVINO configs, tokenizer and processor files.
TARGET_CONFIGS = (
    "config.json",
    "generation_config.json",
    "openvino_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)
TARGET_FILES = tuple(f"{model}.{ext}" for model in TARGET_MODELS for ext in ("xml", "bin")) + TARGET_CONFIGS
# What optimum-cli writes into any export folder (the draft's tokenizer and configs are junk, never published).
EXPORT_OUTPUT_FILES = frozenset(TARGET_FILES)
_TEXT_SUFFIXES = {".json", ".xml", ".jinja", ".md", ".txt", ".yaml", ".yml"}
# VLM processor configs published as the source has them: without torchvision, optimum rewrites the first (slow
# image processor) and drops the second (notes/qwen3_5-vlm-on-cpu.md §1).
SOURCE_PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json")


@dataclass(frozen=True)
class Bundle:
    """A build's output folder and its record, kept in memory from the build to publish."""

    root: Path
    draft_dir: Path
    target_dir: Path
    record: BuildRecord

    @property
    def passed(self) -> bool:
        return self.record.passed

    @classmethod
    def read(cls, root: Path) -> Bundle:
        """A bundle folder handed over on disk (an Actions artifact).

        Raises:
            RecordError: no readable build record in it.
        """
        return cls(root=root, draft_dir=root / "draft", target_dir=root / "target", record=read_bundle_record(root))


@dataclass(frozen=True)
class StagedBundle:
    """A bundle's repo folders, written and hashed; its record comes last (`seal_bundle`), once everything it says
    is known."""

    root: Path
    draft_dir: Path
    target_dir: Path
    files: BuildFiles


def stage_bundle(
    out: Path,
    draft_ir: Path,
    target_ir: Path,
    draft_source: Path,
    target_source: Path,
    *,
    sources: tuple[FileList, FileList] = ({}, {}),
    official_files: FileList | None = None,
    from_source: Mapping[str, bytes] | None = None,
    validated: tuple[Mapping[str, str], Mapping[str, str]] | None = None,
) -> StagedBundle:
    """Write `out/draft` and `out/target` and hash every file; refuse an export folder holding a file no step of
    the bot wrote.

    Args:
        sources: the draft's and the target's source files (`source_files`), listed in the record.
        official_files: the files of an official target IR the draft was validated with (`bot.builder.official_target`):
            listed as the target's, never bundled (`out/target` stays empty: nothing to publish).
        from_source: the target files the export copies from its source (tokenizer, chat template), as the
            builder read them from its working copy before any child ran (`bot.builder.target.source_snapshot`):
            the target folder gets these bytes, never the export folder's (issue 29).
        validated: the sha256 of the draft's and the target's IR files, taken before they were inspected and
            validated: a bundled IR file that differs was changed after it was validated (`check_validated`).

    Raises:
        Failure: an export folder holds a file the exporter does not write, or an IR file changed after it was
            validated.
    """
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    check_export_output(draft_ir, "draft")
    draft_dir = write_draft_folder(draft_ir, draft_source / "config.json", out / "draft")
    if official_files is None:
        check_export_output(target_ir, "target")
        target_dir = write_target_folder(target_ir, out / "target", target_source)
        for name, content in (from_source or {}).items():
            if (target_dir / name).is_file():  # the files the export wrote, with the bytes of the bot's copy
                (target_dir / name).write_bytes(content)
    else:
        target_dir = out / "target"
        target_dir.mkdir()
    target_files = digests(target_dir) if official_files is None else dict(official_files)
    files = BuildFiles(draft=digests(draft_dir), target=target_files, draft_source=sources[0], target_source=sources[1])
    if validated is not None:
        check_validated(files.draft, validated[0], "the draft IR")
        if official_files is None:
            check_validated(files.target, validated[1], "the target IR")
    return StagedBundle(root=out, draft_dir=draft_dir, target_dir=target_dir, files=files)


def seal_bundle(staged: StagedBundle, built: BuildRecord, *work_dirs: Path) -> Bundle:
    """Write the bundle's record (the one time `openvino_export.json` is written) and refuse a bundle that would
    publish a path of this machine.

    Args:
        built: the record, listing `staged.files`.
        work_dirs: the build's work folder and the environments its children ran in.

    Raises:
        Failure: the record does not list the staged files, or a file of the bundle names a work folder or
            Python environment.
    """
    if built.files != staged.files:
        raise Failure("the build record does not list the files of its bundle", stage=Stage.BUNDLE)
    write(built, staged.root)
    assert_no_local_paths(staged.root, *work_dirs)
    return Bundle(root=staged.root, draft_dir=staged.draft_dir, target_dir=staged.target_dir, record=built)


def check_validated(listed: FileList, validated: Mapping[str, str], what: str) -> None:
    """Refuse a bundled IR file whose bytes differ from those hashed before validation (a process that outlived
    its child, or a child without file confinement, rewrote it after the checks ran).

    Raises:
        Failure: naming the file and both hashes.
    """
    changed = [
        f"{name} (sha256 {listed[name].sha256} bundled, {sha256} validated)"
        for name, sha256 in sorted(validated.items())
        if name in listed and listed[name].sha256 != sha256
    ]
    if changed:
        raise Failure(
            f"{what} changed after it was validated: {'; '.join(changed[:5])}; not bundled", stage=Stage.BUNDLE
        )


def check_export_output(ir_dir: Path, role: str) -> None:
    """Refuse an export folder holding anything optimum-cli does not write (a planted script, a sub-folder, a
    link): it was not the bot's step that put it there.

    Raises:
        Failure: naming the unexpected entries.
    """
    unexpected = sorted(
        entry.name + ("/" if entry.is_dir() else "")
        for entry in ir_dir.iterdir()
        if entry.name not in EXPORT_OUTPUT_FILES or entry.is_symlink() or not entry.is_file()
    )
    if unexpected:
        raise Failure(
            f"the {role} export folder holds files no step of the bot writes: {', '.join(unexpected[:10])}; "
            "not bundled",
            stage=Stage.BUNDLE,
        )


def write_draft_folder(ir_dir: Path, source_config: Path, dest: Path) -> Path:
    """The draft repo folder: the IR pair and the source config with `auto_map` already stripped."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in DRAFT_FILES:
        shutil.copyfile(ir_dir / name, dest / name)
    shutil.copyfile(source_config, dest / "config.json")
    return dest


def write_target_folder(ir_dir: Path, dest: Path, source: Path | None = None) -> Path:
    """The target repo folder: IR, tokenizer IRs, configs and chat template (`TARGET_FILES`, each as the export
    or the bot's working copy of the source wrote it), minus the local source path.

    Args:
        source: the (safe-copied) source checkpoint; its processor configs replace the exported ones.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name in TARGET_FILES:
        if (ir_dir / name).is_file() and not (ir_dir / name).is_symlink():
            shutil.copyfile(ir_dir / name, dest / name)
    if source is not None:
        for name in SOURCE_PROCESSOR_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, dest / name)
    ov_config = dest / "openvino_config.json"
    if ov_config.is_file():
        config = json.loads(ov_config.read_text(encoding="utf-8"))
        _forget_source_paths(config.get("quantization_config"))
        ov_config.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return dest


def digests(folder: Path) -> FileList:
    """The sha256 and size of every file in a repo folder (flat: repo folders have no sub-folders)."""
    listed = {}
    for path in sorted(folder.iterdir()):
        local = hash_file(path)
        listed[path.name] = FileDigest(sha256=local.file.sha256, size=local.file.size, git_blob_id=local.blob_id)
    return listed


def source_files(folder: Path) -> FileList:
    """A source checkout's files: as checked against the Hub's hashes when downloaded (`bot.core.hashes`), else (a
    local folder given to `dflash-bot build`) hashed here, the files a build may read."""
    try:
        return {name: FileDigest(sha256=f.sha256, size=f.size) for name, f in read_manifest(folder).items()}
    except Failure:
        return {
            path.name: FileDigest(sha256=(local := hash_file(path)).file.sha256, size=local.file.size)
            for path in sorted(folder.iterdir())
            if is_allowed(path.name) and path.is_file() and not path.is_symlink()
        }


def check_folder(folder: Path, listed: FileList, rendered: tuple[str, ...], what: str) -> None:
    """Hold a repo folder to its record before it is committed: exactly the listed files, each with its listed
    hash and size, plus the files publish renders from the record (card, record, chart).

    Raises:
        Failure: a file that is not listed, a listed file missing, or one whose bytes differ (naming both hashes).
    """
    present = {path.name for path in folder.iterdir()}
    extra = sorted(present - set(listed) - set(rendered))
    missing = sorted(set(listed) - present)
    changed = []
    for name in sorted(set(listed) & present):
        local = hash_file(folder / name)
        if (local.file.sha256, local.file.size) != (listed[name].sha256, listed[name].size):
            changed.append(f"{name} (sha256 {local.file.sha256}, the record lists {listed[name].sha256})")
    problems = [
        *([f"not in the record: {', '.join(extra[:10])}"] if extra else []),
        *([f"missing: {', '.join(missing[:10])}"] if missing else []),
        *([f"changed: {'; '.join(changed[:5])}"] if changed else []),
    ]
    if problems:
        raise Failure(
            f"{what} does not match its build record ({'; '.join(problems)}): not published", stage=Stage.PUBLISH
        )


def check_publishable(folder: Path, role: str, what: str, rendered: tuple[str, ...] = ()) -> None:
    """Hold a repo folder to the files its format publishes, whatever its record lists (the record travels with the
    bundle, so a build that rewrote both agrees with itself): plain files with the names the format allows
    (`role` "draft": `DRAFT_PUBLISHED`, "target": `TARGET_FILES`, at the top level, plus the card, record and
    `rendered` files publish writes over them; "official": nothing, the official repo's files are not ours to
    publish), IR `.xml`/`.bin` in pairs, a draft's IR pair present, and no JSON file carrying `auto_map` (a
    pointer to repo code).

    Raises:
        Failure: naming every file refused, and `what` (the repo or bundle).
    """
    formats = {"draft": DRAFT_PUBLISHED, "target": TARGET_FILES, "official": ()}
    allowed = set(formats[role]) | set(rendered) | (set(RENDERED_AT_PUBLISH) if formats[role] else set())
    found: list[str] = []
    refused: list[str] = []
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        name = path.relative_to(folder).as_posix()
        if path.is_dir() and not path.is_symlink():
            if not any(entry.startswith(name + "/") for entry in allowed):
                refused.append(name + "/")
        elif name in allowed and path.is_file() and not path.is_symlink():
            found.append(name)
        else:
            refused.append(name)
    names = set(found)
    irs = {name.rsplit(".", 1)[0] for name in names if name.endswith((".xml", ".bin"))}
    unpaired = sorted(f"{ir}.{ext}" for ir in irs for ext in ("xml", "bin") if f"{ir}.{ext}" not in names)
    missing = [name for name in DRAFT_FILES if name not in names] if role == "draft" else []
    unpaired = [name for name in unpaired if name not in missing]
    code = [name for name in sorted(names) if name.endswith(".json") and _names_code(folder / name)]
    problems = [
        *([f"files its format never publishes: {', '.join(refused[:10])}"] if refused else []),
        *([f"no {' and no '.join(missing)}"] if missing else []),
        *([f"IR files without their pair: {', '.join(unpaired[:10])}"] if unpaired else []),
        *([f"auto_map (a pointer to repo code) or unreadable JSON in {', '.join(code)}"] if code else []),
    ]
    if problems:
        raise Failure(f"{what} holds {'; '.join(problems)}: not published", stage=Stage.PUBLISH)


def _names_code(path: Path) -> bool:
    """Whether a JSON file of a bundle carries `auto_map` at its top level (where transformers looks), or cannot be
    read as JSON at all (then nothing says it does not)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError, OSError):
        return True
    return isinstance(data, dict) and "auto_map" in data


def _forget_source_paths(quantization: object) -> None:
    """optimum records the local source folder as `tokenizer`/`processor`, also per sub-model (VLMs)."""
    if isinstance(quantization, dict):
        for key, value in quantization.items():
            if key in ("tokenizer", "processor") and isinstance(value, str):
                quantization[key] = None
            else:
                _forget_source_paths(value)


def local_path_markers(*work_dirs: Path) -> list[str]:
    """Paths only this machine has: the build's work folders and the Python environments it ran.

    Deliberately not generic strings such as the system temp folder or `site-packages`: a source config may carry
    `_name_or_path: /tmp/...` from its author's machine, which is theirs, not a leak of ours.
    """
    markers = {sys.prefix, sys.exec_prefix, *map(str, work_dirs)}
    markers |= {str(Path(p).resolve()) for p in markers}
    return sorted(m for m in markers if len(m) > 4)


def find_local_paths(folder: Path, markers: list[str]) -> list[str]:
    """Files under `folder` whose text contains a marker, as `relative/path: marker`."""
    hits = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in _TEXT_SUFFIXES:
            text = path.read_text(encoding="utf-8", errors="replace")
            hits += [f"{path.relative_to(folder)}: {m}" for m in markers if m in text]
    return hits


def assert_no_local_paths(root: Path, *work_dirs: Path) -> None:
    """Raises Failure naming the file when any bundle file leaks a local path."""
    leaks = find_local_paths(root, local_path_markers(*work_dirs))
    if leaks:
        raise Failure(f"bundle would publish local paths: {'; '.join(leaks[:5])}", stage=Stage.BUNDLE)


__all__ = [
    "PROVENANCE_FILE",
    "Bundle",
    "StagedBundle",
    "assert_no_local_paths",
    "check_folder",
    "check_publishable",
    "seal_bundle",
    "source_files",
    "stage_bundle",
]
