"""The per-row draft format's rules (optimum-intel PR #2096; docs/design.md §5), each checked and reported on its own.

A per-row draft must carry the per-row inputs and rt_info, convert to one PagedAttention op per draft layer, feed
`token_type_ids` to every one of them, and keep each layer's sliding window. Every rule is evaluated, so a report
names each broken one; a rule an earlier failure left nothing to check reports None. The results are the record's
own `RuleResult`s, so the build record and `dflash-bot inspect` show them as they were found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bot.builder.ir_read import (
    PagedAttentionCheck,
    check_layers_from_sdpa,
    paged_attention_counts,
    port_names,
    read_dflash_rt_info,
    read_rt_info,
)
from bot.core.errors import Failure, Stage
from bot.core.record_checks import RuleResult

PER_ROW_INPUTS = ("inputs_embeds", "hidden_states", "position_ids", "token_type_ids")
# rt_info under `dflash/` that GenAI reads from a per-row draft; the offset says which rows are candidates.
PER_ROW_RT_INFO = ("mask_token_id", "target_layer_ids", "candidate_position_offset")
# PagedAttentionExtension's inputs: query, key, value, key_cache, value_cache, past_lens, subsequence_begins,
# block_indices, block_indices_begins, scale, sliding_window, ... (the op's specification).
_PA_SLIDING_WINDOW = 10
_PA_FIRST_MODEL_WIDE = 5
_NOT_CONVERTED = "not checked: the PagedAttention conversion is incomplete"


@dataclass(frozen=True)
class DraftLayout:
    """What the draft's config says its attention layers are: kind per layer and the sliding window."""

    layer_types: tuple[str, ...]
    sliding_window: int

    def window(self, layer: int) -> int:
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else 0

    @classmethod
    def read(cls, ir_dir: Path, num_layers: int | None = None) -> DraftLayout | None:
        """From the `config.json` the export writes beside the IR (None when there is none to read).

        Raises:
            Failure: the config is there but its layer count, layer kinds or window have the wrong types.
        """
        try:
            config = json.loads((ir_dir / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(config, dict):
            raise Failure("config.json beside the draft IR is not a JSON object", stage=Stage.INSPECT)
        layers, window = config.get("num_hidden_layers") or num_layers or 0, config.get("sliding_window") or 0
        types = config.get("layer_types") or ["full_attention"] * (layers if isinstance(layers, int) else 0)
        if not isinstance(layers, int) or not isinstance(window, int) or not isinstance(types, list):
            raise Failure(
                "config.json beside the draft IR has a malformed num_hidden_layers, layer_types or sliding_window",
                stage=Stage.INSPECT,
            )
        return cls(layer_types=tuple(str(t) for t in types), sliding_window=window)


@dataclass(frozen=True)
class PerRowReport:
    rules: tuple[RuleResult, ...]
    paged_attention: PagedAttentionCheck
    layer_windows: tuple[int, ...]  # each PagedAttention op's sliding window, in layer order

    @property
    def passed(self) -> bool:
        """No rule failed (a rule left unchecked for want of a config is no failure; one left unchecked after a
        failed conversion comes with that failure)."""
        return not self.failed()

    def failed(self) -> list[RuleResult]:
        return [r for r in self.rules if r.passed is False]

    def failure_reason(self) -> str:
        return "; ".join(f"{r.rule}: {r.detail}" for r in self.failed())


def is_per_row(inputs: tuple[str, ...] | set[str], rt_info: dict) -> bool:
    """A per-row draft has the `token_type_ids` input or the per-row rt_info key (a broken one may lack one)."""
    raw_dflash = rt_info.get("dflash")
    dflash: dict = raw_dflash if isinstance(raw_dflash, dict) else {}
    return ("token_type_ids" in inputs and {"inputs_embeds", "hidden_states"} <= set(inputs)) or (
        "candidate_position_offset" in dflash
    )


def check_per_row(model_path: Path, layout: DraftLayout | None) -> PerRowReport:
    """Apply the per-row rules to a draft IR; every rule is evaluated, so a report names each broken one.

    Rules: the per-row inputs (and no `attention_mask`: the mask comes from `token_type_ids`); the DFlash rt_info
    keys, `candidate_position_offset` 0 or 1 included; SDPA→PagedAttention makes one PagedAttention op per draft
    attention layer with no SDPA and no state left; `token_type_ids` reaches every PagedAttention op; each
    sliding layer keeps its own window and each full layer none.

    Args:
        model_path: the draft's `openvino_model.xml`.
        layout: layer kinds and window from the draft's config; None: the windows are reported, not checked.
    """
    # openvino: a second to import; only the processes that read an IR need it
    import openvino as ov

    model = ov.Core().read_model(model_path)
    inputs, outputs = set(port_names(model.inputs)), set(port_names(model.outputs))
    rules = [_input_rule(inputs, outputs), _rt_info_rule(read_rt_info(model))]
    layers = len(layout.layer_types) if layout else check_layers_from_sdpa(model)  # counted before the pass
    check, conversion = _conversion_rule(model, layers)
    rules.append(conversion)
    if not check.ready:
        rules += [
            RuleResult(rule=rule, passed=None, detail=_NOT_CONVERTED) for rule in ("token_type_ids", "sliding_window")
        ]
        return PerRowReport(rules=tuple(rules), paged_attention=check, layer_windows=())
    ops = _paged_attention_ops(model)
    windows = tuple(_window(op) for op in ops)
    rules += [_token_type_rule(ops), _window_rule(windows, layout)]
    return PerRowReport(rules=tuple(rules), paged_attention=check, layer_windows=windows)


def _conversion_rule(model, layers: int) -> tuple[PagedAttentionCheck, RuleResult]:
    """Run SDPA→PagedAttention on `model` (changed in place): one op per draft layer, no SDPA and no state left."""
    check = paged_attention_counts(model, layers)
    problems = []
    if check.paged_attention_ops != layers:
        problems.append(f"{check.paged_attention_ops} PagedAttention ops for {layers} draft attention layers")
    if check.sdpa_left:
        problems.append(f"{check.sdpa_left} layer(s) left as ScaledDotProductAttention")
    if check.state_ops_left:
        problems.append(f"{check.state_ops_left} ReadValue/Assign ops left")
    if check.reason and not problems:
        problems.append(check.reason)
    converted = not problems
    detail = "; ".join(problems) or f"{check.paged_attention_ops} PagedAttention ops, no SDPA and no state left"
    counts = PagedAttentionCheck(
        ready=converted,
        reason="; ".join(problems) or None,
        sdpa_before=check.sdpa_before,
        paged_attention_ops=check.paged_attention_ops,
        sdpa_left=check.sdpa_left,
        state_ops_left=check.state_ops_left,
    )
    return counts, RuleResult(rule="paged_attention", passed=converted, detail=detail)


def _paged_attention_ops(model) -> list:
    """The converted model's PagedAttention ops in layer order, their inputs folded into constants."""
    # openvino: a second to import; only the processes that read an IR need it
    from openvino.passes import ConstantFolding, Manager

    manager = Manager()
    manager.register_pass(ConstantFolding())  # the window arrives as `-offset`: fold it into a number
    manager.run_passes(model)
    return sorted((op for op in model.get_ops() if op.get_type_name() == "PagedAttentionExtension"), key=_cache_index)


def _input_rule(inputs: set[str], outputs: set[str]) -> RuleResult:
    missing = [name for name in PER_ROW_INPUTS if name not in inputs]
    problems = [f"missing input(s) {missing}"] if missing else []
    if "attention_mask" in inputs:
        problems.append("an attention_mask input (the per-row mask is built from token_type_ids)")
    if "last_hidden_state" not in outputs:
        problems.append("no last_hidden_state output")
    detail = "; ".join(problems) or f"inputs {list(PER_ROW_INPUTS)} and output last_hidden_state"
    return RuleResult(rule="signature", passed=not problems, detail=detail)


def _rt_info_rule(rt_info: dict) -> RuleResult:
    problems = read_dflash_rt_info(rt_info, per_row=True).problems
    detail = "; ".join(problems) or "dflash_mode, dflash/" + ", dflash/".join(PER_ROW_RT_INFO)
    return RuleResult(rule="rt_info", passed=not problems, detail=detail)


def _token_type_rule(ops: list) -> RuleResult:
    missing = [i for i, op in enumerate(ops) if not _reads_parameter(op, "token_type_ids")]
    detail = (
        f"token_type_ids does not reach the PagedAttention op of layer(s) {missing}"
        if missing
        else f"token_type_ids reaches all {len(ops)} PagedAttention ops"
    )
    return RuleResult(rule="token_type_ids", passed=not missing, detail=detail)


def _window_rule(windows: tuple[int, ...], layout: DraftLayout | None) -> RuleResult:
    if layout is None:
        detail = f"not checked: no config.json beside the IR names the layer kinds (per-layer windows {list(windows)})"
        return RuleResult(rule="sliding_window", passed=None, detail=detail)
    wrong = [
        f"layer {i} ({layout.layer_types[i]}) has window {got}, expected {layout.window(i)}"
        for i, got in enumerate(windows)
        if got != layout.window(i)
    ]
    detail = "; ".join(wrong) or f"per-layer windows {list(windows)} match the config"
    return RuleResult(rule="sliding_window", passed=not wrong, detail=detail)


def _cache_index(op) -> int:
    name = op.input_value(3).get_node().get_friendly_name()  # key_cache.N, N counting converted layers
    return int(name.rsplit(".", 1)[-1]) if name.rsplit(".", 1)[-1].isdigit() else 0


def _reads_parameter(op, name: str) -> bool:
    """Whether a model-wide input of a PagedAttention op comes from the parameter `name` (through Converts)."""
    for index in range(_PA_FIRST_MODEL_WIDE, op.get_input_size()):
        node = op.input_value(index).get_node()
        while node.get_type_name() == "Convert":
            node = node.input_value(0).get_node()
        if node.get_type_name() == "Parameter" and name in node.get_output_tensor(0).get_names():
            return True
    return False


def _window(op) -> int:
    """A PagedAttention op's sliding window; -1 when it is not a constant (never equal to an expected window)."""
    value = _constant_int(op.input_value(_PA_SLIDING_WINDOW))
    return -1 if value is None else value


def _constant_int(output) -> int | None:
    node = output.get_node()
    if node.get_type_name() != "Constant":
        return None
    data = node.get_data().reshape(-1)
    return int(data[0]) if data.size else None
