"""The build stages `bench/scale.py` measures, one function each, on a work folder laid out as a build lays it out.

Each stage reads the outputs of the stages before it from their usual places under the work folder (the checkpoint
in ``download``, its working copy in ``src``, the IRs in ``ir``) and writes its own output where it is told, so a
stage can run again beside its first output: the memory-limit and floor modes of `bench/scale.py` rerun one stage
many times, each time in a fresh child process (``python bench/stages.py STAGE ...``) placed in a memory cgroup.

    .venv/bin/python bench/stages.py STAGE --shape SHAPE --work DIR --out DIR --scratch DIR [--result FILE]
        [--recipe-validation]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, write_recipe

STAGES = ("download", "copy", "draft export", "target export", "inspect", "quality", "validate", "bundle")
END_TO_END = "build"  # `dflash-bot build` on the downloaded checkpoint as a whole, exports side by side
PROMPTS = [
    "Explain speculative decoding in one paragraph.",
    "Write a short poem about the sea.",
    "List three prime numbers and say why they are prime.",
]


def bench_recipe():
    """The recipe the stages read: `BENCH_RECIPE` (a file) when set, so a long run keeps the recipe it started with
    while the checkout changes under it, else the default one."""
    from bot.core.recipe import load_recipe

    path = os.environ.get("BENCH_RECIPE")
    return load_recipe(Path(path) if path else None)


def canonical_output(stage: str, work: Path) -> Path | None:
    """Where a stage's output lives in a build's work folder (None: the stage leaves nothing the next one reads)."""
    return {
        "download": work / "download",
        "copy": work / "src",
        "draft export": work / "ir" / "draft",
        "target export": work / "ir" / "target",
        "quality": work / "quality",
        "validate": work / "validate",
        "bundle": work / "bundle",
    }.get(stage)


def run_stage(stage: str, shape: str, work: Path, out: Path, scratch: Path, *, recipe_validation: bool = False) -> dict:
    """Run one stage on the inputs under `work`, writing its output to `out` and its logs, private HF home and
    temporary files to `scratch`.

    Args:
        stage: one of `STAGES`, or `END_TO_END` (reads only the download).
        shape: the `make-tiny --shape` the work folder holds (the download stage writes it).
        work: the build's work folder, with the outputs of the stages before this one in their usual places.
        out: the folder this stage writes (its usual place for the first run, another one for a rerun).
        scratch: folder for the stage's logs, HOME/TMPDIR/HF_HOME (optimum-cli stages its IR under TMPDIR).
        recipe_validation: validate with the recipe's sweep instead of the shortened one.

    Returns:
        The stage's own figures beyond time and memory (accept length, attention layers, ...), JSON-ready.
    """
    if stage == "download":
        # Written in a child process (torch stays out of this one): the bytes a download would leave there.
        subprocess.run(
            [str(BIN / "dflash-bot"), "make-tiny", "--shape", shape, str(out)], check=True, stdout=subprocess.DEVNULL
        )
        return {"note": "generated in place"}
    if stage == END_TO_END:
        end_to_end((work / "download").resolve(), out, scratch)  # a linked checkpoint (--checkpoint) as itself
        return {}
    if stage == "copy":
        from bot.discover.fetch import safe_copy

        safe_copy(work / "download" / "draft", out / "draft")
        safe_copy(work / "download" / "target", out / "target")
        return {}
    runner = {
        "draft export": _export,
        "target export": _export,
        "inspect": _inspect,
        "quality": _quality,
        "validate": _validate,
        "bundle": _bundle,
    }.get(stage)
    if runner is None:
        raise SystemExit(f"unknown stage {stage!r}; one of: {', '.join(STAGES)}")
    return runner(stage, work, out, scratch, recipe_validation)


def end_to_end(pair: Path, out: Path, scratch: Path) -> None:
    """`dflash-bot build` of the pair in `pair` into `out`, as a user runs it, with TMPDIR in `scratch`.

    Raises:
        SystemExit: the build failed (a random-weight draft failing the acceptance gate after a complete build,
            exit 2, is no failure here).
    """
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch)}
    # The validation sweep's length changes time, not memory: one k, one repeat, as the stage rows use.
    recipe = write_recipe(
        scratch / "recipe.yaml", num_assistant_tokens=[3], repeats=1, max_new_tokens=16, min_accept_length=1.0
    )
    done = subprocess.run(
        [
            str(BIN / "dflash-bot"),
            "build",
            "--draft",
            str(pair / "draft"),
            "--target",
            str(pair / "target"),
            "--out",
            str(out),
            "--recipe",
            str(recipe),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, 2) or not (out / "openvino_export.json").is_file():
        raise SystemExit(f"dflash-bot build failed ({done.returncode}):\n{done.stderr[-3000:]}")


def _specs(work: Path):
    from bot.core.profiles import toolchain_for
    from bot.core.settings import Settings
    from bot.discover.checkpoints import classify_draft, load_config, read_target

    src = work / "src"
    model_type = json.loads((src / "target" / "config.json").read_text())["model_type"]
    root = Settings.from_env(os.environ).profiles_dir
    return (
        toolchain_for(model_type, root=root).python,
        classify_draft(load_config(src / "draft")),
        read_target(load_config(src / "target")),
    )


def _export(stage: str, work: Path, out: Path, scratch: Path, recipe_validation: bool) -> dict:
    from bot.builder.export import ExportRequest, export_model
    from bot.core.exporter import TASK_LLM, TASK_VLM

    python, _, target_spec = _specs(work)
    role = stage.split()[0]
    task = TASK_VLM if role == "target" and target_spec.is_vlm else TASK_LLM
    request = ExportRequest(role, work / "src" / role, out, task, trust_remote_code=role == "draft")
    # optimum-cli writes the floating-point IR under TMPDIR before compressing it: keep that on the measured disk.
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(scratch / "tmp")
    try:
        export_model(request, bench_recipe().export, log_dir=scratch / "logs", home=scratch / "hf", python=python)
    finally:
        if previous is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = previous
    return {}


def _inspect(stage: str, work: Path, out: Path, scratch: Path, recipe_validation: bool) -> dict:
    from bot.builder.check_ir import inspect_draft, inspect_target

    _, draft_spec, target_spec = _specs(work)
    target_report = inspect_target(work / "ir" / "target", target_spec, draft_spec)
    inspect_draft(work / "ir" / "draft", draft_spec)
    return {"attention_layers": target_report.attention_layers}


def _quality(stage: str, work: Path, out: Path, scratch: Path, recipe_validation: bool) -> dict:
    from bot.builder.quality import measure_quality

    python, _, _ = _specs(work)
    recipe = bench_recipe()
    quality = measure_quality(
        work / "src" / "target",
        work / "ir" / "target",
        recipe.validation.prompts,
        recipe.validation.max_new_tokens,
        work=out,
        python=python,
    )
    return {
        "reference_dtype": quality.reference_dtype,
        "tokens": quality.tokens,
        "top1_agreement": quality.top1_agreement,
    }


def validation_settings(recipe_validation: bool):
    """The recipe's sweep, or the shortened one (one k, one repeat, 16 tokens: memory does not depend on the
    sweep)."""
    from bot.core.recipe import ValidationSettings

    if recipe_validation:
        return bench_recipe().validation.model_copy(update={"min_accept_length": 1.0})
    return ValidationSettings(
        prompts=PROMPTS, max_new_tokens=16, num_assistant_tokens=[3], repeats=1, min_accept_length=1.0, timeout_s=3600
    )


def _validate(stage: str, work: Path, out: Path, scratch: Path, recipe_validation: bool) -> dict:
    from bot.builder.validate import validate_pair

    python, _, target_spec = _specs(work)
    settings = validation_settings(recipe_validation)
    report = validate_pair(
        work / "ir" / "target",
        work / "ir" / "draft",
        settings,
        work=out,
        is_vlm=target_spec.is_vlm,
        linear_attention=target_spec.linear_attention,
        python=python,
    )
    run = next(r for r in report.runs if r.num_assistant_tokens == settings.num_assistant_tokens[0])
    return {
        "plain_s_per_token": round(1 / run.baseline_tokens_per_s, 4),
        "speculative_s_per_token": round(1 / run.tokens_per_s, 4),
        "accept_length": run.accept_length,
        "num_assistant_tokens": run.num_assistant_tokens,
        "lossless": report.lossless,
    }


def _bundle(stage: str, work: Path, out: Path, scratch: Path, recipe_validation: bool) -> dict:
    from bot.builder.bundle import write_draft_folder, write_target_folder

    ir, src = work / "ir", work / "src"
    write_draft_folder(ir / "draft", src / "draft" / "config.json", out / "draft")
    write_target_folder(ir / "target", out / "target", src / "target")
    return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=(*STAGES, END_TO_END))
    parser.add_argument("--shape", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--result", type=Path, help="where to write the stage's own figures (JSON)")
    parser.add_argument("--recipe-validation", action="store_true")
    args = parser.parse_args()
    figures = run_stage(
        args.stage, args.shape, args.work, args.out, args.scratch, recipe_validation=args.recipe_validation
    )
    if args.result is not None:
        args.result.write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
