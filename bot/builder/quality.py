"""What int4 cost in quality: the target's int4 IR measured against its original weights (docs/design.md §9).

who-what-benchmark (openvino.genai `tools/who_what_benchmark`) is not on the package index and its similarity needs
an embedding model from the Hub, so the bot measures what the two models alone give, on the recipe's validation
prompts (chat template applied, as GenAI does):

- the int4 IR (raw OpenVINO runtime, CPU) decodes each prompt's greedy continuation of `max_new_tokens` tokens
  (end-of-sequence ignored, like the validation runs), all prompts as one left-padded batch, keeping the logits row
  that chose each token: its teacher-forced distribution over its own output;
- the original checkpoint (transformers, CPU, safetensors only, no remote code) is run **once**, teacher-forced over
  prompt + that continuation (`Reference.teacher_forced`): one pass over its weights, however many tokens. Decoding
  the original greedily instead costs one pass per token, and an original larger than the runner's memory (an 8B
  target's 16.4 GB of bf16 on a 16 GB runner) is then read from disk once per token;
- at each generated position the two next-token distributions give **top-1 agreement** (the original ranks the int4
  output's token first) and **KL divergence** KL(original ‖ int4) = Σ p_orig · (log p_orig − log p_int4), averaged
  over positions; the **first diverging token** is the first position where the original would have chosen another
  token: where the two models' greedy outputs first differ, exactly (who-what-benchmark's FDT; its SDT needs the
  original's whole greedy output, so it is not measured).

The IR runs with the exact CPU properties of the lossless gate (f32 inference, no dynamic quantization), so the
figures measure the weight compression rather than the CPU's runtime precision. Everything that reads the
checkpoint runs in a token-free child process (`python -m bot.sandbox.child bot.builder.quality ...`), started after
the exports: the int4 IR and then the original (f32 up to `DEFAULT_MAX_F32_BYTES`, else its checkpoint dtype,
mapped), one at a time, so the anonymous peak is the larger of the two.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bot.builder.quality_models import EXACT_PROPERTIES, IrModel, Reference, prompt_ids
from bot.core.settings import SANDBOX_LAYERS
from bot.plan.sizing import DEFAULT_MAX_F32_BYTES
from bot.sandbox.wire import Child, Request, run_child, serve

METHOD = (
    "the int4 IR's greedy continuation of each prompt (chat template applied); the original run once "
    "teacher-forced over prompt + that continuation; top-1 agreement and mean KL(original || int4) per "
    "generated position; first diverging token (where the greedy outputs first differ); IR on CPU with f32 "
    "inference and no dynamic quantization"
)
TOOL = "bot.builder.quality"


class _Figures(BaseModel):
    """Frozen, and a key the model does not know is refused: what the quality child answers is validated by it. A
    figure that is not a number (a KL over logits with an infinity) crosses as NaN, as `json` wrote it before."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


class PromptQuality(_Figures):
    """The figures for one prompt.

    Attributes:
        prompt_index: position of the prompt in the recipe's `validation.prompts`.
        tokens: generated positions compared teacher-forced (the int4 IR's greedy continuation length).
        top1_agreement: share of those positions where both models' most likely next token is the same.
        mean_kl: mean KL(original ‖ int4) of the next-token distributions, in nats.
        first_diverging_token: tokens before the two greedy outputs first differ (`tokens` when identical).
    """

    prompt_index: int
    tokens: int
    top1_agreement: float
    mean_kl: float
    first_diverging_token: int


