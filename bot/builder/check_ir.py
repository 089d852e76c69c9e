"""Check each exported IR by the rules of its format (docs/design.md §5, §6).

The target must convert SDPA→PagedAttention (one PagedAttention op per attention layer, no state left) and carry
the `hidden_states_decoder_layers` annotation GenAI taps. The draft's format is detected from its inputs: the
stateful format (optimum-intel 2.2.0) is expected to be refused by the transformation, which is reported, not
hidden; a per-row draft must convert like any decoder (`bot.builder.per_row_rules`). The DFlash rt_info must match
the source config.

Each check returns the record's own part (`record_checks.TargetInspect`, `record_checks.DraftInspect`): what the
build record says about an IR is what the check found, with no second type in between.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from bot.builder.ir_read import (
    LINEAR_ATTENTION_OPS,
    PagedAttentionCheck,
    check_layers_from_sdpa,
    hidden_state_layers,
    paged_attention_check,
    port_names,
    quantization_parameters,
    read_dflash_rt_info,
    read_rt_info,
)
from bot.builder.per_row_rules import DraftLayout, check_per_row, is_per_row
from bot.core.errors import Failure, Stage
from bot.core.record_checks import DraftInspect, RuleResult, TargetInspect
from bot.discover.checkpoints import DraftSpec, TargetSpec

_STATEFUL_INPUTS = {"inputs_embeds", "hidden_states", "beam_idx"}


def inspect_target(ir_dir: Path, target: TargetSpec, draft: DraftSpec) -> TargetInspect:
    """Check the target IR: PagedAttention conversion and the hidden-state taps the draft needs.

    Raises:
        Failure: the IR is missing, does not convert to one PagedAttention op per attention layer, or lacks the
            `hidden_states_decoder_layers` annotation for a layer the draft taps.
    """
    # openvino: a second to import; only the processes that read an IR need it
    import openvino as ov

    ir_file = "openvino_language_model.xml" if target.is_vlm else "openvino_model.xml"
    path = ir_dir / ir_file
    if not path.is_file():
        raise Failure(f"target IR {ir_file} was not written by the export", stage=Stage.INSPECT)
    rt_info = read_rt_info(ov.Core().read_model(path))
    check = paged_attention_check(path, target.full_attention_layers)
    if not check.ready:
        raise Failure(f"target IR fails the SDPA→PagedAttention check: {check.reason}", stage=Stage.INSPECT)
    layers = hidden_state_layers(rt_info)
    untapped = [i for i in draft.target_layer_ids if i not in layers]
    if untapped:
        raise Failure(
            f"target IR annotates hidden states of layers {list(layers)}, not the draft's {untapped}",
            stage=Stage.INSPECT,
        )
    linear_layers = target.num_hidden_layers - target.full_attention_layers
    return TargetInspect(
        ir_file=ir_file,
        attention_layers=target.full_attention_layers,
        paged_attention_ops=check.paged_attention_ops,
        paged_attention_ready=check.ready,
        sdpa_left=check.sdpa_left,
        state_ops_left=check.state_ops_left,
        linear_attention_layers=linear_layers,
        linear_attention_ops=dict(check.linear_attention_ops),
        linear_attention_state_tables=check.state_tables,
        linear_attention_state=linear_attention_state(check, linear_layers),
        hidden_state_layers=list(layers),
        quantization=quantization_parameters(rt_info),
    )


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
        raise Failure(
            f"target IR has {linear_layers} linear-attention layers but SDPA→PagedAttention made "
            f"{ops or 'no paged linear-attention ops'} and {check.state_tables} state tables (expected "
            f"{expected} and {2 * linear_layers})",
            stage=Stage.INSPECT,
        )
    return (
        f"paged: {linear_layers} PagedGatedDeltaNet + {linear_layers} PagedCausalConv1D ops (from "
        f"{check.linear_before}); recurrent and convolution state moved from ReadValue/Assign into "
        f"{check.state_tables} block tables (gated_delta_state_table.N, conv_state_table.N), none left as "
        "model state"
    )


def inspect_draft(ir_dir: Path, draft: DraftSpec) -> DraftInspect:
    """Detect the draft format from the IR and check it by that format's rules.

    Raises:
        Failure: unknown input signature, missing or wrong DFlash rt_info, or a per-row draft that does not
            convert to PagedAttention.
    """
    # openvino: a second to import; only the processes that read an IR need it
    import openvino as ov

    path = ir_dir / "openvino_model.xml"
    if not path.is_file():
        raise Failure("draft IR openvino_model.xml was not written by the export", stage=Stage.INSPECT)
    model = ov.Core().read_model(path)
    inputs, outputs = port_names(model.inputs), port_names(model.outputs)
    rt_info = read_rt_info(model)
    draft_format = _draft_format(inputs, rt_info, stateful=bool(model.get_variables()))
    mask_token_id, layer_ids, offset = _dflash_rt_info(rt_info, draft)
    rules: tuple[RuleResult, ...] = ()
    windows: tuple[int, ...] = ()
    if draft_format == "per-row":
        report = check_per_row(path, DraftLayout.read(ir_dir, draft.num_layers))
        if not report.passed:
            raise Failure(f"per-row draft IR breaks the per-row rules: {report.failure_reason()}", stage=Stage.INSPECT)
        check, rules, windows = report.paged_attention, report.rules, report.layer_windows
    else:
        check = _stateful_check(path, model, draft)
    return DraftInspect(
        format=draft_format,
        inputs=list(inputs),
        outputs=list(outputs),
        mask_token_id=mask_token_id,
        target_layer_ids=list(layer_ids),
        candidate_position_offset=offset,  # 0 is a real value here
        paged_attention_ready=check.ready,
        reason=check.reason,
        paged_attention_ops=check.paged_attention_ops,
        quantization=quantization_parameters(rt_info),
        rules=list(rules),
        layer_windows=list(windows),
    )


def _draft_format(inputs: tuple[str, ...], rt_info: dict, *, stateful: bool) -> Literal["per-row", "stateful"]:
    """The draft's format from its inputs, rt_info and KV-cache state.

    Raises:
        Failure: neither format's signature.
    """
    if is_per_row(inputs, rt_info):
        return "per-row"
    if set(inputs) >= _STATEFUL_INPUTS and stateful:
        return "stateful"
    raise Failure(
        f"draft IR has neither the stateful nor the per-row DFlash signature (inputs: {list(inputs)})",
        stage=Stage.INSPECT,
    )


def _dflash_rt_info(rt_info: dict, draft: DraftSpec) -> tuple[int, tuple[int, ...], int | None]:
    """(mask token id, target layer ids, candidate position offset) from the draft's rt_info, checked against its
    source config (the per-row rules check the offset).

    Raises:
        Failure: `dflash_mode` is not on, a value is missing or malformed, or the values disagree with the config.
    """
    dflash = read_dflash_rt_info(rt_info, per_row=False)
    if not dflash.mode:
        raise Failure(
            "draft IR lacks rt_info dflash_mode=True, so GenAI would not run it as DFlash", stage=Stage.INSPECT
        )
    mask_token_id, layer_ids = dflash.mask_token_id, dflash.target_layer_ids
    if mask_token_id is None or layer_ids is None:
        raise Failure(
            "draft IR rt_info dflash/mask_token_id or dflash/target_layer_ids is missing or malformed: "
            + "; ".join(dflash.problems),
            stage=Stage.INSPECT,
        )
    if mask_token_id != draft.mask_token_id or layer_ids != draft.target_layer_ids:
        raise Failure(
            f"draft IR rt_info (mask {mask_token_id}, layers {list(layer_ids)}) disagrees with the "
            f"source config (mask {draft.mask_token_id}, layers {list(draft.target_layer_ids)})",
            stage=Stage.INSPECT,
        )
    return mask_token_id, layer_ids, dflash.candidate_position_offset


def _stateful_check(path: Path, model, draft: DraftSpec) -> PagedAttentionCheck:
    """A stateful draft (one with KV-cache state, `_draft_format`): the transformation is expected to refuse it,
    which is reported, not hidden."""
    check = paged_attention_check(path, draft.num_layers or check_layers_from_sdpa(model))
    if check.ready:
        return check
    return PagedAttentionCheck(
        ready=False,
        reason="stateful DFlash draft (optimum-intel 2.2.0 format): SDPAToPagedAttention refuses it "
        f"({check.reason}); GenAI runs it as a stateful model beside the PagedAttention target",
        sdpa_before=check.sdpa_before,
        paged_attention_ops=0,
        sdpa_left=check.sdpa_left,
        state_ops_left=check.state_ops_left,
    )
