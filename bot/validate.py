"""Validate an exported pair with OpenVINO GenAI: the lossless gate, the acceptance gate, and the speed sweep.

Lossless alone proves nothing about the draft (speculative decoding is lossless with any draft), so a pair must
also reach the recipe's minimum accept length (DESIGN §6). The lossless gate uses exact CPU properties (f32 KV
cache, no dynamic quantization, f32 inference) because the defaults drift even for plain greedy; acceptance and
speed are measured with the default properties that users run.

GenAI runs in a child process (`python -m bot.validate`) inside the trust boundary, with a time limit, so a crash
or hang on a bad pair cannot take the bot down.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bot.errors import Failure
from bot.isolation import run_logged, untrusted_env
from bot.recipe import ValidationSettings


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

    @property
    def passed(self) -> bool:
        return self.lossless and self.acceptance_passed

    def failed_gates(self) -> list[str]:
        failed = []
        if not self.lossless:
            first = self.mismatches[0]
            failed.append(f"lossless gate: speculative output differs from plain greedy on {len(self.mismatches)} "
                          f"prompt/k combination(s), first at prompt {first.prompt_index} "
                          f"(k={first.num_assistant_tokens}) token {first.first_difference}")
        if not self.acceptance_passed:
            failed.append(f"acceptance gate: accept length {self.accept_length:.2f} at k="
                          f"{self.recommended_num_assistant_tokens} is below the recipe's minimum "
                          f"{self.min_accept_length:.2f}")
        return failed

    def as_provenance(self) -> dict:
        data = asdict(self)
        data["gates"] = {"lossless": self.lossless, "acceptance": self.acceptance_passed}
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


def validate_pair(target_dir: Path, draft_dir: Path, settings: ValidationSettings, *, work: Path,
                  is_vlm: bool = False) -> ValidationReport:
    """Run the GenAI validation of one pair in a time-limited child process without Hub credentials.

    Raises:
        Failure: GenAI could not load or run the pair, or the run exceeded `settings.timeout_s`.
    """
    out = work / "validation.json"
    cmd = [sys.executable, "-m", "bot.validate", "--target", str(target_dir), "--draft", str(draft_dir),
           "--settings", settings.model_dump_json(), "--out", str(out)]
    if is_vlm:
        cmd.append("--vlm")
    run_logged(cmd, log_path=work / "validate.log", timeout_s=settings.timeout_s,
               env=untrusted_env(home=work / "hf-home"), what="GenAI validation")
    return ValidationReport.from_dict(json.loads(out.read_text(encoding="utf-8")))


# ---- everything below runs inside the child process ----

def _exact_properties() -> dict:
    import openvino as ov

    return {"KV_CACHE_PRECISION": ov.Type.f32, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
            "INFERENCE_PRECISION_HINT": ov.Type.f32}


def _scheduler():
    import openvino_genai as genai

    config = genai.SchedulerConfig()
    config.cache_size = 1
    # GenAI's DFlash path refuses prefix caching (dflash_strategy.cpp), and the default config turns it on.
    config.enable_prefix_caching = False
    return config


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

    def __init__(self, target: Path, draft: Path, device: str, properties: dict):
        import openvino_genai as genai

        self.plain = genai.LLMPipeline(str(target), device, scheduler_config=_scheduler(), **properties)
        self.speculative = genai.LLMPipeline(
            str(target), device, draft_model=genai.draft_model(str(draft), device, **properties),
            scheduler_config=_scheduler(), **properties)
        tokenizer = self.plain.get_tokenizer()
        self._encode = lambda prompt: tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True),
            add_special_tokens=False)

    def tokens(self, prompt: str, max_new_tokens: int, k: int | None):
        pipe = self.plain if k is None else self.speculative
        started = time.perf_counter()
        result = pipe.generate(self._encode(prompt), _generation_config(max_new_tokens, k))
        seconds = time.perf_counter() - started
        return list(result.tokens[0]), seconds, getattr(result, "extended_perf_metrics", None)


def _target_steps(metrics) -> int:
    if metrics is None:
        raise Failure("GenAI returned no speculative-decoding metrics: the draft did not run")
    return len(metrics.main_model_metrics.raw_metrics.m_durations)


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run_validation(target: Path, draft: Path, settings: ValidationSettings) -> ValidationReport:
    """The gates and the sweep, in this process (called by the child)."""
    import openvino as ov

    mismatches: list[Mismatch] = []
    exact = _Pair(target, draft, settings.device, _exact_properties())
    for k in settings.num_assistant_tokens:
        for index, prompt in enumerate(settings.prompts):
            expected, _, _ = exact.tokens(prompt, settings.max_new_tokens, None)
            got, _, _ = exact.tokens(prompt, settings.max_new_tokens, k)
            if got != expected:
                mismatches.append(Mismatch(index, k, _first_difference(expected, got)))
    del exact

    default = _Pair(target, draft, settings.device, {})
    runs = []
    for k in settings.num_assistant_tokens:
        new_tokens = aligned_new_tokens(settings.max_new_tokens, k)
        committed = steps = 0
        spec_seconds = plain_seconds = 0.0
        generated = 0
        for prompt in settings.prompts:
            default.tokens(prompt, new_tokens, k)  # warm-up: first-inference compile time is not decoding speed
            best_spec = best_plain = float("inf")
            for _ in range(settings.repeats):
                tokens, seconds, metrics = default.tokens(prompt, new_tokens, k)
                best_spec = min(best_spec, seconds)
                best_plain = min(best_plain, default.tokens(prompt, new_tokens, None)[1])
            # The prefill step commits one token without verifying any draft; leave it out of the mean.
            committed += len(tokens) - 1
            steps += _target_steps(metrics) - 1
            generated += len(tokens)
            spec_seconds += best_spec
            plain_seconds += best_plain
        tokens_per_s = generated / spec_seconds
        baseline = generated / plain_seconds
        runs.append(SpeedRun(num_assistant_tokens=k, max_new_tokens=new_tokens,
                             accept_length=round(committed / max(steps, 1), 3), tokens_per_s=round(tokens_per_s, 2),
                             baseline_tokens_per_s=round(baseline, 2), speedup=round(tokens_per_s / baseline, 3)))
    best = max(runs, key=lambda run: run.tokens_per_s)
    return ValidationReport(
        lossless=not mismatches, mismatches=mismatches, prompts=list(settings.prompts), runs=runs,
        recommended_num_assistant_tokens=best.num_assistant_tokens, accept_length=best.accept_length,
        min_accept_length=settings.min_accept_length,
        acceptance_passed=best.accept_length >= settings.min_accept_length, device=settings.device,
        hardware=str(ov.Core().get_property(settings.device, "FULL_DEVICE_NAME")), pipeline="LLMPipeline",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot.validate", description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--settings", required=True, help="ValidationSettings as JSON")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vlm", action="store_true")
    args = parser.parse_args(argv)
    settings = ValidationSettings.model_validate_json(args.settings)
    report = run_validation(args.target, args.draft, settings)
    args.out.write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
