"""Classify a checkpoint from its `config.json` and cross-check a draft against its target (DESIGN §4).

Everything here reads JSON and safetensors headers only: it runs before any export, so a broken or unsupported
checkpoint is a skip with a reason that names the defect, found in milliseconds rather than after an export.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from bot.errors import Skip
from bot.toolchain import (
    CAPABILITY_DFLASH,
    CAPABILITY_DFLASH2,
    CAPABILITY_DSPARK,
    CAPABILITY_PER_ROW,
    Toolchain,
)

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # real configs are a few KB; a huge one is hostile or broken
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
DSPARK_ARCHITECTURES = {"Qwen3DSparkModel", "Gemma4DSparkModel", "DSparkDraftModel"}
VLM_MODEL_TYPES = {"qwen3_5", "qwen3_5_moe"}


@dataclass(frozen=True)
class DraftSpec:
    """What a draft's config says about it."""

    kind: str  # dflash | dflash-other-base | dflash2 | dspark | unknown
    architecture: str
    model_type: str
    hidden_size: int | None
    mask_token_id: int | None
    target_layer_ids: tuple[int, ...]
    num_target_layers: int | None = None
    markov_rank: int | None = None
    num_layers: int | None = None  # the draft's own decoder layers

    @classmethod
    def of_kind(cls, kind: str, architecture: str, model_type: str) -> DraftSpec:
        """What a listing or a published record knows of a draft: enough to ask what the exporter can do."""
        return cls(kind=kind, architecture=architecture, model_type=model_type, hidden_size=None,
                   mask_token_id=None, target_layer_ids=())


@dataclass(frozen=True)
class TargetSpec:
    """The dimensions of a target that a draft must match; read from `text_config` for VLM targets."""

    model_type: str
    architecture: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    is_vlm: bool
    full_attention_layers: int


def load_config(folder: Path, *, subject: str | None = None) -> dict:
    """Parse `folder/config.json` defensively (size-capped, JSON only).

    Raises:
        Skip: missing, oversized, not JSON, too deeply nested, or not an object.
    """
    path = folder / "config.json"
    if not path.is_file():
        raise Skip("no config.json in the checkpoint", subject=subject, stage="classify")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise Skip(f"config.json is {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit", subject=subject,
                   stage="classify")
    return parse_config_text(path.read_bytes(), subject=subject)


def parse_config_text(data: bytes, *, subject: str | None = None) -> dict:
    """Parse config bytes already in memory (from disk or a Hub download)."""
    try:
        config = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise Skip("config.json is not UTF-8 text", subject=subject, stage="classify") from None
    except json.JSONDecodeError as exc:
        raise Skip(f"config.json is not valid JSON ({exc.msg} at line {exc.lineno})", subject=subject,
                   stage="classify") from None
    except RecursionError:
        raise Skip("config.json is nested too deeply to be a model config", subject=subject,
                   stage="classify") from None
    if not isinstance(config, dict):
        raise Skip("config.json is not a JSON object", subject=subject, stage="classify")
    return config


