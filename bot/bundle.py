"""Assemble a bundle: clean `draft/` and `target/` repo folders plus `openvino_export.json` (the build record).

The export leaves local artefacts behind (a junk draft tokenizer, a site-packages `auto_map`, the source path in
`openvino_config.json`); none of that may be published. The last step scans every text file for paths of the
machine the bot ran on (its work folder, its Python environment), not for any path-like string a source shipped.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from bot.errors import Failure
from bot.record import PROVENANCE_FILE, BuildRecord, read_bundle_record, write

# GenAI needs only the IR pair in the draft folder; config.json is kept (sanitised) for people reading the repo.
DRAFT_FILES = ("openvino_model.xml", "openvino_model.bin")
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


def write_bundle(
    out: Path,
    draft_ir: Path,
    target_ir: Path,
    draft_source: Path,
    target_source: Path,
    built: BuildRecord,
    scratch: Path,
    *environments: Path,
) -> Bundle:
    """Write `out/draft`, `out/target` and the record; refuse a bundle that would publish a local path.

    Raises:
        Failure: a file of the bundle names the bot's work folder or Python environment.
    """
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    draft_dir = write_draft_folder(draft_ir, draft_source / "config.json", out / "draft")
    target_dir = write_target_folder(target_ir, out / "target", target_source)
    write(built, out)
    assert_no_local_paths(out, scratch, *environments)
    return Bundle(root=out, draft_dir=draft_dir, target_dir=target_dir, record=built)


def write_draft_folder(ir_dir: Path, source_config: Path, dest: Path) -> Path:
    """The draft repo folder: the IR pair and the source config with `auto_map` already stripped."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in DRAFT_FILES:
        shutil.copyfile(ir_dir / name, dest / name)
    shutil.copyfile(source_config, dest / "config.json")
    return dest


def write_target_folder(ir_dir: Path, dest: Path, source: Path | None = None) -> Path:
    """The target repo folder: IR, tokenizer IRs, configs and chat template, minus the local source path.

    Args:
        source: the (safe-copied) source checkpoint; its processor configs replace the exported ones.
    """
    shutil.copytree(ir_dir, dest, dirs_exist_ok=True)
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
        raise Failure(f"bundle would publish local paths: {'; '.join(leaks[:5])}", stage="bundle")


__all__ = ["PROVENANCE_FILE", "Bundle", "assert_no_local_paths", "write_bundle"]
