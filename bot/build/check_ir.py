"""Check each exported IR by the rules of its format (DESIGN §5, §6).

The target must convert SDPA→PagedAttention (one PagedAttention op per attention layer, no state left) and carry
the `hidden_states_decoder_layers` annotation GenAI taps. The draft's format is detected from its inputs: the
stateful format (optimum-intel 2.2.0) is expected to be refused by the transformation, which is reported, not
hidden; a per-row draft must convert like any decoder. The DFlash rt_info must match the source config.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bot.core.errors import Failure
from bot.discover.checkpoints import DraftSpec, TargetSpec

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
        return {
            "ir_file": self.ir_file,
            "attention_layers": self.attention_layers,
            "paged_attention_ops": self.paged_attention.paged_attention_ops,
            "paged_attention_ready": self.paged_attention.ready,
            "sdpa_left": self.paged_attention.sdpa_left,
            "state_ops_left": self.paged_attention.state_ops_left,
            "linear_attention_layers": self.linear_attention_layers,
            "linear_attention_ops": dict(self.paged_attention.linear_attention_ops),
            "linear_attention_state_tables": self.paged_attention.state_tables,
            "linear_attention_state": self.linear_attention_state,
            "hidden_state_layers": list(self.hidden_state_layers),
            "quantization": self.quantization,
        }


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
    rules: tuple[RuleResult, ...] = ()  # the per-row format's rules, each with its result
    layer_windows: tuple[int, ...] = ()  # per-row: each PagedAttention op's sliding window, in layer order

    def as_provenance(self) -> dict:
        extra = (
            {"rules": [asdict(r) for r in self.rules], "layer_windows": list(self.layer_windows)} if self.rules else {}
        )
        return extra | {
            "format": self.format,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": list(self.target_layer_ids),
            "candidate_position_offset": self.candidate_position_offset,
            "paged_attention_ready": self.paged_attention.ready,
            "reason": self.paged_attention.reason,
            "paged_attention_ops": self.paged_attention.paged_attention_ops,
            "quantization": self.quantization,
        }


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
            stage="inspect",
        )
    try:
        return tuple(sorted(int(k) for k in json.loads(annotation)["layers"]))
    except (ValueError, KeyError, TypeError, IndexError):
        raise Failure(
            f"target IR's hidden_states_decoder_layers rt_info is malformed: {_shown(annotation)}", stage="inspect"
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
    import openvino as ov

    model = ov.Core().read_model(model_path)
    return _paged_attention_counts(model, expected_layers)


def _paged_attention_counts(model, expected_layers: int) -> PagedAttentionCheck:
    """Run the transformation on `model` (changed in place) and count what it made."""
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
    layers = hidden_state_layers(rt_info)
    untapped = [i for i in draft.target_layer_ids if i not in layers]
    if untapped:
        raise Failure(
            f"target IR annotates hidden states of layers {list(layers)}, not the draft's {untapped}", stage="inspect"
        )
    linear_layers = target.num_hidden_layers - target.full_attention_layers
    return TargetIrReport(
        ir_file=ir_file,
        attention_layers=target.full_attention_layers,
        paged_attention=check,
        hidden_state_layers=layers,
        quantization=quantization_parameters(rt_info),
        linear_attention_layers=linear_layers,
        linear_attention_state=linear_attention_state(check, linear_layers),
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
            stage="inspect",
        )
    return (
        f"paged: {linear_layers} PagedGatedDeltaNet + {linear_layers} PagedCausalConv1D ops (from "
        f"{check.linear_before}); recurrent and convolution state moved from ReadValue/Assign into "
        f"{check.state_tables} block tables (gated_delta_state_table.N, conv_state_table.N), none left as "
        "model state"
    )


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
    inputs, outputs = port_names(model.inputs), port_names(model.outputs)
    rt_info = read_rt_info(model)

    if is_per_row(inputs, rt_info):
        draft_format = "per-row"
    elif {"inputs_embeds", "hidden_states", "beam_idx"} <= set(inputs) and model.get_variables():
        draft_format = "stateful"
    else:
        raise Failure(
            f"draft IR has neither the stateful nor the per-row DFlash signature (inputs: {list(inputs)})",
            stage="inspect",
        )
    dflash = read_dflash_rt_info(rt_info, per_row=False)  # the per-row rules check the offset
    if not dflash.mode:
        raise Failure("draft IR lacks rt_info dflash_mode=True, so GenAI would not run it as DFlash", stage="inspect")
    mask_token_id, layer_ids = dflash.mask_token_id, dflash.target_layer_ids
    if mask_token_id is None or layer_ids is None:
        raise Failure(
            "draft IR rt_info dflash/mask_token_id or dflash/target_layer_ids is missing or malformed: "
            + "; ".join(dflash.problems),
            stage="inspect",
        )
    if mask_token_id != draft.mask_token_id or layer_ids != draft.target_layer_ids:
        raise Failure(
            f"draft IR rt_info (mask {mask_token_id}, layers {list(layer_ids)}) disagrees with the "
            f"source config (mask {draft.mask_token_id}, layers {list(draft.target_layer_ids)})",
            stage="inspect",
        )
    rules: tuple[RuleResult, ...] = ()
    windows: tuple[int, ...] = ()
    if draft_format == "per-row":
        report = check_per_row(path, DraftLayout.read(ir_dir, draft.num_layers))
        if not report.passed:
            raise Failure(f"per-row draft IR breaks the per-row rules: {report.failure_reason()}", stage="inspect")
        check, rules, windows = report.paged_attention, report.rules, report.layer_windows
    else:  # stateful: the transformation is expected to refuse it, which is reported, not hidden
        if not model.get_variables():
            raise Failure("stateful draft IR has no KV-cache state", stage="inspect")
        check = paged_attention_check(path, draft.num_layers or check_layers_from_sdpa(model))
        if not check.ready:
            check = PagedAttentionCheck(
                False,
                "stateful DFlash draft (optimum-intel 2.2.0 format): SDPAToPagedAttention refuses it "
                f"({check.reason}); GenAI runs it as a stateful model beside the PagedAttention target",
                check.sdpa_before,
                0,
                check.sdpa_left,
                check.state_ops_left,
            )
    return DraftIrReport(
        format=draft_format,
        inputs=inputs,
        outputs=outputs,
        mask_token_id=mask_token_id,
        target_layer_ids=layer_ids,
        candidate_position_offset=dflash.candidate_position_offset,  # 0 is a real value here
        paged_attention=check,
        quantization=quantization_parameters(rt_info),
        rules=rules,
        layer_windows=windows,
    )


def check_layers_from_sdpa(model) -> int:
    return sum(1 for op in model.get_ops() if op.get_type_name() == "ScaledDotProductAttention")


def _first_lines(message: str, limit: int = 3) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return " ".join(lines[:limit])


# ---- the per-row format (optimum-intel PR #2096; DESIGN §5) ----

PER_ROW_INPUTS = ("inputs_embeds", "hidden_states", "position_ids", "token_type_ids")
# rt_info under `dflash/` that GenAI reads from a per-row draft; the offset says which rows are candidates.
PER_ROW_RT_INFO = ("mask_token_id", "target_layer_ids", "candidate_position_offset")
# PagedAttentionExtension's inputs: query, key, value, key_cache, value_cache, past_lens, subsequence_begins,
# block_indices, block_indices_begins, scale, sliding_window, ... (the op's specification).
_PA_SLIDING_WINDOW = 10
_PA_FIRST_MODEL_WIDE = 5


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
            raise Failure("config.json beside the draft IR is not a JSON object", stage="inspect")
        layers, window = config.get("num_hidden_layers") or num_layers or 0, config.get("sliding_window") or 0
        types = config.get("layer_types") or ["full_attention"] * (layers if isinstance(layers, int) else 0)
        if not isinstance(layers, int) or not isinstance(window, int) or not isinstance(types, list):
            raise Failure(
                "config.json beside the draft IR has a malformed num_hidden_layers, layer_types or sliding_window",
                stage="inspect",
            )
        return cls(layer_types=tuple(str(t) for t in types), sliding_window=window)


@dataclass(frozen=True)
class RuleResult:
    """One rule of a format: passed (True/False), or None when an earlier failure left nothing to check."""

    rule: str
    passed: bool | None
    detail: str


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
    import openvino as ov
    from openvino.passes import ConstantFolding, Manager

    model = ov.Core().read_model(model_path)
    inputs, outputs = set(port_names(model.inputs)), set(port_names(model.outputs))
    rt_info = read_rt_info(model)
    rules = [_input_rule(inputs, outputs), _rt_info_rule(rt_info)]

    sdpa_layers = check_layers_from_sdpa(model)
    layers = len(layout.layer_types) if layout else sdpa_layers
    check = _paged_attention_counts(model, layers)
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
    rules.append(
        RuleResult(
            "paged_attention",
            converted,
            "; ".join(problems) or f"{check.paged_attention_ops} PagedAttention ops, no SDPA and no state left",
        )
    )
    check = PagedAttentionCheck(
        converted,
        "; ".join(problems) or None,
        check.sdpa_before,
        check.paged_attention_ops,
        check.sdpa_left,
        check.state_ops_left,
    )

    windows: tuple[int, ...] = ()
    if not converted:
        rules.append(RuleResult("token_type_ids", None, "not checked: the PagedAttention conversion is incomplete"))
        rules.append(RuleResult("sliding_window", None, "not checked: the PagedAttention conversion is incomplete"))
        return PerRowReport(tuple(rules), check, windows)
    manager = Manager()
    manager.register_pass(ConstantFolding())  # the window arrives as `-offset`: fold it into a number
    manager.run_passes(model)
    ops = sorted((op for op in model.get_ops() if op.get_type_name() == "PagedAttentionExtension"), key=_cache_index)
    reached = [_reads_parameter(op, "token_type_ids") for op in ops]
    missing = [i for i, ok in enumerate(reached) if not ok]
    rules.append(
        RuleResult(
            "token_type_ids",
            not missing,
            f"token_type_ids does not reach the PagedAttention op of layer(s) {missing}"
            if missing
            else f"token_type_ids reaches all {len(ops)} PagedAttention ops",
        )
    )
    windows = tuple(_window(op) for op in ops)
    if layout is None:
        rules.append(
            RuleResult(
                "sliding_window",
                None,
                f"not checked: no config.json beside the IR names the layer kinds (per-layer windows {list(windows)})",
            )
        )
        return PerRowReport(tuple(rules), check, windows)
    wrong = [
        f"layer {i} ({layout.layer_types[i]}) has window {got}, expected {layout.window(i)}"
        for i, got in enumerate(windows)
        if got != layout.window(i)
    ]
    rules.append(
        RuleResult(
            "sliding_window", not wrong, "; ".join(wrong) or f"per-layer windows {list(windows)} match the config"
        )
    )
    return PerRowReport(tuple(rules), check, windows)


def _input_rule(inputs: set[str], outputs: set[str]) -> RuleResult:
    missing = [name for name in PER_ROW_INPUTS if name not in inputs]
    problems = [f"missing input(s) {missing}"] if missing else []
    if "attention_mask" in inputs:
        problems.append("an attention_mask input (the per-row mask is built from token_type_ids)")
    if "last_hidden_state" not in outputs:
        problems.append("no last_hidden_state output")
    return RuleResult(
        "signature", not problems, "; ".join(problems) or f"inputs {list(PER_ROW_INPUTS)} and output last_hidden_state"
    )


def _rt_info_rule(rt_info: dict) -> RuleResult:
    problems = read_dflash_rt_info(rt_info, per_row=True).problems
    return RuleResult(
        "rt_info", not problems, "; ".join(problems) or "dflash_mode, dflash/" + ", dflash/".join(PER_ROW_RT_INFO)
    )


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
