"""What the Hub derives from a commit's files: card metadata, the `config` summary and the computed tags.

The bot decides from these (tags, `base_model`, `library_name`), so they follow the real Hub's rules closely
enough that code tested here behaves the same against huggingface.co. Results are cached per commit: commits
never change.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .storage import Commit, HubStore

# huggingface_hub's own front matter pattern (repocard.py), so both sides agree on what the metadata block is.
_FRONT_MATTER_RE = re.compile(r"^(\s*---[\r\n]+)([\S\s]*?)([\r\n]+---(\r\n|\n|$))")
_MAX_PARSED_FILE = 5 * 1024 * 1024
_TOKENIZER_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template")


class CardError(ValueError):
    """README.md front matter that the Hub would reject."""


def parse_front_matter(text: str) -> dict[str, Any] | None:
    """The YAML metadata block of a model card, or None when there is none.

    Raises:
        CardError: the block is not valid YAML or not a mapping.
    """
    match = _FRONT_MATTER_RE.search(text)
    if match is None:
        return None
    try:
        data = yaml.safe_load(match.group(2))
    except yaml.YAMLError as exc:
        raise CardError(f"Invalid YAML in the README.md metadata block: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CardError(f"The README.md metadata block must be a YAML mapping, not {type(data).__name__}")
    # YAML dates and other non-JSON scalars become strings, as the Hub serves them.
    as_json: dict[str, Any] = json.loads(json.dumps(data, default=str))
    return as_json


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(item) for item in value if item is not None]
    return [str(value)]


def derive_tags(card: Mapping[str, Any] | None, config: Mapping[str, Any] | None, paths: Iterable[str]) -> list[str]:
    """The Hub's computed `tags`: the card's own tags plus what it infers from metadata and files."""
    card = card or {}
    tags: list[str] = []
    tags += _as_list(card.get("library_name"))
    if any(path.endswith(".safetensors") for path in paths):
        tags.append("safetensors")
    if config and isinstance(config.get("model_type"), str):
        tags.append(config["model_type"])
    tags += _as_list(card.get("pipeline_tag"))
    tags += _as_list(card.get("tags"))
    if config and config.get("auto_map"):
        tags.append("custom_code")
    tags += _as_list(card.get("language"))
    tags += [f"dataset:{name}" for name in _as_list(card.get("datasets"))]
    relation = card.get("base_model_relation")
    for base in _as_list(card.get("base_model")):
        tags.append(f"base_model:{base}")
        if isinstance(relation, str):
            tags.append(f"base_model:{relation}:{base}")
    tags += [f"license:{name}" for name in _as_list(card.get("license"))]
    return list(dict.fromkeys(tags))


def config_summary(
    config: Mapping[str, Any] | None, tokenizer_config: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The subset of config.json the Hub returns as `config`: enough to name the architecture, not the model.

    Anything else (for example a draft's `dflash_config`) has to be read from config.json itself.
    """
    if config is None:
        return None
    summary = {key: config[key] for key in ("architectures", "model_type", "auto_map") if key in config}
    if tokenizer_config:
        tokens = {key: tokenizer_config[key] for key in _TOKENIZER_KEYS if key in tokenizer_config}
        if tokens:
            summary["tokenizer_config"] = tokens
    return summary


@dataclass(frozen=True)
class CommitMetadata:
    """Everything derived from one commit's README.md, config.json and file list."""

    card_data: dict[str, Any] | None
    config: dict[str, Any] | None
    tags: tuple[str, ...]
    library_name: str | None
    pipeline_tag: str | None


class MetadataCache:
    """Derives `CommitMetadata` once per commit id, reading the few small files it needs from the blob store."""

    def __init__(self, store: HubStore):
        self._store = store
        self._lock = threading.Lock()
        self._cache: dict[str, CommitMetadata] = {}

    def get(self, commit: Commit) -> CommitMetadata:
        with self._lock:
            cached = self._cache.get(commit.id)
        if cached is not None:
            return cached
        metadata = self._derive(commit)
        with self._lock:
            self._cache[commit.id] = metadata
        return metadata

    def _derive(self, commit: Commit) -> CommitMetadata:
        card: dict[str, Any] | None = None
        readme = self._read_text(commit, "README.md")
        if readme is not None:
            try:
                card = parse_front_matter(readme)
            except CardError:
                card = None
        raw_config = self._read_json(commit, "config.json")
        config = config_summary(raw_config, self._read_json(commit, "tokenizer_config.json"))
        library_name = card.get("library_name") if card else None
        pipeline_tag = card.get("pipeline_tag") if card else None
        return CommitMetadata(
            card_data=card,
            config=config,
            tags=tuple(derive_tags(card, raw_config, commit.files)),
            library_name=library_name if isinstance(library_name, str) else None,
            pipeline_tag=pipeline_tag if isinstance(pipeline_tag, str) else None,
        )

    def _read_text(self, commit: Commit, path: str) -> str | None:
        entry = commit.files.get(path)
        if entry is None or entry.size > _MAX_PARSED_FILE:
            return None
        return self._store.read_blob(entry.sha256).decode("utf-8", errors="replace")

    def _read_json(self, commit: Commit, path: str) -> dict[str, Any] | None:
        text = self._read_text(commit, path)
        if text is None:
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None
