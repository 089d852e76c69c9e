"""What an exported IR says: its rt_info, its ports, and what SDPA→PagedAttention makes of it.

The readers the build's checks (`bot.builder.check_ir`, `bot.builder.per_row_rules`) and `dflash-bot inspect`
(`bot.builder.inspect_ir`) share. An IR was written by an export child, so every value is parsed defensively: a
damaged one becomes a problem named in words, never a crash.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bot.core.errors import Failure, Stage

_STATE_OPS = ("ReadValue", "Assign")
# What SDPAToPagedAttention makes of a GatedDeltaNet layer (Qwen3.5/3.6 hybrid targets): the recurrence (a Loop)
# and the short convolution (a GroupConvolution) become paged ops whose state lives in per-layer block tables.
LINEAR_ATTENTION_OPS = ("PagedGatedDeltaNet", "PagedCausalConv1D")
_STATE_TABLE_SUFFIXES = ("conv_state_table", "gated_delta_state_table")


@dataclass(frozen=True)
class PagedAttentionCheck:
    """Op counts before and after `paged_attention_transformation` on a copy of the model."""

    ready: bool
    reason: str | None
    sdpa_before: int
    paged_attention_ops: int
    sdpa_left: int
    state_ops_left: int
    linear_attention_ops: dict[str, int] = field(default_factory=dict)  # LINEAR_ATTENTION_OPS after the pass
    state_tables: int = 0  # paged linear-attention state inputs (conv_state_table.N, gated_delta_state_table.N)
    linear_before: dict[str, int] = field(default_factory=dict)  # Loop / GroupConvolution before the pass


def read_rt_info(model) -> dict:
    """The model's rt_info as plain nested dicts of strings."""
    rt = model.get_rt_info()
    return {key: _to_python(rt[key]) for key in rt}


def _to_python(value):
    if isinstance(value, dict):
        return {k: _to_python(v) for k, v in value.items()}
    if hasattr(value, "astype"):
        try:
            return _to_python(value.astype(dict))
        except Exception:
            return value.astype(str)
    return value


def port_names(ports) -> tuple[str, ...]:
    """Sorted names of a model's inputs or outputs; a damaged IR may hold a tensor without any name."""
    return tuple(sorted(port.get_any_name() if port.get_names() else "(unnamed)" for port in ports))


@dataclass(frozen=True)
class DFlashRtInfo:
    """The DFlash rt_info GenAI reads from a draft, each value parsed (None: missing or of the wrong type), and
    what is wrong with it, one problem per key, so a damaged IR is reported rather than crashing a check."""

    mode: bool
    mask_token_id: int | None
    target_layer_ids: tuple[int, ...] | None
    candidate_position_offset: int | None
    problems: tuple[str, ...]


def read_dflash_rt_info(rt_info: dict, *, per_row: bool) -> DFlashRtInfo:
    """Parse `dflash_mode` and `dflash/*` (values are strings in an IR; a map where a value belongs is wrong).

    Args:
        rt_info: `read_rt_info`'s result.
        per_row: the per-row format, which must also carry `dflash/candidate_position_offset` (0 or 1).
    """
    problems = []
    mode = rt_info.get("dflash_mode")
    mode_on = isinstance(mode, str) and mode.lower() == "true"
    if not mode_on:
        problems.append("dflash_mode is not True" + (f" ({_shown(mode)})" if mode is not None else ""))
    dflash = rt_info.get("dflash", {})
    if not isinstance(dflash, dict):
        problems.append(f"dflash is {_shown(dflash)}, not a group of values")
        dflash = {}
    mask = _natural(dflash.get("mask_token_id"))
    if mask is None:
        problems.append(_bad("mask_token_id", dflash, "a token id"))
    layers = None
    raw_layers = dflash.get("target_layer_ids")
    if isinstance(raw_layers, str):
        parsed = [_natural(part) for part in raw_layers.split(",")]
        layers = tuple(p for p in parsed if p is not None) if None not in parsed else None
    if layers is None:
        problems.append(_bad("target_layer_ids", dflash, "comma-separated layer numbers"))
    offset = dflash.get("candidate_position_offset")
    if offset is None and per_row:
        problems.append("missing dflash/candidate_position_offset")
    elif offset is not None and offset not in ("0", "1"):
        problems.append(f"dflash/candidate_position_offset is {_shown(offset)}, not 0 or 1")
    position = int(offset) if offset in ("0", "1") else None
    return DFlashRtInfo(mode_on, mask, layers, position, tuple(problems))


