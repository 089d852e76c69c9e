"""`dflash-bot inspect`: an IR folder's role, format and every check's result, for operators and tests.

The build's checks (`bot.builder.check_ir.inspect_draft` and `inspect_target`) stop at the first problem and raise. An
operator pointing `inspect` at a folder wants every problem at once, and a damaged folder (no `.xml`, a missing or
truncated `.bin`, an `.xml` that does not parse, rt_info values of the wrong type, a `config.json` with the wrong
types) is an answer, not a crash: each is a failed check with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bot.builder.ir_read import (
    check_layers_from_sdpa,
    hidden_state_layers,
    paged_attention_check,
    port_names,
    read_dflash_rt_info,
    read_rt_info,
)
from bot.builder.per_row_rules import DraftLayout, check_per_row, is_per_row
from bot.core.errors import Failure
from bot.core.record_checks import RuleResult

IR_FILES = ("openvino_model.xml", "openvino_language_model.xml")
# OpenVINO prefixes its messages with the C++ source line that raised them; the reason is the text after it.
_SOURCE_LINE = re.compile(r"^(Exception from|Check '.*' failed at) \S+:\d+:?$")

Rules = list[tuple[RuleResult, bool]]  # each rule with whether it is required


def inspect_folder(ir_dir: Path) -> dict[str, Any]:
    """Read an IR folder and check it by its role's and format's rules, every rule reported.

    A model whose rt_info has `dflash_mode` or `dflash` is a draft, checked by its format's rules (a stateful
    draft's refusal by SDPA→PagedAttention is reported as expected, `required: false`); any other is a target,
    checked for the PagedAttention conversion and the hidden-state annotation GenAI taps. A folder without a
    readable model gets the one failed rule `ir_files`, saying why.

    Args:
        ir_dir: an export's output folder, or a bundle's `draft/` or `target/`.

    Returns:
        The record `dflash-bot inspect` prints: `path`, `role` (draft, target, or unknown when nothing could be
        read), `format`, `inputs`, `outputs`, `dflash_rt_info`, `rules` (each `rule`, `passed`, `detail`,
        `required`) and `passed` (no required rule failed).
    """
    path, model, unreadable = _read_model(ir_dir)
    record: dict[str, Any] = {"path": str(path or ir_dir), "role": "unknown", "format": None}
    record |= {"inputs": [], "outputs": [], "dflash_rt_info": {}}
    if model is None:
        return _finish(
            record, [(unreadable or RuleResult(rule="ir_files", passed=False, detail="no model read"), True)]
        )
    assert path is not None
    inputs, rt_info = port_names(model.inputs), read_rt_info(model)
    record |= {
        "inputs": list(inputs),
        "outputs": list(port_names(model.outputs)),
        "dflash_rt_info": {k: v for k, v in rt_info.items() if k in ("dflash_mode", "dflash")},
    }
    try:
        if "dflash_mode" not in rt_info and "dflash" not in rt_info:
            record |= {"role": "target", "format": "decoder"}
            rules = _target_rules(path, model, rt_info)
        elif is_per_row(inputs, rt_info):
            record |= {"role": "draft", "format": "per-row"}
            rules, extra = _per_row_rules(path, ir_dir)
            record |= extra
        else:
            record |= {"role": "draft", "format": "stateful", "paged_attention_ready": False}
            rules = _stateful_rules(path, model, inputs, rt_info)
    except RuntimeError as exc:  # read, but OpenVINO's passes could not process it
        rules = [
            (
                RuleResult(
                    rule="openvino", passed=False, detail=f"OpenVINO could not process the model: {_reason(exc)}"
                ),
                True,
            )
        ]
    return _finish(record, rules)


def _read_model(ir_dir: Path) -> tuple[Path | None, Any, RuleResult | None]:
    """(the .xml, the model, None), or the failed `ir_files` rule saying why no model could be read."""
    # openvino: a second to import; only the processes that read an IR need it
    import openvino as ov

    path = next((ir_dir / name for name in IR_FILES if (ir_dir / name).is_file()), None)
    if path is None:
        return (
            None,
            None,
            RuleResult(rule="ir_files", passed=False, detail=f"{ir_dir} holds no {' or '.join(IR_FILES)}"),
        )
    weights = path.with_suffix(".bin")
    try:
        return path, ov.Core().read_model(path), None
    except RuntimeError as exc:
        missing = "" if weights.is_file() else f"{weights.name} is missing; "
        detail = f"{missing}OpenVINO cannot read {path.name}: {_reason(exc)}"
        return path, None, RuleResult(rule="ir_files", passed=False, detail=detail)


def _reason(exc: Exception, limit: int = 400) -> str:
    """OpenVINO's message without the source lines it starts with."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join([line for line in lines if not _SOURCE_LINE.match(line)] or lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _target_rules(path: Path, model, rt_info: dict) -> Rules:
    check = paged_attention_check(path, check_layers_from_sdpa(model))
    try:
        hidden_state_layers(rt_info)
        hidden = RuleResult(
            rule="hidden_states_decoder_layers", passed=True, detail=str(rt_info["hidden_states_decoder_layers"])
        )
    except Failure as failure:
        hidden = RuleResult(rule="hidden_states_decoder_layers", passed=False, detail=failure.message)
    detail = check.reason or f"{check.paged_attention_ops} PagedAttention ops, no state left"
    return [(RuleResult(rule="paged_attention", passed=check.ready, detail=detail), True), (hidden, True)]


def _per_row_rules(path: Path, ir_dir: Path) -> tuple[Rules, dict[str, Any]]:
    rules: Rules = []
    try:
        layout = DraftLayout.read(ir_dir)
    except Failure as failure:
        layout = None
        rules.append((RuleResult(rule="config", passed=False, detail=failure.message), True))
    report = check_per_row(path, layout)
    rules += [(rule, True) for rule in report.rules]
    return rules, {"paged_attention_ready": report.passed, "layer_windows": list(report.layer_windows)}


def _stateful_rules(path: Path, model, inputs: tuple[str, ...], rt_info: dict) -> Rules:
    check = paged_attention_check(path, check_layers_from_sdpa(model))
    stateful = {"inputs_embeds", "hidden_states", "beam_idx"} <= set(inputs)
    problems = read_dflash_rt_info(rt_info, per_row=False).problems
    signature = (
        "inputs_embeds, hidden_states, beam_idx"
        if stateful
        else f"neither the stateful nor the per-row signature: {list(inputs)}"
    )
    variables = len(model.get_variables())
    return [
        (RuleResult(rule="signature", passed=stateful, detail=signature), True),
        (
            RuleResult(
                rule="rt_info",
                passed=not problems,
                detail="; ".join(problems) or "dflash_mode, dflash/mask_token_id, dflash/target_layer_ids",
            ),
            True,
        ),
        (RuleResult(rule="kv_cache_state", passed=bool(variables), detail=f"{variables} variables"), True),
        (RuleResult(rule="paged_attention", passed=check.ready, detail=check.reason or "converted"), False),
    ]


def _finish(record: dict[str, Any], rules: Rules) -> dict[str, Any]:
    record["rules"] = [rule.model_dump() | {"required": required} for rule, required in rules]
    record["passed"] = not any(rule.passed is False for rule, required in rules if required)
    return record
