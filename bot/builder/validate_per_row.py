"""Validate a per-row draft through GenAI's continuous-batching interface, several requests at once (docs/design.md §5).

A per-row draft is PagedAttention-ready: a GenAI with per-row DFlash support (openvino.genai PR #4790, "Support
DFlash and DSpark drafts through continuous batching on PagedAttention") runs it inside the continuous-batching
scheduler beside the target, for concurrent requests. So its lossless gate serves several requests together and
compares each with plain greedy, token for token, under the exact CPU properties of `bot.builder.validate`.

Whether the installed GenAI can run a per-row draft is detected, not assumed from a version: its library must read
the per-row rt_info key `candidate_position_offset`. GenAI 2026.4.1 does not (its DFlash path is the single-request
stateful proof of concept), so validation is skipped with a reason that names what is missing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from bot.builder.validate import _exact_properties, _generation_config, _scheduler
from bot.core.errors import Skip, Stage
from bot.core.profiles import child_env
from bot.core.recipe import ValidationSettings
from bot.core.record_checks import ConcurrentRequest, ConcurrentValidation
from bot.core.settings import SANDBOX_LAYERS
from bot.sandbox.isolation import untrusted_env
from bot.sandbox.wire import Child, Request, run_child, serve

# What a per-row-capable GenAI library reads from the draft's rt_info; GenAI 2026.4.1 has no such string.
PER_ROW_MARKER = b"candidate_position_offset"
CONCURRENT_REQUESTS = 4
TOOL = "bot.builder.validate_per_row"


class PerRowRequest(Request):
    """One per-row pair to serve `requests` concurrent requests with."""

    target: Path
    draft: Path
    settings: ValidationSettings
    requests: int = Field(CONCURRENT_REQUESTS, ge=1)


@dataclass(frozen=True)
class RuntimeSupport:
    """Whether the installed GenAI can run per-row drafts, and why not."""

    supported: bool
    genai: str
    reason: str


def per_row_support(library: Path | None = None) -> RuntimeSupport:
    """Detect per-row DFlash support in the GenAI library (default: the installed `libopenvino_genai.so`)."""
    try:
        version = importlib.metadata.version("openvino-genai")
    except importlib.metadata.PackageNotFoundError:
        return RuntimeSupport(False, "not installed", "openvino-genai is not installed")
    if library is None:
        spec = importlib.util.find_spec("openvino_genai")
        folder = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
        found = (
            sorted(folder.glob("libopenvino_genai.so*")) + sorted(folder.glob("openvino_genai*.dll")) if folder else []
        )
        library = found[0] if found else None
    if library is None or not library.is_file():
        return RuntimeSupport(False, version, f"openvino-genai {version}: its library was not found to inspect")
    if PER_ROW_MARKER in library.read_bytes():
        return RuntimeSupport(
            True,
            version,
            f"openvino-genai {version} reads dflash/candidate_position_offset: "
            "per-row drafts run through continuous batching",
        )
    return RuntimeSupport(
        False,
        version,
        (
            f"openvino-genai {version} has no per-row DFlash support: its library never reads the per-row rt_info key "
            "dflash/candidate_position_offset, and its DFlash path is the single-request stateful proof of concept "
            "(one active request, batch 1); per-row drafts need openvino.genai PR #4790 in a release"
        ),
    )


def per_row_support_in(python: str | None) -> RuntimeSupport:
    """`per_row_support()` as seen by another environment's python (a toolchain profile's); None: this one."""
    if python is None or Path(python) == Path(sys.executable):
        return per_row_support()
    code = (
        "from bot.sandbox.telemetry import switch_off; switch_off(); "  # `import openvino` would post telemetry
        "import dataclasses, json; from bot.builder.validate_per_row import per_row_support; "
        "print(json.dumps(dataclasses.asdict(per_row_support())))"
    )
    done = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_env(untrusted_env(), python),
    )
    if done.returncode != 0:
        return RuntimeSupport(
            False,
            "unknown",
            f"GenAI per-row support could not be detected with {python}: "
            f"{(done.stderr.strip().splitlines() or ['(no output)'])[-1][:300]}",
        )
    return RuntimeSupport(**json.loads(done.stdout.strip().splitlines()[-1]))


def validate_per_row_pair(
    target_dir: Path,
    draft_dir: Path,
    settings: ValidationSettings,
    *,
    work: Path,
    python: str | None = None,
    requests: int = CONCURRENT_REQUESTS,
    support: RuntimeSupport | None = None,
    layers: Sequence[str] = SANDBOX_LAYERS,
) -> ConcurrentValidation:
    """Serve `requests` concurrent requests with the per-row pair and compare each with plain greedy.

    Args:
        target_dir, draft_dir: the exported IR folders.
        settings: the recipe's validation settings (prompts, max_new_tokens, device, the first k, timeout).
        work: scratch folder for the child's log and result.
        python: the toolchain profile's interpreter (None: this one).
        requests: how many requests are in flight together.
        support: the runtime capability (default: detected with `python`).
        layers: the OS confinement layers the child may use (`Settings.sandbox_layers`).

    Raises:
        Skip: the installed GenAI cannot run per-row drafts (the reason names what it lacks).
        Failure: GenAI failed, ran past the recipe's time limit, or wrote no `record_checks.ConcurrentValidation`.
    """
    support = support or per_row_support_in(python)
    if not support.supported:
        raise Skip(support.reason, stage=Stage.VALIDATE)
    child = Child(
        tool=TOOL,
        work=work,
        name="validation-per-row",
        what="GenAI per-row validation",
        reads=[target_dir, draft_dir],
        timeout_s=settings.timeout_s,
        python=python,
        layers=layers,
        stage=Stage.VALIDATE,
    )
    request = PerRowRequest(target=target_dir, draft=draft_dir, settings=settings, requests=requests)
    return run_child(child, request, ConcurrentValidation)


# ---- below runs inside the child process ----


def run_concurrent(target: Path, draft: Path, settings: ValidationSettings, requests: int) -> ConcurrentValidation:
    """Plain greedy, then the speculative pipeline, each serving all requests together (in this process)."""
    # GenAI (and OpenVINO with it): only the validation child runs it
    import openvino_genai as genai

    tokenizer = genai.Tokenizer(str(target))
    prompts = [settings.prompts[i % len(settings.prompts)] for i in range(requests)]
    inputs = [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True),
            add_special_tokens=False,
        ).input_ids
        for p in prompts
    ]
    k = settings.num_assistant_tokens[0]
    properties = _exact_properties()
    plain = genai.ContinuousBatchingPipeline(str(target), _scheduler(), settings.device, properties)
    expected = [
        list(r.m_generation_ids[0])
        for r in plain.generate(inputs, [_generation_config(settings.max_new_tokens, None)] * requests)
    ]
    del plain
    speculative = genai.ContinuousBatchingPipeline(
        str(target),
        _scheduler(),
        settings.device,
        {**properties, "draft_model": genai.draft_model(str(draft), settings.device, **properties)},
    )
    # generate() adds every request before the first step: all of them are in flight together.
    got = [
        list(r.m_generation_ids[0])
        for r in speculative.generate(inputs, [_generation_config(settings.max_new_tokens, k)] * requests)
    ]
    results = []
    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        same = want == have
        first = (
            None
            if same
            else next(
                (i for i, (a, b) in enumerate(zip(want, have, strict=False)) if a != b), min(len(want), len(have))
            )
        )
        results.append(
            ConcurrentRequest(
                prompt_index=index % len(settings.prompts),
                tokens=len(have),
                matches_greedy=same,
                first_difference=first,
            )
        )
    return ConcurrentValidation(
        requests=requests,
        num_assistant_tokens=k,
        lossless=all(r.matches_greedy for r in results),
        results=results,
        genai=importlib.metadata.version("openvino-genai"),
        pipeline="ContinuousBatchingPipeline",
    )


def _validate(request: PerRowRequest) -> ConcurrentValidation:
    return run_concurrent(request.target, request.draft, request.settings, request.requests)


def main(argv: list[str] | None = None) -> int:
    """The child: answer one `PerRowRequest`."""
    return serve(PerRowRequest, _validate, argv, prog=f"python -m {TOOL}")


if __name__ == "__main__":
    sys.exit(main())
