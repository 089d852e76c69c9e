"""Working copies of checkpoints that are safe to hand to the exporter (docs/design.md §3).

Only data files are copied (never `*.py`, never pickles), `auto_map` is stripped from every config, so the
`trust_remote_code` that optimum-intel needs for DFlash can only load optimum-intel's own class, and every
path-valued config field that points outside the folder is removed (`bot.discover.sanitize`), so no loader opens a file
the checkpoint names outside its own checkout.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from pathlib import Path

from bot.core import log
from bot.core.errors import InfrastructureFailure, Skip, Stage
from bot.discover.sanitize import sanitize_folder

# What a build may read from a source repo; also the allow_patterns of every Hub download.
ALLOWED_PATTERNS = (
    "*.json",
    "*.safetensors",
    "tokenizer.model",
    "*.tiktoken",
    "merges.txt",
    "vocab.txt",
    "*.jinja",
    "README.md",
)
# Configs that transformers reads with trust_remote_code and that may carry an auto_map to repo code.
_CONFIGS_WITH_AUTO_MAP = (
    "config.json",
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)


def is_allowed(name: str) -> bool:
    """True for a top-level file name the build may use."""
    return (
        "/" not in name
        and "\\" not in name
        and not name.startswith(".")
        and any(fnmatch.fnmatch(name, pattern) for pattern in ALLOWED_PATTERNS)
    )


def safe_copy(source: Path, dest: Path, *, subject: str | None = None) -> Path:
    """Copy the allowed top-level files of `source` into a fresh `dest`, strip `auto_map` and outside paths.

    Symlinks are never followed (Hub downloads go to a `local_dir` of real files), and config fields that name
    files outside the folder are removed, so a checkpoint cannot make the build read files outside it.

    Raises:
        Skip: `source` is not a folder, or its weight map or configs cannot be made safe (`bot.discover.sanitize`).
    """
    if not source.is_dir():
        raise Skip(f"checkpoint folder not found: {source.name}", subject=subject, stage=Stage.FETCH)
    dest.mkdir(parents=True, exist_ok=False)
    for entry in sorted(source.iterdir()):
        if not is_allowed(entry.name) or entry.is_symlink() or not entry.is_file():
            continue
        _link_or_copy(entry, dest / entry.name)
    for name in _CONFIGS_WITH_AUTO_MAP:
        strip_auto_map(dest / name)
    for field in sanitize_folder(dest, subject=subject):
        log.step("%s: removed a path outside the checkpoint: %s", subject or source.name, field)
    return dest


def _link_or_copy(source: Path, dest: Path) -> None:
    """Weights are hard-linked (no second copy of many GB); files the bot rewrites are always copied."""
    if source.suffix == ".safetensors":
        try:
            os.link(source, dest)
            return
        except OSError:
            pass  # another filesystem, or links not allowed
    shutil.copyfile(source, dest)


def require_free_disk(folder: Path, needed: int, what: str, *, subject: str | None = None) -> None:
    """Refuse to start a download or export that cannot fit, naming the bytes needed.

    Raises:
        InfrastructureFailure: less than `needed` bytes free under `folder` (the runner's disk, not the source).
    """
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise InfrastructureFailure(
            f"{what} needs {needed} bytes free in {folder.name or folder}, only {free} available",
            subject=subject,
            stage=Stage.FETCH,
        )


def strip_auto_map(path: Path) -> None:
    """Remove `auto_map` (the pointer to repo code) from a JSON config, if the file exists and parses."""
    if not path.is_file():
        return
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        return  # classification reports unparsable configs; nothing can load this one anyway
    if isinstance(config, dict) and "auto_map" in config:
        del config["auto_map"]
        path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