class QualityReport(_Figures):
    """Target quality against the original weights; `measured` is False (with `reason`) when it could not be run.

    The quality child's answer, and as `model_dump(mode="json")` the record's `quality` (`openvino_export.json`, the
    run report). The overall figures weigh every generated position equally (top-1 agreement, mean KL) and average
    the per-prompt first diverging token, as who-what-benchmark does.
    """

    measured: bool
    reason: str | None = None
    prompts: tuple[PromptQuality, ...] = ()
    tokens: int = 0
    top1_agreement: float | None = None
    mean_kl: float | None = None
    first_diverging_token: float | None = None
    max_new_tokens: int = 0
    reference_dtype: str | None = None
    ir_file: str | None = None
    method: str = METHOD
    seconds: float | None = None
    ir_properties: dict[str, str] = Field(default_factory=dict)
    reference_passes: int = 0  # passes over the original's weights (one: `Reference.teacher_forced`)

    @classmethod
    def not_measured(cls, reason: str) -> QualityReport:
        return cls(measured=False, reason=reason)

    @classmethod
    def from_prompts(cls, prompts: list[PromptQuality], **details: Any) -> QualityReport:
        """The overall figures from the per-prompt ones."""
        tokens = sum(p.tokens for p in prompts)
        if not prompts or not tokens:
            return cls.not_measured("no generated tokens to compare")
        return cls(
            measured=True,
            prompts=tuple(prompts),
            tokens=tokens,
            top1_agreement=round(sum(p.top1_agreement * p.tokens for p in prompts) / tokens, 4),
            mean_kl=_significant(sum(p.mean_kl * p.tokens for p in prompts) / tokens),
            first_diverging_token=round(sum(p.first_diverging_token for p in prompts) / len(prompts), 2),
            **details,
        )

    @classmethod
    def from_record(cls, quality: Mapping[str, Any]) -> QualityReport:
        """The report a published record's `quality` holds (a reused target's), read as the fields this model has:
        the record adds its `gate`, and records published before the bot stopped measuring who-what-benchmark's SDT
        hold its figures too."""
        report = {key: value for key, value in quality.items() if key in cls.model_fields}
        known = PromptQuality.model_fields
        report["prompts"] = [{k: v for k, v in p.items() if k in known} for p in quality.get("prompts", ())]
        return cls.model_validate(report)


class QualityRequest(Request):
    """What the quality child measures: the sanitised original, its int4 IR, the prompts and how far to decode."""

    source: Path
    ir: Path
    prompts: list[str]
    max_new_tokens: int
    max_f32_bytes: int = DEFAULT_MAX_F32_BYTES


def quality_gate(report: QualityReport, min_top1_agreement: float | None) -> str | None:
    """The recipe's quality gate (`validation.min_top1_agreement`, off when None).

    A gate that is on and could not be measured fails too: publishing an unmeasured target would defeat it.

    Returns:
        None when the target may be published, else the failed gate's reason naming the measured figure.
    """
    if min_top1_agreement is None:
        return None
    if not report.measured or report.top1_agreement is None:
        return (
            f"quality gate: top-1 agreement with the original weights was not measured ({report.reason}); "
            f"the recipe requires at least {min_top1_agreement:.2%}"
        )
    if report.top1_agreement < min_top1_agreement:
        return (
            f"quality gate: top-1 agreement with the original weights is {report.top1_agreement:.2%} over "
            f"{report.tokens} tokens, below the recipe's minimum {min_top1_agreement:.2%} "
            f"(mean KL {report.mean_kl:.4f})"
        )
    return None


def measure_quality(
    source_dir: Path,
    ir_dir: Path,
    prompts: list[str],
    max_new_tokens: int,
    *,
    work: Path,
    python: str | None = None,
    timeout_s: float = 1800,
    max_f32_bytes: int = DEFAULT_MAX_F32_BYTES,
    memory_budget_bytes: int | None = None,
    layers: Sequence[str] = SANDBOX_LAYERS,
) -> QualityReport:
    """Measure the int4 target IR against its original checkpoint in a time-limited child without Hub credentials.

    Args:
        source_dir: the sanitised working copy of the target checkpoint (safetensors, configs, tokenizer).
        ir_dir: the exported target IR folder.
        prompts: the recipe's validation prompts.
        max_new_tokens: length of the greedy continuations compared.
        work: scratch folder for the child's log, its private HF home and the result file.
        python: the interpreter of the job's toolchain profile (None: this environment's).
        timeout_s: wall-clock limit of the child.
        max_f32_bytes: run the reference in f32 when its f32 weights fit this many bytes, else in its dtype.
        memory_budget_bytes: stop the child when its process tree outgrows this (the runner class's memory).
        layers: the OS confinement layers the child may use (`Settings.sandbox_layers`).

    Returns:
        The report; `measured` is False with a reason for a target the measurement does not cover (VLM IRs).

    Raises:
        Failure: the child failed (its last error line), ran past `timeout_s` or wrote no `QualityReport`.
    """
    if not (ir_dir / "openvino_model.xml").is_file():
        return QualityReport.not_measured(
            "VLM target (openvino_language_model.xml): the text model takes inputs_embeds from a separate "
            "embeddings IR, which this measurement does not drive yet"
            if (ir_dir / "openvino_language_model.xml").is_file()
            else "the target IR has no openvino_model.xml"
        )
    request = QualityRequest(
        source=source_dir, ir=ir_dir, prompts=list(prompts), max_new_tokens=max_new_tokens, max_f32_bytes=max_f32_bytes
    )
    child = Child(
        tool=TOOL,
        work=work,
        name="quality",
        what="quality measurement",
        reads=[source_dir, ir_dir],
        timeout_s=timeout_s,
        memory_budget_bytes=memory_budget_bytes,
        python=python,
        layers=layers,
    )
    started = time.monotonic()
    report = run_child(child, request, QualityReport)
    return report.model_copy(update={"seconds": round(time.monotonic() - started, 1)})


