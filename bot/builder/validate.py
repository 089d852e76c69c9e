"""Validate an exported pair with OpenVINO GenAI: the lossless gate, the acceptance gate, and the speed sweep.

Lossless alone proves nothing about the draft (speculative decoding is lossless with any draft), so a pair must
also reach the recipe's minimum accept length (docs/design.md §6). The lossless gate uses exact CPU properties (f32 KV
cache, no dynamic quantization, f32 inference) because the defaults drift even for plain greedy; acceptance and
speed are measured with the default properties that users run, plain and speculative interleaved until the
speed-up's interval is tight (`bot.builder.timing`).

GenAI runs in a child process (`python -m bot.sandbox.child bot.builder.validate`) inside the trust boundary, with a
time limit, so a crash or hang on a bad pair cannot take the bot down; a `ValidationRequest` goes in and the record's
`Validation` comes back (`bot.sandbox.wire`).

VLM targets (Qwen3.5/3.6) run through `VLMPipeline`. Their hybrid text model keeps a linear-attention (GatedDeltaNet)
state that speculative decoding must roll back inside a verification window; the scheduler's pool of those rows
must hold one committed row plus 1 + num_assistant_tokens scratch rows, or a verification window never fits
(notes/qwen3_5-vlm-on-cpu.md §4). The lossless gate adds an image prompt for them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bot.builder.timing import Sweep, first_difference, machine_facts, timed_sweep
from bot.core.errors import Stage
from bot.core.recipe import ValidationSettings
from bot.core.record_checks import DefaultPropertiesCheck, Gates, Mismatch, Validation
from bot.core.settings import SANDBOX_LAYERS
from bot.core.speedup import no_speedup_note, recommend_k, speedup_gate
from bot.sandbox.wire import Child, Request, run_child, serve

BASELINE_FILE = "baseline.json"  # the exact plain greedy outputs a validation used, in its own work folder
TOOL = "bot.builder.validate"


class ValidationRequest(Request):
    """One pair to validate, and the exact plain greedy outputs to reuse (`baseline`) and to write (`baseline_out`)."""

    target: Path
    draft: Path
    settings: ValidationSettings
    vlm: bool = False
    linear_attention: bool = False  # the target has linear-attention layers: GenAI needs their state pool
    baseline: Path | None = None
    baseline_out: Path | None = None


def validate_pair(
    target_dir: Path,
    draft_dir: Path,
    settings: ValidationSettings,
    *,
    work: Path,
    is_vlm: bool = False,
    linear_attention: bool = False,
    python: str | None = None,
    memory_budget_bytes: int | None = None,
    baseline: Path | None = None,
    layers: Sequence[str] = SANDBOX_LAYERS,
) -> Validation:
    """Run the GenAI validation of one pair in a time-limited child process without Hub credentials.

    `is_vlm` runs it through `VLMPipeline`; `linear_attention` (the target has linear-attention layers) sizes
    GenAI's linear-attention state pool for the sweep's largest k, which GenAI refuses for a target without such
    layers (Gemma 4); `python` is the interpreter of the job's toolchain profile;
    `memory_budget_bytes` stops the run when its process tree outgrows it (the runner class's memory).
    `baseline` is the `baseline.json` an earlier validation of the same target left in its own work folder: its
    exact plain greedy outputs are reused when they are for this target and settings (read-only here), so the
    lossless gate's reference is generated once; timings are not reused (each format times its own interleaved
    pairs). Each validation writes the baseline it used into its own `work/baseline.json` (no child writes into
    another child's folder).
    `layers` are the OS confinement layers the child may use (`Settings.sandbox_layers`).

    Raises:
        Failure: GenAI could not load or run the pair, the run exceeded `settings.timeout_s`, it went over the
            memory budget, or the child wrote no `record_checks.Validation` (`bot.sandbox.wire.run_child`).
    """
    earlier = baseline if baseline is not None and baseline.is_file() else None
    request = ValidationRequest(
        target=target_dir,
        draft=draft_dir,
        settings=settings,
        vlm=is_vlm,
        linear_attention=linear_attention,
        baseline=earlier,
        baseline_out=work / BASELINE_FILE,
    )
    child = Child(
        tool=TOOL,
        work=work,
        name="validation",
        what="GenAI validation",
        reads=[target_dir, draft_dir, *([earlier.parent] if earlier else [])],
        timeout_s=settings.timeout_s,
        memory_budget_bytes=memory_budget_bytes,
        python=python,
        layers=layers,
        stage=Stage.VALIDATE,
    )
    return run_child(child, request, Validation)


# ---- everything below runs inside the child process ----


def _exact_properties() -> dict:
    # openvino: a second to import; only the processes that read an IR need it
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
    # GenAI (and OpenVINO with it): only the validation child runs it
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
    # numpy: only the measuring child needs it
    import numpy as np
    import openvino as ov

    y, x = np.mgrid[0:height, 0:width]
    image = np.stack(
        [x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), ((x // 8 + y // 8) % 2) * 255], axis=-1
    ).astype(np.uint8)
    return ov.Tensor(image)


def _generation_config(max_new_tokens: int, k: int | None):
    # GenAI (and OpenVINO with it): only the validation child runs it
    import openvino_genai as genai

    config = genai.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    config.ignore_eos = True
    if k is not None:
        config.num_assistant_tokens = k
    return config


class _Pipeline:
    """One GenAI pipeline over the target with one set of CPU properties: plain greedy, or speculative with the
    draft. The lossless gate holds one at a time (`_opened`): each compiles its own copy of the target. The timed
    sweep holds a plain and a speculative one at once, because the pairs it times interleave them.

    A speculative pipeline cannot stand in for the plain one: GenAI asserts that a request to it sets
    `num_assistant_tokens` (or a confidence threshold), so plain greedy needs a pipeline without a draft.
    """

    def __init__(
        self,
        target: Path,
        device: str,
        properties: dict,
        *,
        draft: Path | None = None,
        vlm: bool = False,
        linear_blocks: int | None = None,
    ):
        # GenAI (and OpenVINO with it): only the validation child runs it
        import openvino_genai as genai

        self.vlm = vlm
        self.speculative = draft is not None
        pipeline = genai.VLMPipeline if vlm else genai.LLMPipeline
        drafting = {"draft_model": genai.draft_model(str(draft), device, **properties)} if draft is not None else {}
        self.pipe = pipeline(str(target), device, scheduler_config=_scheduler(linear_blocks), **drafting, **properties)
        if not vlm:
            tokenizer = self.pipe.get_tokenizer()
            self._encode = lambda prompt: tokenizer.encode(
                tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True),
                add_special_tokens=False,
            )

    def tokens(self, prompt: str, max_new_tokens: int, k: int | None, image=None):
        """Generate greedily: `k` is None for a plain pipeline, the number of draft tokens for a speculative one."""
        if (k is not None) != self.speculative:
            raise ValueError(f"k={k} on a {'speculative' if self.speculative else 'plain'} pipeline")
        pipe = self.pipe
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


@contextlib.contextmanager
def _opened(
    target: Path,
    device: str,
    properties: dict,
    *,
    draft: Path | None = None,
    vlm: bool = False,
    linear_blocks: int | None = None,
) -> Iterator[_Pipeline]:
    """A `_Pipeline`, freed when the block ends, before the next one is compiled."""
    pipeline = _Pipeline(target, device, properties, draft=draft, vlm=vlm, linear_blocks=linear_blocks)
    try:
        yield pipeline
    finally:
        del pipeline.pipe
        del pipeline
        _release_freed_memory()


def _release_freed_memory() -> None:
    """Collect the freed pipeline and hand glibc's free heap pages back to the kernel, so the next pipeline's
    compile does not come on top of the last one's leftovers."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _token_collector():
    # GenAI (and OpenVINO with it): only the validation child runs it
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


def _load_baseline(baseline: Path | None, key: dict) -> dict | None:
    """The exact plain greedy outputs an earlier validation wrote for the same target and settings."""
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
    linear_attention: bool = False,
    baseline_file: Path | None = None,
    baseline_out: Path | None = None,
) -> Validation:
    """The gates and the sweep, in this process (called by the child).

    For a VLM target the lossless gate runs the text prompts and, in addition, the first prompt with a generated
    image (its index is `len(prompts)` in a mismatch); the sweep uses the text prompts (`bot.builder.timing`). With
    `baseline_file`, the exact plain greedy outputs are read from that file when it holds this target's, else
    generated; with `baseline_out` the ones used are written there. Timings are never reused: each format's sweep
    times its own plain generations beside its speculative ones.
    """
    key = {"target": str(target.resolve()), "settings": settings.model_dump(exclude={"timeout_s"}), "vlm": vlm}
    known = _load_baseline(baseline_file, key)
    linear_blocks = linear_attention_blocks(settings.num_assistant_tokens) if linear_attention else None
    cases = [(prompt, None) for prompt in settings.prompts]
    if vlm:
        cases.append((settings.prompts[0], generated_image()))
    # The lossless gate holds one pipeline at a time, each freed before the next is compiled: plain then
    # speculative, with the exact properties.
    exact = _exact_properties()
    opened = functools.partial(_opened, target, settings.device, vlm=vlm, linear_blocks=linear_blocks)
    if known:
        expected_by_case = known["expected"]
    else:
        with opened(exact) as plain_exact:
            expected_by_case = [
                plain_exact.tokens(prompt, settings.max_new_tokens, None, image)[0] for prompt, image in cases
            ]
    with opened(exact, draft=draft) as speculative_exact:
        mismatches = _lossless_gate(speculative_exact, cases, expected_by_case, settings)

    # Timing holds a plain and a speculative pipeline at once: only interleaving them (plain, speculative, plain,
    # ...) lets a shared machine's drift fall on both sides of each pair instead of on one figure.
    with opened({}) as plain_default, opened({}, draft=draft) as speculative_default:
        sweep = timed_sweep(plain_default, speculative_default, settings)
    if baseline_out is not None:
        baseline = {"key": key, "expected": expected_by_case}
        baseline_out.write_text(json.dumps(baseline), encoding="utf-8")
    return _validation(settings, sweep, mismatches, vlm=vlm, linear_blocks=linear_blocks)


