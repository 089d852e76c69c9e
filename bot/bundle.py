"""Assemble a bundle: clean `draft/` and `target/` repo folders plus `openvino_export.json` (the provenance).

The export leaves local artefacts behind (a junk draft tokenizer, a site-packages `auto_map`, the source path in
`openvino_config.json`); none of that may be published. The last step scans every text file for local paths.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bot import __version__
from bot.errors import Failure

PROVENANCE_FILE = "openvino_export.json"
SCHEMA_VERSION = 1
# GenAI needs only the IR pair in the draft folder; config.json is kept (sanitised) for people reading the repo.
DRAFT_FILES = ("openvino_model.xml", "openvino_model.bin")
_TEXT_SUFFIXES = {".json", ".xml", ".jinja", ".md", ".txt", ".yaml", ".yml"}
# VLM processor configs published as the source has them: without torchvision, optimum rewrites the first (slow
# image processor) and drops the second (notes/qwen3_5-vlm-on-cpu.md §1).
SOURCE_PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json")


@dataclass(frozen=True)
class Bundle:
    root: Path
    draft_dir: Path
    target_dir: Path
    provenance: dict

    @property
    def passed(self) -> bool:
        return self.provenance.get("status") == "validated"


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


def local_path_markers(*extra: Path) -> list[str]:
    """Strings that only appear in a file by leaking where the bot ran."""
    markers = {sys.prefix, str(Path.home()), tempfile.gettempdir(), "site-packages", *map(str, extra)}
    return sorted(m for m in markers if m and m not in ("/", "."))


def find_local_paths(folder: Path, markers: list[str]) -> list[str]:
    """Files under `folder` whose text contains a marker, as `relative/path: marker`."""
    hits = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in _TEXT_SUFFIXES:
            text = path.read_text(encoding="utf-8", errors="replace")
            hits += [f"{path.relative_to(folder)}: {m}" for m in markers if m in text]
    return hits


def write_provenance(root: Path, provenance: dict) -> None:
    (root / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def read_provenance(root: Path) -> dict:
    return json.loads((root / PROVENANCE_FILE).read_text(encoding="utf-8"))


def base_provenance() -> dict:
    return {"schema_version": SCHEMA_VERSION, "bot_version": __version__,
            "built_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()}


def assert_no_local_paths(root: Path, *work_dirs: Path) -> None:
    """Raises Failure naming the file when any bundle file leaks a local path."""
    leaks = find_local_paths(root, local_path_markers(*work_dirs))
    if leaks:
        raise Failure(f"bundle would publish local paths: {'; '.join(leaks[:5])}", stage="bundle")