def classify_draft(config: dict, *, subject: str | None = None) -> DraftSpec:
    """Recognise the draft kind from its config (DESIGN §4 table).

    Raises:
        Skip: a DFlash config without the fields every DFlash runtime needs.
    """
    architectures = config.get("architectures") or [""]
    architecture = str(architectures[0]) if isinstance(architectures, list) and architectures else ""
    model_type = str(config.get("model_type", ""))
    dflash_config = config.get("dflash_config")
    hidden_size = _int_or_none(config.get("hidden_size"))

    if architecture in DSPARK_ARCHITECTURES or (
        isinstance(dflash_config, dict) and dflash_config.get("projector_type") == "dspark"
    ):
        fields = dflash_config if isinstance(dflash_config, dict) and "mask_token_id" in dflash_config else config
        return DraftSpec(
            kind="dspark", architecture=architecture or "DSparkDraftModel", model_type=model_type,
            hidden_size=hidden_size, mask_token_id=_int_or_none(fields.get("mask_token_id")),
            target_layer_ids=_layer_ids(fields.get("target_layer_ids"), subject),
            num_target_layers=_int_or_none(fields.get("num_target_layers")),
            markov_rank=_int_or_none(fields.get("markov_rank")) or 0,
        )
    if architecture == "DFlash2DraftModel":
        return DraftSpec(kind="dflash2", architecture=architecture, model_type=model_type, hidden_size=hidden_size,
                         mask_token_id=None, target_layer_ids=())
    if architecture != "DFlashDraftModel":
        return DraftSpec(kind="unknown", architecture=architecture or "(none)", model_type=model_type,
                         hidden_size=hidden_size, mask_token_id=None, target_layer_ids=())

    if not isinstance(dflash_config, dict):
        raise Skip("DFlashDraftModel config has no dflash_config (mask_token_id and target_layer_ids are required)",
                   subject=subject, stage="classify")
    mask_token_id = _int_or_none(dflash_config.get("mask_token_id"))
    if mask_token_id is None:
        raise Skip("dflash_config.mask_token_id is missing or not an integer", subject=subject, stage="classify")
    layer_ids = _layer_ids(dflash_config.get("target_layer_ids"), subject)
    if not layer_ids:
        raise Skip("dflash_config.target_layer_ids is empty; the draft taps no target layer", subject=subject,
                   stage="classify")
    return DraftSpec(
        kind="dflash" if model_type == "qwen3" else "dflash-other-base",
        architecture=architecture, model_type=model_type, hidden_size=hidden_size, mask_token_id=mask_token_id,
        target_layer_ids=layer_ids, num_target_layers=_int_or_none(config.get("num_target_layers")),
        num_layers=_int_or_none(config.get("num_hidden_layers")),
    )


def require_exportable(draft: DraftSpec, toolchain: Toolchain, *, subject: str | None = None) -> str:
    """Return the draft format the installed exporter will produce, or skip naming the missing capability."""
    optimum = f"optimum-intel {toolchain.versions.get('optimum-intel', '?')}"
    have = ", ".join(sorted(toolchain.capabilities)) or "none"
    if draft.kind == "dflash":
        if CAPABILITY_PER_ROW in toolchain.capabilities:
            return "per-row"
        if CAPABILITY_DFLASH in toolchain.capabilities:
            return "stateful"
        raise Skip(f"{optimum} has no DFlash draft exporter (capabilities: {have})", subject=subject,
                   stage="classify")
    if draft.kind == "dflash-other-base":
        raise Skip(f"DFlash draft with model_type '{draft.model_type}': {optimum} exports qwen3-based DFlash drafts "
                   "only", subject=subject, stage="classify")
    if draft.kind == "dspark":
        if draft.markov_rank:
            raise Skip(f"DSpark draft with markov_rank {draft.markov_rank} needs a Markov-head DSpark exporter; "
                       f"{optimum} has none (capabilities: {have})", subject=subject, stage="classify")
        if not {CAPABILITY_DSPARK, CAPABILITY_PER_ROW} <= toolchain.capabilities:
            raise Skip(f"DSpark drafts need the per-row DFlash export with DSpark support; {optimum} lacks "
                       f"{_missing(toolchain, CAPABILITY_DSPARK, CAPABILITY_PER_ROW)} (capabilities: {have})",
                       subject=subject, stage="classify")
        return "per-row"
    if draft.kind == "dflash2":
        if CAPABILITY_DFLASH2 not in toolchain.capabilities:
            raise Skip(f"DFlash2DraftModel needs a DFlash2 exporter (selector and conv layers); {optimum} lacks "
                       f"the {CAPABILITY_DFLASH2} capability (capabilities: {have})", subject=subject,
                       stage="classify")
        return "per-row"
    raise Skip(f"not a DFlash or DSpark draft (architecture {draft.architecture})", subject=subject,
               stage="classify")


def read_target(config: dict, *, subject: str | None = None) -> TargetSpec:
    """Target dimensions; VLM targets keep their language model's in `text_config`.

    Raises:
        Skip: the config lacks the dimensions a draft is checked against.
    """
    model_type = str(config.get("model_type", ""))
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    architectures = config.get("architectures") or [""]
    try:
        hidden_size = int(text["hidden_size"])
        num_layers = int(text["num_hidden_layers"])
        vocab_size = int(text.get("vocab_size", config.get("vocab_size")))
    except (KeyError, TypeError, ValueError):
        raise Skip("target config lacks hidden_size, num_hidden_layers or vocab_size", subject=subject,
                   stage="classify") from None
    layer_types = text.get("layer_types")
    full_attention = (sum(1 for t in layer_types if t == "full_attention") if isinstance(layer_types, list)
                      and len(layer_types) == num_layers else num_layers)
    return TargetSpec(model_type=model_type, architecture=str(architectures[0]), hidden_size=hidden_size,
                      num_hidden_layers=num_layers, vocab_size=vocab_size,
                      is_vlm=model_type in VLM_MODEL_TYPES or "text_config" in config,
                      full_attention_layers=full_attention)


