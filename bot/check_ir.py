"""Check each exported IR by the rules of its format (DESIGN §5, §6).

The target must convert SDPA→PagedAttention (one PagedAttention op per attention layer, no state left) and carry
the `hidden_states_decoder_layers` annotation GenAI taps. The draft's format is detected from its inputs: the
stateful format (optimum-intel 2.2.0) is expected to be refused by the transformation, which is reported, not
hidden; a per-row draft must convert like any decoder. The DFlash rt_info must match the source config.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bot.checkpoints import DraftSpec, TargetSpec
from bot.errors import Failure

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


@dataclass(frozen=True)
class TargetIrReport:
    ir_file: str
    attention_layers: int
    paged_attention: PagedAttentionCheck
    hidden_state_layers: tuple[int, ...]
    quantization: dict = field(default_factory=dict)
    linear_attention_layers: int = 0
    linear_attention_state: str | None = None  # how the transformation handled it, for hybrid targets

    def as_provenance(self) -> dict:
        return {"ir_file": self.ir_file, "attention_layers": self.attention_layers,
                "paged_attention_ops": self.paged_attention.paged_attention_ops,
                "paged_attention_ready": self.paged_attention.ready,
                "sdpa_left": self.paged_attention.sdpa_left, "state_ops_left": self.paged_attention.state_ops_left,
                "linear_attention_layers": self.linear_attention_layers,
                "linear_attention_ops": dict(self.paged_attention.linear_attention_ops),
                "linear_attention_state_tables": self.paged_attention.state_tables,
                "linear_attention_state": self.linear_attention_state,
                "hidden_state_layers": list(self.hidden_state_layers), "quantization": self.quantization}


@dataclass(frozen=True)
class DraftIrReport:
    format: str  # stateful | per-row
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    candidate_position_offset: int | None
    paged_attention: PagedAttentionCheck
    quantization: dict = field(default_factory=dict)

    def as_provenance(self) -> dict:
        return {"format": self.format, "inputs": list(self.inputs), "outputs": list(self.outputs),
                "mask_token_id": self.mask_token_id, "target_layer_ids": list(self.target_layer_ids),
                "candidate_position_offset": self.candidate_position_offset,
                "paged_attention_ready": self.paged_attention.ready, "reason": self.paged_attention.reason,
                "paged_attention_ops": self.paged_attention.paged_attention_ops,
                "quantization": self.quantization}


def read_rt_info(model) -> dict:
    """The model's rt_info as plain nested dicts of strings."""
    rt = model.get_rt_info()
    return {key: _to_python(rt[key]) for key in rt.keys()}


def _to_python(value):
    if isinstance(value, dict):
        return {k: _to_python(v) for k, v in value.items()}
    if hasattr(value, "astype"):
        try:
            return _to_python(value.astype(dict))
        except Exception:  # noqa: BLE001 - OVAny offers no type query; a scalar refuses the dict cast
            return value.astype(str)
    return value


def quantization_parameters(rt_info: dict) -> dict:
    """NNCF's record of how the weights were compressed (the card's Quantization Parameters)."""
    compression = rt_info.get("nncf", {}).get("weight_compression", {})
    keys = ("mode", "group_size", "ratio", "all_layers", "awq", "scale_estimation", "gptq", "backup_mode",
            "sensitivity_metric")
    return {k: compression[k] for k in keys if k in compression}


def paged_attention_check(model_path: Path, expected_layers: int) -> PagedAttentionCheck:
    """Run SDPA→PagedAttention on a fresh copy and compare op counts with `expected_layers`."""
    import openvino as ov
    from openvino._offline_transformations import paged_attention_transformation

    model = ov.Core().read_model(model_path)
    before = Counter(op.get_type_name() for op in model.get_ops())
    try:
        paged_attention_transformation(model, False, False, False, False, False, False, False)
    except RuntimeError as exc:
        return PagedAttentionCheck(ready=False, reason=_first_lines(str(exc)),
                                   sdpa_before=before["ScaledDotProductAttention"], paged_attention_ops=0,
                                   sdpa_left=before["ScaledDotProductAttention"],
                                   state_ops_left=sum(before[o] for o in _STATE_OPS))
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
    return PagedAttentionCheck(ready=not problems, reason="; ".join(problems) or None,
                               sdpa_before=before["ScaledDotProductAttention"], paged_attention_ops=pa_ops,
                               sdpa_left=sdpa_left, state_ops_left=state_left,
                               linear_attention_ops={op: after[op] for op in LINEAR_ATTENTION_OPS if after[op]},
                               state_tables=tables,
                               linear_before={op: before[op] for op in ("Loop", "GroupConvolution") if before[op]})


def inspect_target(ir_dir: Path, target: TargetSpec, draft: DraftSpec) -> TargetIrReport:
    """Check the target IR: PagedAttention conversion and the hidden-state taps the draft needs.

    Raises:
        Failure: the IR is missing, does not convert to one PagedAttention op per attention layer, or lacks the
            `hidden_states_decoder_layers` annotation for a layer the draft taps.
    """
    import openvino as ov

    ir_file = "openvino_language_model.xml" if target.is_vlm else "openvino_model.xml"
    path = ir_dir / ir_file
    if not path.is_file():
        raise Failure(f"target IR {ir_file} was not written by the export", stage="inspect")
    rt_info = read_rt_info(ov.Core().read_model(path))
    check = paged_attention_check(path, target.full_attention_layers)
    if not check.ready:
        raise Failure(f"target IR fails the SDPA→PagedAttention check: {check.reason}", stage="inspect")
    annotation = rt_info.get("hidden_states_decoder_layers")
    if not annotation:
        raise Failure("target IR has no hidden_states_decoder_layers rt_info (export with optimum-intel >= 2.2.0)",
                      stage="inspect")
    try:
        layers = tuple(sorted(int(k) for k in json.loads(annotation)["layers"]))
    except (ValueError, KeyError, TypeError):
        raise Failure("target IR's hidden_states_decoder_layers rt_info is malformed", stage="inspect") from None
    untapped = [i for i in draft.target_layer_ids if i not in layers]
    if untapped:
        raise Failure(f"target IR annotates hidden states of layers {list(layers)}, not the draft's {untapped}",
                      stage="inspect")
    linear_layers = target.num_hidden_layers - target.full_attention_layers
    return TargetIrReport(ir_file=ir_file, attention_layers=target.full_attention_layers, paged_attention=check,
                          hidden_state_layers=layers, quantization=quantization_parameters(rt_info),
                          linear_attention_layers=linear_layers,
                          linear_attention_state=linear_attention_state(check, linear_layers))


