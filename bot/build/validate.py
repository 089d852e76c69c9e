"""Validate an exported pair with OpenVINO GenAI: the lossless gate, the acceptance gate, and the speed sweep.

Lossless alone proves nothing about the draft (speculative decoding is lossless with any draft), so a pair must
also reach the recipe's minimum accept length (DESIGN §6). The lossless gate uses exact CPU properties (f32 KV
cache, no dynamic quantization, f32 inference) because the defaults drift even for plain greedy; acceptance and
speed are measured with the default properties that users run.

GenAI runs in a child process (`python -m bot.build.validate`) inside the trust boundary, with a time limit, so a crash
or hang on a bad pair cannot take the bot down.

VLM targets (Qwen3.5/3.6) run through `VLMPipeline`. Their hybrid text model keeps a linear-attention (GatedDeltaNet)
state that speculative decoding must roll back inside a verification window; the scheduler's pool of those rows
must hold one committed row plus 1 + num_assistant_tokens scratch rows, or a verification window never fits
(notes/qwen3_5-vlm-on-cpu.md §4). The lossless gate adds an image prompt for them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bot.core.errors import Failure
from bot.core.profiles import child_env
from bot.core.recipe import ValidationSettings
from bot.core.speedup import no_speedup_note, speedup_gate
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env

BASELINE_FILE = "baseline.json"  # the plain greedy outputs and timings a validation used, in its own work folder


@dataclass(frozen=True)
class SpeedRun:
    """One `num_assistant_tokens` setting, measured with default CPU properties."""

    num_assistant_tokens: int
    max_new_tokens: int
    accept_length: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    speedup: float


@dataclass(frozen=True)
class Mismatch:
    prompt_index: int
    num_assistant_tokens: int
    first_difference: int


@dataclass(frozen=True)
class ValidationReport:
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
    image_prompts: int = 0  # prompts of the lossless gate that carried an image (VLM targets)
    num_linear_attention_blocks: int | None = None  # the scheduler setting used for hybrid targets
    cores: int | None = None  # logical cores of the validation machine
    # "no speed-up on the validation machine: CPU, N cores" when no k beat plain greedy (`bot.core.speedup`); the card
    # and the report show it instead of presenting the recommended k as a speed-up.
    speedup_note: str | None = None
    min_speedup: float | None = None  # the recipe's speed gate (None: no gate)
    speedup_passed: bool = True

    @property
    def passed(self) -> bool:
        return self.lossless and self.acceptance_passed and self.speedup_passed

    @property
    def best_speedup(self) -> float:
        """The speed-up at the recommended num_assistant_tokens."""
        return next(
            (run.speedup for run in self.runs if run.num_assistant_tokens == self.recommended_num_assistant_tokens), 0.0
        )

    def failed_gates(self) -> list[str]:
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
            failed.append(speedup_gate(self.best_speedup, self.min_speedup) or "speed-up gate")
        return failed

    def as_provenance(self) -> dict:
        data = asdict(self)
        data["gates"] = {"lossless": self.lossless, "acceptance": self.acceptance_passed}
        if self.min_speedup is not None:
            data["gates"]["speedup"] = self.speedup_passed
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ValidationReport:
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        data["mismatches"] = [Mismatch(**m) for m in data["mismatches"]]
        data["runs"] = [SpeedRun(**r) for r in data["runs"]]
        return cls(**data)


def aligned_new_tokens(max_new_tokens: int, k: int) -> int:
    """1 + n·(k+1): the prefill token plus whole verification steps, so no truncated step biases the accept length."""
    return 1 + max(1, round((max_new_tokens - 1) / (k + 1))) * (k + 1)


def validate_pair(
    target_dir: Path,
    draft_dir: Path,
    settings: ValidationSettings,
    *,
    work: Path,
    is_vlm: bool = False,
    python: str | None = None,
    memory_budget_bytes: int | None = None,
    baseline: Path | None = None,
) -> ValidationReport:
    """Run the GenAI validation of one pair in a time-limited child process without Hub credentials.

    `is_vlm` runs it through `VLMPipeline`; `python` is the interpreter of the job's toolchain profile;
    `memory_budget_bytes` stops the run when its process tree outgrows it (the runner class's memory).
    `baseline` is the `baseline.json` an earlier validation of the same target left in its own work folder: its
    plain greedy outputs and timings are reused when they are for this target and settings (read-only here), so
    every format's speed-up is measured against the same baseline, measured once. Each validation writes the
    baseline it used into its own `work/baseline.json` (no child writes into another child's folder).

    Raises:
        Failure: GenAI could not load or run the pair, the run exceeded `settings.timeout_s`, or it went over the
            memory budget.
    """
    out = work / "validation.json"
    earlier = baseline if baseline is not None and baseline.is_file() else None
    reads = [target_dir, draft_dir, *([earlier.parent] if earlier else [])]
    cmd = [
        *sandboxed("validate", python, reads=reads, writes=[work]),
        "--target",
        str(target_dir),
        "--draft",
        str(draft_dir),
        "--settings",
        settings.model_dump_json(),
        "--out",
        str(out),
    ]
    if is_vlm:
        cmd.append("--vlm")
    cmd += ["--baseline-out", str(work / BASELINE_FILE)]
    if earlier is not None:
        cmd += ["--baseline", str(earlier)]
    run_logged(
        cmd,
        log_path=work / "validate.log",
        timeout_s=settings.timeout_s,
        env=child_env(untrusted_env(home=work / "hf-home"), python),
        what="GenAI validation",
        memory_budget_bytes=memory_budget_bytes,
    )
    return ValidationReport.from_dict(json.loads(out.read_text(encoding="utf-8")))


# ---- everything below runs inside the child process ----


def _exact_properties() -> dict:
    import openvino as ov

    return {
        "KV_CACHE_PRECISION": ov.Type.f32,
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
        "INFERENCE_PRECISION_HINT": ov.Type.f32,
    }


def linear_attention_blocks(num_assistant_tokens: list[int]) -> int:
    """Rows of the linear-attention state pool a hybrid target needs for the largest k in the sweep.

    One committed row for the live sequence plus 1 + k scratch rows for a verification window (scheduler.hpp);
    the default pool (7 rows) fails every k > 5.
    """
    return max(num_assistant_tokens) + 2


def _scheduler(linear_blocks: int | None = None):
    import openvino_genai as genai

    config = genai.SchedulerConfig()
    config.cache_size = 1
    # GenAI's DFlash path refuses prefix caching (dflash_strategy.cpp), and the default config turns it on.
    config.enable_prefix_caching = False
    if linear_blocks is not None:
        config.num_linear_attention_blocks = linear_blocks
    return config


def generated_image(height: int = 64, width: int = 96):
    """A generated RGB image (two gradients and a checkerboard) as the uint8 HxWx3 tensor VLMPipeline takes."""
    import numpy as np
    import openvino as ov

    y, x = np.mgrid[0:height, 0:width]
    image = np.stack(
        [x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), ((x // 8 + y // 8) % 2) * 255], axis=-1
    ).astype(np.uint8)
    return ov.Tensor(image)


def _generation_config(max_new_tokens: int, k: int | None):
    import openvino_genai as genai

    config = genai.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    config.ignore_eos = True
    if k is not None:
        config.num_assistant_tokens = k
    return config


class _Pair:
    """A plain and a speculative pipeline over the same target, with one set of CPU properties."""

    def __init__(
        self,
        target: Path,
        draft: Path,
        device: str,
        properties: dict,
        *,
        vlm: bool = False,
        linear_blocks: int | None = None,
    ):
        import openvino_genai as genai

        self.vlm = vlm
        pipeline = genai.VLMPipeline if vlm else genai.LLMPipeline
        self.plain = pipeline(str(target), device, scheduler_config=_scheduler(linear_blocks), **properties)
        self.speculative = pipeline(
            str(target),
            device,
            draft_model=genai.draft_model(str(draft), device, **properties),
            scheduler_config=_scheduler(linear_blocks),
            **properties,
        )
        if not vlm:
            tokenizer = self.plain.get_tokenizer()
            self._encode = lambda prompt: tokenizer.encode(
                tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True),
                add_special_tokens=False,
            )

    def tokens(self, prompt: str, max_new_tokens: int, k: int | None, image=None):
        pipe = self.plain if k is None else self.speculative
        config = _generation_config(max_new_tokens, k)
        started = time.perf_counter()
        if self.vlm:
            # VLMDecodedResults holds texts only: the token ids come through a streamer. The pipeline applies
            # the chat template and puts the image placeholder tokens in front of the prompt.
            collector = _token_collector()
            result = pipe.generate(
                prompt, images=[image] if image is not None else [], generation_config=config, streamer=collector
            )
            tokens = collector.tokens
        else:
            result = pipe.generate(self._encode(prompt), config)
            tokens = list(result.tokens[0])
        seconds = time.perf_counter() - started
        return tokens, seconds, getattr(result, "extended_perf_metrics", None)


def _token_collector():
    import openvino_genai as genai

    class Collector(genai.StreamerBase):
        def __init__(self):
            super().__init__()
            self.tokens: list[int] = []

        def write(self, token):
            self.tokens.extend(token if isinstance(token, list) else [token])
            return genai.StreamingStatus.RUNNING

        def end(self):
            pass

    return Collector()


def _target_steps(metrics) -> int:
    if metrics is None:
        raise Failure("GenAI returned no speculative-decoding metrics: the draft did not run")
    return len(metrics.main_model_metrics.raw_metrics.m_durations)


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _load_baseline(baseline: Path | None, key: dict) -> dict | None:
    """The plain greedy outputs and timings an earlier validation wrote for the same target and settings."""
    if baseline is None or not baseline.is_file():
        return None
    data = json.loads(baseline.read_text(encoding="utf-8"))
    return data if data.get("key") == key else None


def run_validation(
    target: Path,
    draft: Path,
    settings: ValidationSettings,
    *,
    vlm: bool = False,
    baseline_file: Path | None = None,
    baseline_out: Path | None = None,
) -> ValidationReport:
    """The gates and the sweep, in this process (called by the child).

    For a VLM target the lossless gate runs the text prompts and, in addition, the first prompt with a generated
    image (its index is `len(prompts)` in a mismatch); the sweep uses the text prompts. With `baseline_file`, the
    plain greedy outputs and timings are read from that file when it holds this target's, else measured; with
    `baseline_out` the ones used are written there.
    """
    import openvino as ov

    key = {"target": str(target.resolve()), "settings": settings.model_dump(exclude={"timeout_s"}), "vlm": vlm}
    known = _load_baseline(baseline_file, key)

    linear_blocks = linear_attention_blocks(settings.num_assistant_tokens) if vlm else None
    cases = [(prompt, None) for prompt in settings.prompts]
    if vlm:
        cases.append((settings.prompts[0], generated_image()))
    mismatches: list[Mismatch] = []
    exact = _Pair(target, draft, settings.device, _exact_properties(), vlm=vlm, linear_blocks=linear_blocks)
    expected_by_case = (
        known["expected"]
        if known
        else [exact.tokens(prompt, settings.max_new_tokens, None, image)[0] for prompt, image in cases]
    )
    for k in settings.num_assistant_tokens:
        for index, (prompt, image) in enumerate(cases):
            got, _, _ = exact.tokens(prompt, settings.max_new_tokens, k, image)
            if got != expected_by_case[index]:
                mismatches.append(Mismatch(index, k, _first_difference(expected_by_case[index], got)))
    del exact

    default = _Pair(target, draft, settings.device, {}, vlm=vlm, linear_blocks=linear_blocks)
    plain_seconds_by_case: dict[tuple[str, int], float] = {
        (prompt, new_tokens): seconds for prompt, new_tokens, seconds in (known or {}).get("plain_seconds", [])
    }

    def plain_best(prompt: str, new_tokens: int) -> float:
        """Plain greedy speed does not depend on k: measured once per prompt and length, after a warm-up."""
        key = (prompt, new_tokens)
        if key not in plain_seconds_by_case:
            default.tokens(prompt, new_tokens, None)
            plain_seconds_by_case[key] = min(
                default.tokens(prompt, new_tokens, None)[1] for _ in range(settings.repeats)
            )
        return plain_seconds_by_case[key]

    runs = []
    for k in settings.num_assistant_tokens:
        new_tokens = aligned_new_tokens(settings.max_new_tokens, k)
        committed = steps = 0
        spec_seconds = plain_seconds = 0.0
        generated = 0
        for prompt in settings.prompts:
            default.tokens(prompt, new_tokens, k)  # warm-up: first-inference compile time is not decoding speed
            best_spec = float("inf")
            for _ in range(settings.repeats):
                tokens, seconds, metrics = default.tokens(prompt, new_tokens, k)
                best_spec = min(best_spec, seconds)
            best_plain = plain_best(prompt, new_tokens)
            # The prefill step commits one token without verifying any draft; leave it out of the mean.
            committed += len(tokens) - 1
            steps += _target_steps(metrics) - 1
            generated += len(tokens)
            spec_seconds += best_spec
            plain_seconds += best_plain
        tokens_per_s = generated / spec_seconds
        baseline = generated / plain_seconds
        runs.append(
            SpeedRun(
                num_assistant_tokens=k,
                max_new_tokens=new_tokens,
                accept_length=round(committed / max(steps, 1), 3),
                tokens_per_s=round(tokens_per_s, 2),
                baseline_tokens_per_s=round(baseline, 2),
                speedup=round(tokens_per_s / baseline, 3),
            )
        )
    if baseline_out is not None:
        baseline_out.write_text(
            json.dumps(
                {
                    "key": key,
                    "expected": expected_by_case,
                    "plain_seconds": [
                        [prompt, new_tokens, seconds] for (prompt, new_tokens), seconds in plain_seconds_by_case.items()
                    ],
                }
            ),
            encoding="utf-8",
        )
    best = max(runs, key=lambda run: run.tokens_per_s)
    cores = os.cpu_count()
    return ValidationReport(
        lossless=not mismatches,
        mismatches=mismatches,
        prompts=list(settings.prompts),
        runs=runs,
        recommended_num_assistant_tokens=best.num_assistant_tokens,
        accept_length=best.accept_length,
        min_accept_length=settings.min_accept_length,
        acceptance_passed=best.accept_length >= settings.min_accept_length,
        device=settings.device,
        hardware=str(ov.Core().get_property(settings.device, "FULL_DEVICE_NAME")),
        pipeline="VLMPipeline" if vlm else "LLMPipeline",
        image_prompts=1 if vlm else 0,
        num_linear_attention_blocks=linear_blocks,
        cores=cores,
        speedup_note=no_speedup_note([run.speedup for run in runs], device=settings.device, cores=cores),
        min_speedup=settings.min_speedup,
        speedup_passed=speedup_gate(best.speedup, settings.min_speedup) is None,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot.build.validate", description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--settings", required=True, help="ValidationSettings as JSON")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vlm", action="store_true")
    parser.add_argument("--baseline", type=Path, help="an earlier validation's plain greedy outputs and timings")
    parser.add_argument("--baseline-out", type=Path, help="where to write the plain greedy outputs and timings used")
    args = parser.parse_args(argv)
    settings = ValidationSettings.model_validate_json(args.settings)
    report = run_validation(
        args.target, args.draft, settings, vlm=args.vlm, baseline_file=args.baseline, baseline_out=args.baseline_out
    )
    args.out.write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
