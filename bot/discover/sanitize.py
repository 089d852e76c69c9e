"""Remove every path a loader would follow out of a checkpoint's working copy, before anything loads it.

transformers takes file paths from the configs it reads: a `tokenizer_config.json` whose `tokenizer_file` (or
`vocab_file`, `merges_file`, ...) is an absolute path makes `AutoTokenizer.from_pretrained` open that path instead
of the checkout's own file, and `save_pretrained` then writes its contents into the exported folder, which gets
published. The same goes for the `weight_map` of a sharded checkpoint's `*.index.json`. So, in every JSON file of
the working copy, a path-valued field that is absolute, home-relative, a URL or escapes the folder is removed (the
loaders then fall back to the folder's own files) and the removal is recorded; a weight map that points outside is
refused, since the weights cannot be loaded without it. This is the first line; the OS confinement of the children
(`bot.sandbox.isolation`) is the second.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from bot.core.errors import Skip, Stage

MAX_JSON_BYTES = 16 * 1024 * 1024
# Large data files loaders read as data, never as a source of paths (tokenizers-rs embeds the vocabulary).
_DATA_FILES = frozenset({"tokenizer.json", "vocab.json"})
# Keys whose string values the loaders open as files: transformers' `vocab_files_names` across tokenizers
# (vocab_file, merges_file, tokenizer_file, spm_file, monolingual_vocab_file, entity_vocab_file, emoji_file,
# added_tokens_file, special_tokens_map_file, ...) all end in `_file`; the rest follow the same suffixes.
_PATH_KEY = re.compile(r"(^|_)(file|files|path|paths|dir|directory|ckpt|spm|name_or_path)$", re.IGNORECASE)
_WINDOWS_ABSOLUTE = re.compile(r"^([A-Za-z]:|\\\\|\\)")


@dataclass(frozen=True)
class RemovedField:
    """One path-valued field taken out of a working copy, and why."""

    file: str
    key: str  # dotted path inside the JSON document
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key} ({self.reason})"


def unsafe_path_reason(value: str) -> str | None:
    """Why `value`, read as a path relative to the checkpoint folder, could reach outside it (None: it cannot)."""
    if "\0" in value:
        return "contains a NUL byte"
    if "://" in value:
        return "is a URL"
    if value.startswith("/") or _WINDOWS_ABSOLUTE.match(value):
        return "is an absolute path"
    if value.startswith("~"):
        return "is relative to a home directory"
    normal = posixpath.normpath(value.replace("\\", "/"))
    if normal == ".." or normal.startswith("../"):
        return "escapes the checkpoint folder"
    return None


def sanitize_folder(folder: Path, *, subject: str | None = None) -> tuple[RemovedField, ...]:
    """Remove unsafe path-valued fields from every JSON file of a working copy (rewriting only changed files).

    Args:
        folder: a working copy made by `bot.discover.fetch.safe_copy` (top-level regular files only).
        subject: the checkpoint's name for errors.

    Returns:
        The fields removed, for the log and the report.

    Raises:
        Skip: a JSON file is over the size limit, or a sharded checkpoint's weight map points outside the folder.
    """
    removed: list[RemovedField] = []
    for path in sorted(folder.glob("*.json")):
        if path.name in _DATA_FILES or path.is_symlink() or not path.is_file():
            continue
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise Skip(
                f"{path.name} is {size} bytes, over the {MAX_JSON_BYTES}-byte limit for a config",
                subject=subject,
                stage=Stage.FETCH,
            )
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):
            continue  # unparsable: a loader that reads it fails the same way, and follows nothing in it
        if path.name.endswith(".index.json"):
            _check_weight_map(path.name, document, subject)
        found: list[RemovedField] = []
        cleaned = _clean(document, path.name, "", found)
        if found:
            path.write_text(json.dumps(cleaned, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            removed += found
    return tuple(removed)


def _clean(node: object, file: str, where: str, found: list[RemovedField]) -> object:
    """A copy of `node` without the unsafe path values of path-named keys (at any depth)."""
    if isinstance(node, list):
        return [_clean(item, file, f"{where}[{index}]", found) for index, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    kept: dict = {}
    for key, value in node.items():
        here = f"{where}.{key}" if where else str(key)
        if _PATH_KEY.search(str(key)):
            reason = _unsafe_value(value)
            if reason:
                found.append(RemovedField(file, here, reason))
                continue
        kept[key] = _clean(value, file, here, found)
    return kept


def _unsafe_value(value: object) -> str | None:
    if isinstance(value, str):
        return unsafe_path_reason(value)
    if isinstance(value, list):
        for item in value:
            if isinstance(item, str) and (reason := unsafe_path_reason(item)):
                return reason
    return None


def _check_weight_map(name: str, document: object, subject: str | None) -> None:
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict):
        return
    for tensor, shard in weight_map.items():
        reason = unsafe_path_reason(shard) if isinstance(shard, str) else "is not a file name"
        if reason is None and "/" in shard.replace("\\", "/"):
            reason = "is not a top-level file of the checkpoint"
        if reason:
            raise Skip(
                f"{name} maps {str(tensor)[:60]!r} to a shard that {reason}: refused",
                subject=subject,
                stage=Stage.FETCH,
            )