def _natural(value: object) -> int | None:
    """A non-negative integer written as text (an rt_info value), else None."""
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _bad(key: str, dflash: dict, wanted: str) -> str:
    if key not in dflash:
        return f"missing dflash/{key}"
    return f"dflash/{key} is {_shown(dflash[key])}, not {wanted}"


def _shown(value: object, limit: int = 80) -> str:
    """A value from an IR, quoted and cut short, for a reason."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def hidden_state_layers(rt_info: dict) -> tuple[int, ...]:
    """The target layers whose hidden states GenAI taps (`hidden_states_decoder_layers`, JSON with `layers`).

    Raises:
        Failure: the annotation is missing (an export older than optimum-intel 2.2.0) or malformed.
    """
    annotation = rt_info.get("hidden_states_decoder_layers")
    if not annotation:
        raise Failure(
            "target IR has no hidden_states_decoder_layers rt_info (export with optimum-intel >= 2.2.0)",
            stage=Stage.INSPECT,
        )
    try:
        return tuple(sorted(int(k) for k in json.loads(annotation)["layers"]))
    except (ValueError, KeyError, TypeError, IndexError):
        raise Failure(
            f"target IR's hidden_states_decoder_layers rt_info is malformed: {_shown(annotation)}", stage=Stage.INSPECT
        ) from None


def quantization_parameters(rt_info: dict) -> dict:
    """NNCF's record of how the weights were compressed (the card's Quantization Parameters)."""
    compression = rt_info.get("nncf", {}).get("weight_compression", {})
    keys = (
        "mode",
        "group_size",
        "ratio",
        "all_layers",
        "awq",
        "scale_estimation",
        "gptq",
        "backup_mode",
        "sensitivity_metric",
    )
    return {k: compression[k] for k in keys if k in compression}


def paged_attention_check(model_path: Path, expected_layers: int) -> PagedAttentionCheck:
    """Run SDPA→PagedAttention on a fresh copy and compare op counts with `expected_layers`."""
    # openvino: a second to import; only the processes that read an IR need it
    import openvino as ov

    model = ov.Core().read_model(model_path)
    return paged_attention_counts(model, expected_layers)


def paged_attention_counts(model, expected_layers: int) -> PagedAttentionCheck:
    """Run the transformation on `model` (changed in place) and count what it made."""
    # openvino: a second to import; only the processes that read an IR need it
    from openvino._offline_transformations import paged_attention_transformation

    before = Counter(op.get_type_name() for op in model.get_ops())
    try:
        paged_attention_transformation(model, False, False, False, False, False, False, False)
    except RuntimeError as exc:
        # The pass rewrites the graph before it validates it, so the counts say how far it got.
        after = Counter(op.get_type_name() for op in model.get_ops())
        return PagedAttentionCheck(
            ready=False,
            reason=_first_lines(str(exc)),
            sdpa_before=before["ScaledDotProductAttention"],
            paged_attention_ops=after["PagedAttentionExtension"],
            sdpa_left=after["ScaledDotProductAttention"],
            state_ops_left=sum(after[o] for o in _STATE_OPS),
        )
    after = Counter(op.get_type_name() for op in model.get_ops())
    pa_ops, sdpa_left = after["PagedAttentionExtension"], after["ScaledDotProductAttention"]
    state_left = sum(after[o] for o in _STATE_OPS)
    problems = []
    if pa_ops != expected_layers:
        problems.append(f"{pa_ops} PagedAttention ops for {expected_layers} attention layers")
    if sdpa_left:
        problems.append(f"{sdpa_left} ScaledDotProductAttention ops left")
    if state_left:
        problems.append(f"{state_left} ReadValue/Assign ops left")
    tables = sum(1 for i in model.inputs if i.get_any_name().split(".")[0] in _STATE_TABLE_SUFFIXES)
    return PagedAttentionCheck(
        ready=not problems,
        reason="; ".join(problems) or None,
        sdpa_before=before["ScaledDotProductAttention"],
        paged_attention_ops=pa_ops,
        sdpa_left=sdpa_left,
        state_ops_left=state_left,
        linear_attention_ops={op: after[op] for op in LINEAR_ATTENTION_OPS if after[op]},
        state_tables=tables,
        linear_before={op: before[op] for op in ("Loop", "GroupConvolution") if before[op]},
    )


def check_layers_from_sdpa(model) -> int:
    return sum(1 for op in model.get_ops() if op.get_type_name() == "ScaledDotProductAttention")


def _first_lines(message: str, limit: int = 3) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return " ".join(lines[:limit])