def cross_check(draft: DraftSpec, target: TargetSpec, *, subject: str | None = None,
                target_name: str = "the target") -> None:
    """The draft must fit the target it drafts for; each mismatch would only surface deep inside GenAI.

    Raises:
        Skip: naming the first mismatch.
    """
    def skip(message: str) -> Skip:
        return Skip(message, subject=subject, stage="cross-check")

    if draft.hidden_size is not None and draft.hidden_size != target.hidden_size:
        raise skip(f"draft hidden_size {draft.hidden_size} differs from {target_name}'s hidden_size "
                   f"{target.hidden_size}")
    beyond = [i for i in draft.target_layer_ids if i < 0 or i >= target.num_hidden_layers]
    if beyond:
        raise skip(f"target_layer_ids {list(draft.target_layer_ids)} reach beyond {target_name}'s "
                   f"{target.num_hidden_layers} hidden layers (bad: {beyond})")
    if draft.num_target_layers is not None and draft.num_target_layers != target.num_hidden_layers:
        raise skip(f"draft num_target_layers {draft.num_target_layers} differs from {target_name}'s "
                   f"{target.num_hidden_layers} hidden layers")
    if draft.mask_token_id is not None and not 0 <= draft.mask_token_id < target.vocab_size:
        raise skip(f"mask_token_id {draft.mask_token_id} is outside {target_name}'s vocabulary "
                   f"({target.vocab_size} tokens)")


def check_weights(folder: Path, *, subject: str | None = None) -> int:
    """Check the weights are safetensors and whole; return their total size in bytes.

    Reads only the safetensors headers. Pickle files are never opened: loading them can run arbitrary code.

    Raises:
        Skip: pickle-only weights, no weights, a shard listed in the index but absent, or a truncated file.
    """
    tensors = sorted(folder.glob("*.safetensors"))
    if not tensors:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise Skip(f"weights only in pickle format ({', '.join(pickles)}); the bot loads safetensors only "
                       "and never unpickles", subject=subject, stage="classify")
        raise Skip("no *.safetensors weights in the checkpoint", subject=subject, stage="classify")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise Skip("model.safetensors.index.json is not a valid shard index", subject=subject,
                       stage="classify") from None
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            raise Skip(f"shards listed in the index are missing: {', '.join(missing)}", subject=subject,
                       stage="classify")
    return sum(safetensors_size(path, subject=subject) for path in tensors)


def safetensors_size(path: Path, *, subject: str | None = None) -> int:
    """Validate one safetensors file against its own header and return its size.

    Raises:
        Skip: header unreadable, or the file holds fewer bytes than the header's offsets claim.
    """
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise Skip(f"{path.name} is too short to be safetensors", subject=subject, stage="classify")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise Skip(f"{path.name} has a header length of {header_len} bytes but the file holds {size}",
                       subject=subject, stage="classify")
        try:
            header = json.loads(handle.read(header_len))
        except (ValueError, RecursionError):
            raise Skip(f"{path.name} has an unreadable safetensors header", subject=subject,
                       stage="classify") from None
    if not isinstance(header, dict):
        raise Skip(f"{path.name} has an unreadable safetensors header", subject=subject, stage="classify")
    data_end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            data_end = max(data_end, int(entry["data_offsets"][1]))
        except (KeyError, IndexError, TypeError, ValueError):
            raise Skip(f"{path.name}: tensor '{name}' has no valid data_offsets", subject=subject,
                       stage="classify") from None
    expected = 8 + header_len + data_end
    if size < expected:
        raise Skip(f"{path.name} is truncated: its header describes {expected} bytes, the file holds {size}",
                   subject=subject, stage="classify")
    return size


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _layer_ids(value: object, subject: str | None) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise Skip("target_layer_ids must be a list of integers", subject=subject, stage="classify")
    return tuple(value)


def _missing(toolchain: Toolchain, *capabilities: str) -> str:
    return " and ".join(c for c in capabilities if c not in toolchain.capabilities)
