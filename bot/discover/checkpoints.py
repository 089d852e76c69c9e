"""Classify a checkpoint from its `config.json` and cross-check a draft against its target (docs/design.md §4).

Everything here reads JSON only (`bot.discover.safe_json`; the weights' headers: `bot.discover.weights`): it runs
before any export, so a broken or unsupported checkpoint is a skip with a reason that names the defect, found in
milliseconds rather than after an export.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.core import draft_formats
from bot.core.errors import Skip, Stage
from bot.core.toolchain import (
    CAPABILITY_DFLASH,
    CAPABILITY_DFLASH2,
    CAPABILITY_DSPARK,
    CAPABILITY_PER_ROW,
    Toolchain,
)
from bot.discover.safe_json import checked_int, load_json, shown

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # real configs are a few KB; a huge one is hostile or broken
MAX_CONFIG_INT = 2**31 - 1  # no dimension, layer index or token id of a real model comes near
DSPARK_ARCHITECTURES = {"Qwen3DSparkModel", "Gemma4DSparkModel", "DSparkDraftModel"}
LFM2_DSPARK_ARCHITECTURE = "Lfm2DSparkDraftModel"
# No toolchain has these yet (bot.core.toolchain never detects them): their drafts wait for them, by name.
CAPABILITY_SPECULATORS = "speculators-layout"
CAPABILITY_MARKOV = "dspark-markov"
# speculators_model_type -> (the bot's kind, the layout); anything else is speculators-other.
_SPECULATORS = {
    "dflash": ("dflash", "speculators-dflash"),
    "dflash2": ("dflash2", "speculators-dflash2"),
    "dspark": ("dspark", "speculators-dspark"),
    "eagle": ("unknown", "speculators-eagle"),
    "eagle3": ("unknown", "speculators-eagle"),
    "peagle": ("unknown", "speculators-eagle"),
}
VLM_MODEL_TYPES = {"qwen3_5", "qwen3_5_moe"}

# Pre-quantised targets (`quantization_config.quant_method` in config.json) the export can take, with what it loads
# per byte of their safetensors. optimum-intel 2.2.0 loads an MXFP4 checkpoint dequantised to bf16
# (`Mxfp4Config(dequantize=True)` in its __main__): 4.25 bits a parameter on disk (4-bit values, an 8-bit scale per
# 32), 16 in memory; counting every byte as MXFP4 over-counts the bf16 tensors beside them (an upper bound).
PREQUANTISED_LOADS = {"mxfp4": 16 / 4.25}
# What it cannot take, and why: GPTQ and AWQ need gptqmodel (or AutoAWQ) in the export's environment, which no
# toolchain profile installs; FP8 and compressed-tensors checkpoints are loaded without a dequantising config (the
# exporter dequantises only MXFP4; not tried on this CPU-only toolchain). Any other method is unknown to the bot.
PREQUANTISED_REFUSED = {
    "gptq": "GPTQ weights need gptqmodel in the export's environment, and no toolchain profile installs it",
    "awq": "AWQ weights need gptqmodel or AutoAWQ in the export's environment, and no toolchain profile installs them",
    "fp8": "optimum-intel 2.2.0 passes no dequantising config for FP8 weights (it dequantises only MXFP4)",
    "compressed-tensors": "optimum-intel 2.2.0 passes no dequantising config for compressed-tensors weights",
}


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
    # How the checkpoint spells itself (bot.core.draft_formats.LAYOUTS), and the field and value that decided it.
    layout: str = "unknown"
    decided_by: str = ""
    # The block row the first candidate comes from: 1 for DFlash (masks only), 0 for DSpark and
    # `sample_from_anchor: true` (the anchor row predicts too); None when the config does not say.
    candidate_offset: int | None = None
    target_hint: str | None = None  # a target the config itself names (speculators_config.verifier.name_or_path)

    @classmethod
    def of_kind(cls, kind: str, architecture: str, model_type: str) -> DraftSpec:
        """What a listing or a published record knows of a draft: enough to ask what the exporter can do."""
        layout = {"dflash": "zlab-dflash", "dflash-other-base": "zlab-dflash-other-base", "dflash2": "zlab-dflash2"}
        return cls(
            kind=kind,
            architecture=architecture,
            model_type=model_type,
            hidden_size=None,
            mask_token_id=None,
            target_layer_ids=(),
            layout=layout.get(kind, "deepspec-dflash" if kind == "dspark" else "unknown"),
            decided_by=f"architectures {architecture or '(none)'}",
        )


@dataclass(frozen=True)
class TargetSpec:
    """The dimensions of a target that a draft must match; read from `text_config` for VLM targets."""

    model_type: str
    architecture: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    is_vlm: bool
    full_attention_layers: int  # softmax-attention layers: all but Qwen3.5's linear-attention (GatedDeltaNet) ones
    quantization: str | None = None  # a pre-quantised target's `quantization_config.quant_method`

    @property
    def linear_attention(self) -> bool:
        """Whether some layers are linear attention (Qwen3.5's GatedDeltaNet): GenAI then needs a linear-attention
        state pool, and refuses one for a target without such layers (Gemma 4's sliding-window VLM)."""
        return self.full_attention_layers < self.num_hidden_layers


def target_quantization(config: Mapping[str, Any], *, subject: str | None = None) -> str | None:
    """The quantisation method of a pre-quantised target (its own `quantization_config`, or its language model's in
    `text_config`), or None for plain weights.

    Raises:
        Skip: a method the export cannot take, naming it and why (`PREQUANTISED_REFUSED`), or an unknown one.
    """
    text = config.get("text_config")
    found = config.get("quantization_config") or (text.get("quantization_config") if isinstance(text, dict) else None)
    if found is None:
        return None
    method = found.get("quant_method") if isinstance(found, dict) else None
    if not isinstance(method, str) or not method:
        raise Skip(
            "target config has a quantization_config without a quant_method", subject=subject, stage=Stage.CLASSIFY
        )
    method = method.lower()
    if method in PREQUANTISED_LOADS:
        return method
    why = PREQUANTISED_REFUSED.get(method, f"the bot knows no export for it (it takes {', '.join(PREQUANTISED_LOADS)})")
    raise Skip(f"pre-quantised target ({method}): {why}", subject=subject, stage=Stage.CLASSIFY)


def export_load_bytes(quantization: str | None, file_bytes: int) -> int:
    """The bytes an export loads for a target of `file_bytes` of safetensors: the same for plain weights, dequantised
    ones for a pre-quantised target (`PREQUANTISED_LOADS`); what sizing goes by."""
    if quantization is None:
        return file_bytes
    return math.ceil(file_bytes * PREQUANTISED_LOADS[quantization])


def load_config(folder: Path, *, subject: str | None = None) -> dict:
    """Parse `folder/config.json` defensively (size-capped, JSON only).

    Raises:
        Skip: missing, oversized, not JSON, too deeply nested, or not an object.
    """
    path = folder / "config.json"
    if not path.is_file():
        raise Skip("no config.json in the checkpoint", subject=subject, stage=Stage.CLASSIFY)
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise Skip(
            f"config.json is {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit",
            subject=subject,
            stage=Stage.CLASSIFY,
        )
    return parse_config_text(path.read_bytes(), subject=subject)


def parse_config_text(data: bytes, *, subject: str | None = None) -> dict:
    """Parse config bytes already in memory (from disk or a Hub download).

    Numbers are only parsed here, not judged: `Infinity`, `NaN` and floats like `1e400` (which Python's json reads
    as infinity) are kept, and each field the bot reads is validated where it is read (`_int_or_none`). Integer
    literals too long for Python to convert are the exception, as no loader could read such a config.

    Raises:
        Skip: not UTF-8, not JSON, too deeply nested, not an object, or an integer of more than MAX_INT_DIGITS
            digits (named with its field).
    """
    try:
        config = load_json(data.decode("utf-8"), "config.json")
    except UnicodeDecodeError:
        raise Skip("config.json is not UTF-8 text", subject=subject, stage=Stage.CLASSIFY) from None
    except json.JSONDecodeError as exc:
        raise Skip(
            f"config.json is not valid JSON ({exc.msg} at line {exc.lineno})", subject=subject, stage=Stage.CLASSIFY
        ) from None
    except RecursionError:
        raise Skip(
            "config.json is nested too deeply to be a model config", subject=subject, stage=Stage.CLASSIFY
        ) from None
    except Skip as skip:
        raise skip.at(subject=subject, stage=Stage.CLASSIFY) from None
    if not isinstance(config, dict):
        raise Skip("config.json is not a JSON object", subject=subject, stage=Stage.CLASSIFY)
    return config


def classify_draft(config: dict, *, subject: str | None = None) -> DraftSpec:
    """Recognise the draft's layout and kind from its config (docs/design.md §4 table, issue 32).

    The order matters: a speculators-format config is recognised by `speculators_model_type` before anything else,
    because its `architectures` borrow the names of the layouts it repackages (`DSparkDraftModel`,
    `DFlash2DraftModel`, `Qwen3DSparkModel`); DSpark proper is `markov_rank > 0`, a DSpark-architecture draft with
    `markov_rank` 0 is a DFlash draft with DeepSpec's flat fields.

    Raises:
        Skip: a DFlash config without the fields every DFlash runtime needs, or a field of the wrong type.
    """
    architectures = config.get("architectures") or [""]
    architecture = str(architectures[0]) if isinstance(architectures, list) and architectures else ""
    model_type = str(config.get("model_type", ""))
    dflash_config = config.get("dflash_config")
    hidden_size = _int_or_none(config, "hidden_size", subject, minimum=1)

    if isinstance(config.get("speculators_model_type"), str):
        return _speculators(config, architecture, subject)
    if (
        architecture == LFM2_DSPARK_ARCHITECTURE
        or architecture in DSPARK_ARCHITECTURES
        or (isinstance(dflash_config, dict) and dflash_config.get("projector_type") == "dspark")
    ):
        return _dspark(config, architecture, model_type, hidden_size, subject)
    if architecture == "DFlash2DraftModel":
        return DraftSpec(
            kind="dflash2",
            architecture=architecture,
            model_type=model_type,
            hidden_size=hidden_size,
            mask_token_id=None,
            target_layer_ids=(),
            layout="zlab-dflash2",
            decided_by="architectures DFlash2DraftModel (selector_* and conv_* fields)",
            candidate_offset=1,
        )
    if architecture != "DFlashDraftModel":
        return DraftSpec(
            kind="unknown",
            architecture=architecture or "(none)",
            model_type=model_type,
            hidden_size=hidden_size,
            mask_token_id=None,
            target_layer_ids=(),
            layout="unknown",
            decided_by=f"architectures {architecture or '(none)'}, no speculators_model_type",
        )

    if not isinstance(dflash_config, dict):
        raise Skip(
            "DFlashDraftModel config has no dflash_config (mask_token_id and target_layer_ids are required)",
            subject=subject,
            stage=Stage.CLASSIFY,
        )
    mask_token_id = _int_or_none(dflash_config, "mask_token_id", subject, at="dflash_config.")
    if mask_token_id is None:
        raise Skip("dflash_config.mask_token_id is missing", subject=subject, stage=Stage.CLASSIFY)
    layer_ids = _layer_ids(dflash_config, subject, at="dflash_config.")
    if not layer_ids:
        raise Skip(
            "dflash_config.target_layer_ids is empty; the draft taps no target layer",
            subject=subject,
            stage=Stage.CLASSIFY,
        )
    qwen3 = model_type == "qwen3"
    return DraftSpec(
        kind="dflash" if qwen3 else "dflash-other-base",
        architecture=architecture,
        model_type=model_type,
        hidden_size=hidden_size,
        mask_token_id=mask_token_id,
        target_layer_ids=layer_ids,
        num_target_layers=_int_or_none(config, "num_target_layers", subject, minimum=1),
        num_layers=_int_or_none(config, "num_hidden_layers", subject, minimum=1),
        layout="zlab-dflash" if qwen3 else "zlab-dflash-other-base",
        decided_by=f"architectures DFlashDraftModel with nested dflash_config, model_type '{model_type}'",
        candidate_offset=1,
    )


def _dspark(config: dict, architecture: str, model_type: str, hidden_size: int | None, subject: str | None):
    """DeepSpec's flat fields, SpecForge's nested `dflash_config` (projector_type "dspark") or LiquidAI's LFM2
    drafts (nested `dflash_config` without a projector type, `markov_rank` at the top)."""
    dflash_config = config.get("dflash_config")
    nested = isinstance(dflash_config, dict) and "mask_token_id" in dflash_config
    fields: dict = dflash_config if nested and isinstance(dflash_config, dict) else config
    at = "dflash_config." if nested else ""
    rank_at, rank_fields = (at, fields) if "markov_rank" in fields else ("", config)
    markov_rank = _int_or_none(rank_fields, "markov_rank", subject, at=rank_at) or 0
    if architecture == LFM2_DSPARK_ARCHITECTURE:
        layout, decided = "lfm2-dspark", f"architectures {architecture}, {rank_at}markov_rank {markov_rank}"
    elif nested:
        layout, decided = (
            "specforge-dspark",
            f"dflash_config.projector_type 'dspark', {rank_at}markov_rank {markov_rank}",
        )
    elif markov_rank > 0:
        layout, decided = "deepspec-dspark", f"flat fields, markov_rank {markov_rank}"
    else:
        layout, decided = "deepspec-dflash", "flat fields, markov_rank 0"
    return DraftSpec(
        kind="dspark",
        architecture=architecture or "DSparkDraftModel",
        model_type=model_type,
        hidden_size=hidden_size,
        mask_token_id=_int_or_none(fields, "mask_token_id", subject, at=at),
        target_layer_ids=_layer_ids(fields, subject, at=at),
        num_target_layers=_int_or_none(fields, "num_target_layers", subject, at=at, minimum=1),
        markov_rank=markov_rank,
        layout=layout,
        decided_by=decided,
        candidate_offset=0,
    )


def _speculators(config: dict, architecture: str, subject: str | None) -> DraftSpec:
    """The speculators layout (RedHatAI and others): geometry under `transformer_layer_config`, the taps as
    `aux_hidden_state_layer_ids` counted from the embedding (hidden_states index i is the output of layer i - 1),
    the target under `speculators_config.verifier`."""
    algorithm = str(config["speculators_model_type"])
    kind, layout = _SPECULATORS.get(algorithm, ("unknown", "speculators-other"))
    layer = config.get("transformer_layer_config")
    layer = layer if isinstance(layer, dict) else {}
    aux = _layer_ids({"target_layer_ids": config.get("aux_hidden_state_layer_ids")}, subject)
    anchor = config.get("sample_from_anchor")
    offset = 0 if anchor is True or algorithm == "dspark" else 1
    verifier = config.get("speculators_config")
    verifier = verifier.get("verifier") if isinstance(verifier, dict) else None
    target = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    markov_rank = _int_or_none(config, "markov_rank", subject) or 0
    vocab = _int_or_none(config, "draft_vocab_size", subject, minimum=1)
    details = [f"speculators_model_type {shown(algorithm)} (architectures {shown(architecture)} notwithstanding)"]
    if anchor is not None:
        details.append(f"sample_from_anchor {json.dumps(anchor)} (candidate offset {offset})")
    if vocab is not None:
        details.append(f"draft_vocab_size {vocab}")
    return DraftSpec(
        kind=kind,
        architecture=architecture or "(none)",
        model_type=str(layer.get("model_type", "")),
        hidden_size=_int_or_none(layer, "hidden_size", subject, at="transformer_layer_config.", minimum=1),
        mask_token_id=_int_or_none(config, "mask_token_id", subject),
        target_layer_ids=tuple(i - 1 for i in aux if i > 0),
        markov_rank=markov_rank,
        num_layers=_int_or_none(layer, "num_hidden_layers", subject, at="transformer_layer_config.", minimum=1),
        layout=layout,
        decided_by=", ".join(details),
        candidate_offset=offset,
        target_hint=target if isinstance(target, str) and target.count("/") == 1 else None,
    )


def require_exportable(
    draft: DraftSpec, toolchain: Toolchain, *, subject: str | None = None, target: str | None = None
) -> str:
    """Return the draft format the installed exporter will produce, or skip naming the layout, the field that
    decided it and the capability it waits for (`bot.core.draft_formats.skip_reason`).

    Args:
        target: the target repo id, when known, for the reason (the status page's map shows it).
    """
    optimum = f"optimum-intel {toolchain.versions.get('optimum-intel', '?')}"
    have = ", ".join(sorted(toolchain.capabilities)) or "none"

    def skip(why: str, waits_for: str | None = None) -> Skip:
        reason = draft_formats.skip_reason(draft.layout, target, f"{draft.decided_by}: {why}", waits_for)
        return Skip(reason, subject=subject, stage=Stage.CLASSIFY)

    if draft.layout.startswith("speculators-"):
        raise skip(f"{optimum} has no export for this layout (it lacks {CAPABILITY_SPECULATORS})")
    if draft.layout == "lfm2-dspark":
        raise skip(
            f"{optimum} has no DSpark exporter (it lacks {CAPABILITY_MARKOV}) and no toolchain profile exports "
            f"lfm2 targets (capabilities: {have})"
        )
    if draft.kind == "dflash":
        if CAPABILITY_PER_ROW in toolchain.capabilities:
            return "per-row"
        if CAPABILITY_DFLASH in toolchain.capabilities:
            return "stateful"
        raise skip(f"{optimum} has no DFlash draft exporter (capabilities: {have})")
    if draft.kind == "dflash-other-base":
        raise skip(f"{optimum} exports qwen3-based DFlash drafts only")
    if draft.kind == "dspark":
        if draft.markov_rank:
            raise skip(
                f"DSpark draft with markov_rank {draft.markov_rank} needs a Markov-head DSpark exporter; "
                f"{optimum} has none (capabilities: {have})"
            )
        if not {CAPABILITY_DSPARK, CAPABILITY_PER_ROW} <= toolchain.capabilities:
            raise skip(
                f"DSpark drafts need the per-row DFlash export with DSpark support; {optimum} lacks "
                f"{_missing(toolchain, CAPABILITY_DSPARK, CAPABILITY_PER_ROW)} (capabilities: {have})",
                None if draft.layout == "deepspec-dflash" else draft_formats.layout("deepspec-dflash").needs,
            )
        return "per-row"
    if draft.kind == "dflash2":
        if CAPABILITY_DFLASH2 not in toolchain.capabilities:
            raise skip(
                f"DFlash2DraftModel needs a DFlash2 exporter (selector and conv layers); {optimum} lacks "
                f"the {CAPABILITY_DFLASH2} capability (capabilities: {have})"
            )
        return "per-row"
    raise skip(f"not a DFlash or DSpark draft (architecture {draft.architecture})")


def read_target(config: dict, *, subject: str | None = None) -> TargetSpec:
    """Target dimensions; VLM targets keep their language model's in `text_config`.

    Raises:
        Skip: the config lacks the dimensions a draft is checked against, or it is pre-quantised in a way the export
            cannot take (`target_quantization`).
    """
    model_type = str(config.get("model_type", ""))
    nested = isinstance(config.get("text_config"), dict)
    text, at = (config["text_config"], "text_config.") if nested else (config, "")
    architectures = config.get("architectures") or [""]
    hidden_size = _int_or_none(text, "hidden_size", subject, at=at, minimum=1)
    num_layers = _int_or_none(text, "num_hidden_layers", subject, at=at, minimum=1)
    vocab_size = (
        _int_or_none(text, "vocab_size", subject, at=at, minimum=1)
        if text.get("vocab_size") is not None
        else _int_or_none(config, "vocab_size", subject, minimum=1)
    )
    if hidden_size is None or num_layers is None or vocab_size is None:
        raise Skip(
            "target config lacks hidden_size, num_hidden_layers or vocab_size", subject=subject, stage=Stage.CLASSIFY
        )
    layer_types = text.get("layer_types")
    # Softmax-attention layers, each one PagedAttention op in the IR: Qwen3.5's full-attention ones (its linear-
    # attention layers are GatedDeltaNet), Gemma 4's sliding-window ones beside its full-attention ones.
    full_attention = (
        sum(1 for t in layer_types if t != "linear_attention")
        if isinstance(layer_types, list) and len(layer_types) == num_layers
        else num_layers
    )
    return TargetSpec(
        model_type=model_type,
        architecture=str(architectures[0]),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        vocab_size=vocab_size,
        is_vlm=model_type in VLM_MODEL_TYPES or "text_config" in config,
        full_attention_layers=full_attention,
        quantization=target_quantization(config, subject=subject),
    )


def cross_check(
    draft: DraftSpec, target: TargetSpec, *, subject: str | None = None, target_name: str = "the target"
) -> None:
    """The draft must fit the target it drafts for; each mismatch would only surface deep inside GenAI.

    Raises:
        Skip: naming the first mismatch.
    """

    def skip(message: str) -> Skip:
        return Skip(message, subject=subject, stage=Stage.CROSS_CHECK)

    if draft.hidden_size is not None and draft.hidden_size != target.hidden_size:
        raise skip(
            f"draft hidden_size {draft.hidden_size} differs from {target_name}'s hidden_size {target.hidden_size}"
        )
    beyond = [i for i in draft.target_layer_ids if i < 0 or i >= target.num_hidden_layers]
    if beyond:
        raise skip(
            f"target_layer_ids {list(draft.target_layer_ids)} reach beyond {target_name}'s "
            f"{target.num_hidden_layers} hidden layers (bad: {beyond})"
        )
    if draft.num_target_layers is not None and draft.num_target_layers != target.num_hidden_layers:
        raise skip(
            f"draft num_target_layers {draft.num_target_layers} differs from {target_name}'s "
            f"{target.num_hidden_layers} hidden layers"
        )
    if draft.mask_token_id is not None and not 0 <= draft.mask_token_id < target.vocab_size:
        raise skip(
            f"mask_token_id {draft.mask_token_id} is outside {target_name}'s vocabulary ({target.vocab_size} tokens)"
        )


def _int_or_none(
    fields: Mapping[str, Any], key: str, subject: str | None, *, at: str = "", minimum: int = 0
) -> int | None:
    """A config.json integer field, validated where the bot reads it; None when absent (or null).

    Raises:
        Skip: present but a boolean, a float (Infinity, NaN and 1e400 included), a string or anything else that is
            not an integer, or outside [minimum, MAX_CONFIG_INT]; the message names config.json and the field.
    """
    value = fields.get(key)
    if value is None:
        return None
    return checked_int(value, f"config.json: {at}{key}", subject, minimum=minimum, maximum=MAX_CONFIG_INT)


def _layer_ids(fields: Mapping[str, Any], subject: str | None, *, at: str = "") -> tuple[int, ...]:
    """`target_layer_ids`: a list of layer indices, each a valid integer (range against the target: cross_check)."""
    value = fields.get("target_layer_ids")
    if value is None:
        return ()
    where = f"config.json: {at}target_layer_ids"
    if not isinstance(value, list):
        raise Skip(f"{where} must be a list of integers, got {shown(value)}", subject=subject, stage=Stage.CLASSIFY)
    return tuple(
        checked_int(item, f"{where}[{index}]", subject, minimum=0, maximum=MAX_CONFIG_INT)
        for index, item in enumerate(value)
    )


def _missing(toolchain: Toolchain, *capabilities: str) -> str:
    return " and ".join(c for c in capabilities if c not in toolchain.capabilities)
