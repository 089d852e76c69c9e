"""What a build's checks found, as the build record holds it (`BuildRecord.inspect`, `BuildRecord.validation`).

The IR inspection (`bot.builder.check_ir`: each IR's attention, state and quantization, and a per-row draft's
rules) and GenAI's validation (`bot.builder.validate`: the lossless gate, the accept length, the speed sweep, the
machine and how it was timed). Field names are public like the rest of the record (`bot.core.record`).
"""

from __future__ import annotations

from pydantic import Field

from bot.core.record_base import DraftFormat, RecordModel, _Open
from bot.core.speedup import speedup_gate


class TargetInspect(RecordModel):
    ir_file: str
    attention_layers: int
    paged_attention_ops: int
    paged_attention_ready: bool
    sdpa_left: int
    state_ops_left: int
    linear_attention_layers: int = 0
    linear_attention_ops: dict[str, int] = Field(default_factory=dict)
    linear_attention_state_tables: int = 0
    linear_attention_state: str | None = None
    hidden_state_layers: list[int]
    quantization: _Open = Field(default_factory=_Open)


class RuleResult(RecordModel):
    """One rule of the draft's format (per-row): passed, failed, or None when an earlier failure left nothing to
    check."""

    rule: str
    passed: bool | None
    detail: str


class DraftInspect(RecordModel):
    format: DraftFormat
    inputs: list[str]
    outputs: list[str]
    mask_token_id: int
    target_layer_ids: list[int]
    candidate_position_offset: int | None
    paged_attention_ready: bool
    reason: str | None
    paged_attention_ops: int
    quantization: _Open = Field(default_factory=_Open)
    rules: list[RuleResult] = Field(default_factory=list, description="per-row drafts: each rule's result")
    layer_windows: list[int] = Field(default_factory=list, description="per-row drafts: sliding window per layer")


class Inspection(RecordModel):
    target: TargetInspect
    draft: DraftInspect


class SpeedRun(RecordModel):
    """One `num_assistant_tokens` setting, measured with default CPU properties."""

    num_assistant_tokens: int
    max_new_tokens: int
    accept_length: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    speedup: float = Field(description="the median of the interleaved pairs' speed-ups (older records: one timing)")
    speedup_low: float | None = Field(None, description="95 % confidence interval of the speed-up, lower end")
    speedup_high: float | None = Field(None, description="95 % confidence interval of the speed-up, upper end")
    pairs: int | None = Field(None, description="interleaved plain/speculative pairs measured (None: older record)")


class Machine(RecordModel):
    """The validation machine as GenAI saw it (the card's method section)."""

    cpu: str
    cores: int | None = Field(None, description="logical cores")
    threads: int | None = Field(None, description="inference threads the compiled target used")
    memory_bytes: int | None = None
    os: str


class Timing(RecordModel):
    """How the speed-ups were measured: interleaved pairs until the interval was tight or the budget spent."""

    method: str
    min_pairs: int
    max_pairs: int
    target_share: float = Field(description="stop when the 95 % interval is within this share of the median")
    budget_s: float = Field(description="seconds of timing per draft format, shared by the sweep")
    seconds: float = Field(description="seconds the timing took")


class DefaultPropertiesCheck(RecordModel):
    """The lossless comparison again with GenAI's default CPU properties (what the card's snippet runs)."""

    lossless: bool
    num_assistant_tokens: int
    prompts: int
    prompt_index: int | None = Field(None, description="the first prompt that diverged (None: lossless)")
    first_difference: int | None = Field(None, description="its first diverging token (None: lossless)")


class Mismatch(RecordModel):
    prompt_index: int
    num_assistant_tokens: int
    first_difference: int


class ConcurrentRequest(RecordModel):
    prompt_index: int
    tokens: int
    matches_greedy: bool
    first_difference: int | None


class ConcurrentValidation(RecordModel):
    """Per-row drafts: the lossless gate with several requests at once through continuous batching."""

    requests: int
    num_assistant_tokens: int
    lossless: bool
    results: list[ConcurrentRequest]
    genai: str
    pipeline: str


class Gates(RecordModel):
    lossless: bool
    acceptance: bool
    speedup: bool | None = None  # only when the recipe sets validation.min_speedup
    quality: bool | None = None  # only when the recipe sets validation.min_top1_agreement


class Validation(RecordModel):
    """What GenAI measured: the lossless gate, the accept length the draft earned, the speed sweep."""

    lossless: bool
    mismatches: list[Mismatch]
    prompts: list[str]
    runs: list[SpeedRun]
    recommended_num_assistant_tokens: int
    accept_length: float
    min_accept_length: float
    acceptance_passed: bool
    device: str
    hardware: str
    pipeline: str
    image_prompts: int = 0
    num_linear_attention_blocks: int | None = None
    cores: int | None = Field(None, description="logical cores of the validation machine")
    speedup_note: str | None = Field(None, description="set when no num_assistant_tokens beat plain greedy")
    min_speedup: float | None = None
    speedup_passed: bool = True
    gates: Gates
    concurrent: ConcurrentValidation | None = None
    recommendation: str | None = Field(None, description="why this num_assistant_tokens (beyond the noise or not)")
    machine: Machine | None = None
    timing: Timing | None = None
    default_properties: DefaultPropertiesCheck | None = None

    @property
    def passed(self) -> bool:
        return self.lossless and self.acceptance_passed and self.speedup_passed

    @property
    def best_run(self) -> SpeedRun:
        """The run at the recommended `num_assistant_tokens`."""
        return next(
            (r for r in self.runs if r.num_assistant_tokens == self.recommended_num_assistant_tokens),
            max(self.runs, key=lambda r: r.tokens_per_s),
        )

    @property
    def speeds_up(self) -> bool:
        """Whether any setting was faster than plain greedy on the validation machine."""
        return any(r.speedup > 1.0 for r in self.runs)

    def failed_gates(self) -> list[str]:
        """Each failed gate's reason, naming the measured figure and the recipe's bar (empty: all passed)."""
        failed = []
        if not self.lossless:
            first = self.mismatches[0]
            failed.append(
                f"lossless gate: speculative output differs from plain greedy on {len(self.mismatches)} "
                f"prompt/k combination(s), first at prompt {first.prompt_index} "
                f"(k={first.num_assistant_tokens}) token {first.first_difference}"
            )
        if not self.acceptance_passed:
            failed.append(
                f"acceptance gate: accept length {self.accept_length:.2f} at k="
                f"{self.recommended_num_assistant_tokens} is below the recipe's minimum "
                f"{self.min_accept_length:.2f}"
            )
        if not self.speedup_passed:
            failed.append(speedup_gate(self.best_run.speedup, self.min_speedup) or "speed-up gate")
        return failed