# ---- pure metrics (also used by the child) ----


def _significant(value: float) -> float:
    """Four significant digits: a KL of 3e-9 (a near-perfect target) stays distinguishable from 0."""
    return float(f"{value:.4g}")


def first_difference(chosen: list[int], preferred: list[int]) -> int:
    """Where two greedy outputs first differ, from one model's output (`chosen`) and the token the other model ranks
    first at each of its positions, teacher-forced (`preferred`): both decoded the same prefix up to there.
    The length when they never differ."""
    return next((index for index, (a, b) in enumerate(zip(chosen, preferred, strict=True)) if a != b), len(chosen))


def compare_logits(reference_logits, candidate_logits) -> tuple[float, float]:
    """(top-1 agreement, mean KL(reference ‖ candidate)) over positions of two [positions, vocab] arrays."""
    # numpy: only the measuring child needs it
    import numpy as np

    ref = np.asarray(reference_logits, dtype=np.float64)
    cand = np.asarray(candidate_logits, dtype=np.float64)
    if ref.shape != cand.shape or ref.ndim != 2 or not len(ref):
        raise ValueError(f"logits shapes differ or are empty: {ref.shape} vs {cand.shape}")
    agreement = float(np.mean(ref.argmax(axis=-1) == cand.argmax(axis=-1)))
    log_p, log_q = _log_softmax(ref), _log_softmax(cand)
    kl = np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)
    return agreement, float(np.mean(np.maximum(kl, 0.0)))


def _log_softmax(logits):
    # numpy: only the measuring child needs it
    import numpy as np

    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


# ---- below runs inside the child process (the models: bot.builder.quality_models) ----


def run_quality(
    source: Path, ir_dir: Path, prompts: list[str], max_new_tokens: int, *, max_f32_bytes: int = DEFAULT_MAX_F32_BYTES
) -> QualityReport:
    """The measurement, in this process (called by the child)."""
    # transformers: seconds to import; only the quality child loads the original weights
    from transformers import AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # one bar update per tensor would bury the log's error line
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    prompt_tokens = [prompt_ids(tokenizer, prompt) for prompt in prompts]

    # One model at a time: the IR, then the original, so the peak is the larger of the two, not their sum.
    ir = IrModel(ir_dir / "openvino_model.xml")
    continuations, ir_rows = ir.greedy(prompt_tokens, max_new_tokens)
    del ir
    reference = Reference(source, max_f32_bytes)
    reference_rows = reference.teacher_forced(prompt_tokens, continuations)
    reference_dtype = reference.dtype_name
    del reference
    results = []
    for index, continuation in enumerate(continuations):
        agreement, kl = compare_logits(reference_rows[index], ir_rows[index])
        preferred = reference_rows[index].argmax(axis=-1).tolist()
        results.append(
            PromptQuality(
                prompt_index=index,
                tokens=len(continuation),
                top1_agreement=round(agreement, 4),
                mean_kl=_significant(kl),
                first_diverging_token=first_difference(continuation, preferred),
            )
        )
    return QualityReport.from_prompts(
        results,
        max_new_tokens=max_new_tokens,
        reference_dtype=reference_dtype,
        ir_file="openvino_model.xml",
        ir_properties=dict(EXACT_PROPERTIES),
        reference_passes=1,
    )


def _measure(request: QualityRequest) -> QualityReport:
    return run_quality(
        request.source, request.ir, request.prompts, request.max_new_tokens, max_f32_bytes=request.max_f32_bytes
    )


def main(argv: list[str] | None = None) -> int:
    """The child: answer one `QualityRequest`."""
    return serve(QualityRequest, _measure, argv, prog=f"python -m bot.sandbox.child {TOOL}")


if __name__ == "__main__":
    sys.exit(main())