def _lossless_gate(
    exact: _Pipeline, cases: list, expected_by_case: list, settings: ValidationSettings
) -> list[Mismatch]:
    """Every k against plain greedy, token for token, with the exact CPU properties (`exact`: speculative)."""
    mismatches = []
    for k in settings.num_assistant_tokens:
        for index, (prompt, image) in enumerate(cases):
            got, _, _ = exact.tokens(prompt, settings.max_new_tokens, k, image)
            if got != expected_by_case[index]:
                mismatches.append(
                    Mismatch(
                        prompt_index=index,
                        num_assistant_tokens=k,
                        first_difference=first_difference(expected_by_case[index], got),
                    )
                )
    return mismatches


def _validation(
    settings: ValidationSettings,
    sweep: Sweep,
    mismatches: list[Mismatch],
    *,
    vlm: bool,
    linear_blocks: int | None,
) -> Validation:
    """The record's validation part: the figures, and each gate decided once from them."""
    runs = [m.run for m in sweep.measured.values()]
    recommended, why = recommend_k({k: m.interval for k, m in sweep.measured.items()})
    best = sweep.measured[recommended]
    machine = machine_facts(settings.device)
    acceptance_passed = best.run.accept_length >= settings.min_accept_length
    speedup_passed = speedup_gate(best.run.speedup, settings.min_speedup) is None
    diverged = best.divergence
    return Validation(
        lossless=not mismatches,
        mismatches=mismatches,
        prompts=list(settings.prompts),
        runs=runs,
        recommended_num_assistant_tokens=recommended,
        accept_length=best.run.accept_length,
        min_accept_length=settings.min_accept_length,
        acceptance_passed=acceptance_passed,
        device=settings.device,
        hardware=machine.cpu,
        pipeline="VLMPipeline" if vlm else "LLMPipeline",
        image_prompts=1 if vlm else 0,
        num_linear_attention_blocks=linear_blocks,
        cores=machine.cores,
        speedup_note=no_speedup_note([run.speedup for run in runs], device=settings.device, cores=machine.cores),
        min_speedup=settings.min_speedup,
        speedup_passed=speedup_passed,
        gates=Gates(
            lossless=not mismatches,
            acceptance=acceptance_passed,
            speedup=speedup_passed if settings.min_speedup is not None else None,
        ),
        recommendation=why,
        machine=machine,
        timing=sweep.timing,
        default_properties=DefaultPropertiesCheck(
            lossless=diverged is None,
            num_assistant_tokens=recommended,
            prompts=len(settings.prompts),
            prompt_index=diverged[0] if diverged else None,
            first_difference=diverged[1] if diverged else None,
        ),
    )


def _validate(request: ValidationRequest) -> Validation:
    return run_validation(
        request.target,
        request.draft,
        request.settings,
        vlm=request.vlm,
        linear_attention=request.linear_attention,
        baseline_file=request.baseline,
        baseline_out=request.baseline_out,
    )


def main(argv: list[str] | None = None) -> int:
    """The child: answer one `ValidationRequest`."""
    return serve(ValidationRequest, _validate, argv, prog=f"python -m {TOOL}")


if __name__ == "__main__":
    sys.exit(main())