def linear_attention_state(check: PagedAttentionCheck, linear_layers: int) -> str | None:
    """How SDPAToPagedAttention handled the linear-attention (GatedDeltaNet) state of a hybrid target.

    Each linear-attention layer must become one PagedGatedDeltaNet and one PagedCausalConv1D op, with its
    recurrent and convolution state moved out of ReadValue/Assign into two paged state tables: that is what lets
    GenAI keep and roll back the state per sequence inside a verification window.

    Raises:
        Failure: the counts do not match the layers, so GenAI would run the state unpaged or not at all.
    """
    if not linear_layers:
        return None
    ops = check.linear_attention_ops
    expected = {op: linear_layers for op in LINEAR_ATTENTION_OPS}
    if ops != expected or check.state_tables != 2 * linear_layers:
        raise Failure(f"target IR has {linear_layers} linear-attention layers but SDPA→PagedAttention made "
                      f"{ops or 'no paged linear-attention ops'} and {check.state_tables} state tables (expected "
                      f"{expected} and {2 * linear_layers})", stage="inspect")
    return (f"paged: {linear_layers} PagedGatedDeltaNet + {linear_layers} PagedCausalConv1D ops (from "
            f"{check.linear_before}); recurrent and convolution state moved from ReadValue/Assign into "
            f"{check.state_tables} block tables (gated_delta_state_table.N, conv_state_table.N), none left as "
            "model state")


def inspect_draft(ir_dir: Path, draft: DraftSpec) -> DraftIrReport:
    """Detect the draft format from the IR and check it by that format's rules.

    Raises:
        Failure: unknown input signature, missing or wrong DFlash rt_info, or a per-row draft that does not
            convert to PagedAttention.
    """
    import openvino as ov

    path = ir_dir / "openvino_model.xml"
    if not path.is_file():
        raise Failure("draft IR openvino_model.xml was not written by the export", stage="inspect")
    model = ov.Core().read_model(path)
    inputs = tuple(sorted(i.get_any_name() for i in model.inputs))
    outputs = tuple(sorted(o.get_any_name() for o in model.outputs))
    rt_info = read_rt_info(model)

    if "token_type_ids" in inputs and {"inputs_embeds", "hidden_states"} <= set(inputs):
        draft_format = "per-row"
    elif {"inputs_embeds", "hidden_states", "beam_idx"} <= set(inputs) and model.get_variables():
        draft_format = "stateful"
    else:
        raise Failure(f"draft IR has neither the stateful nor the per-row DFlash signature (inputs: {list(inputs)})",
                      stage="inspect")
    if str(rt_info.get("dflash_mode", "")).lower() != "true":
        raise Failure("draft IR lacks rt_info dflash_mode=True, so GenAI would not run it as DFlash", stage="inspect")
    dflash = rt_info.get("dflash", {}) if isinstance(rt_info.get("dflash"), dict) else {}
    try:
        mask_token_id = int(dflash["mask_token_id"])
        layer_ids = tuple(int(x) for x in str(dflash["target_layer_ids"]).split(","))
    except (KeyError, ValueError):
        raise Failure("draft IR rt_info dflash/mask_token_id or dflash/target_layer_ids is missing or malformed",
                      stage="inspect") from None
    if mask_token_id != draft.mask_token_id or layer_ids != draft.target_layer_ids:
        raise Failure(f"draft IR rt_info (mask {mask_token_id}, layers {list(layer_ids)}) disagrees with the "
                      f"source config (mask {draft.mask_token_id}, layers {list(draft.target_layer_ids)})",
                      stage="inspect")
    offset = dflash.get("candidate_position_offset")
    # A per-row draft must convert like any decoder: one PagedAttention op per draft layer.
    check = paged_attention_check(path, draft.num_layers or check_layers_from_sdpa(model))
    if draft_format == "stateful":
        if not model.get_variables():
            raise Failure("stateful draft IR has no KV-cache state", stage="inspect")
        if not check.ready:
            check = PagedAttentionCheck(
                False, "stateful DFlash draft (optimum-intel 2.2.0 format): SDPAToPagedAttention refuses it "
                f"({check.reason}); GenAI runs it as a stateful model beside the PagedAttention target",
                check.sdpa_before, 0, check.sdpa_left, check.state_ops_left)
    elif not check.ready:
        raise Failure(f"per-row draft IR fails the SDPA→PagedAttention check: {check.reason}", stage="inspect")
    return DraftIrReport(format=draft_format, inputs=inputs, outputs=outputs, mask_token_id=mask_token_id,
                         target_layer_ids=layer_ids, candidate_position_offset=int(offset) if offset else None,
                         paged_attention=check, quantization=quantization_parameters(rt_info))


def check_layers_from_sdpa(model) -> int:
    return sum(1 for op in model.get_ops() if op.get_type_name() == "ScaledDotProductAttention")


def _first_lines(message: str, limit: int = 3) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return " ".join(lines[:limit])
