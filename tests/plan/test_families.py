"""Sizing per target family, headroom, time as a resource, and pre-quantised targets (issue 40)."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from bot.core.errors import Skip
from bot.core.recipe import load_recipe
from bot.core.runners import BUILD_JOB_SECONDS, LinearFit, RunnerClass, RunnerSettings, SizingModel
from bot.discover.candidates import Candidate
from bot.discover.checkpoints import export_load_bytes, read_target
from bot.plan.sizing import BuildTime, Pair, choose_runner, estimate_build, pair_of
from tests.conftest import REPO_ROOT

GB = 10**9
ZERO: dict[str, float] = {"a": 0.0, "b": 0}
# Round lines: every export holds its bytes, the rest nothing; each stage takes 100 s plus 1 s per GB on 2 cores.
LINES: dict[str, object] = {}
LINES |= {
    f"{stage}_{kind}": ({"a": 1.0, "b": 0} if kind == "memory" and stage.endswith("export") else ZERO)
    for stage in ("draft_export", "target_export", "validate", "inspect", "quality")
    for kind in ("memory", "file")
} | {
    f"{stage}_seconds": {"a": 1e-9, "b": 100}
    for stage in ("draft_export", "target_export", "validate", "inspect", "quality")
}
LINES |= {"ir_bytes": ZERO, "export_scratch_disk": ZERO, "cores": 2}
# A family whose target export holds twice its bytes and takes twice as long.
MOE = LINES | {"target_export_memory": {"a": 2.0, "b": 0}, "target_export_seconds": {"a": 2e-9, "b": 200}}
MODEL = SizingModel.model_validate(LINES | {"families": {"qwen3_moe": MOE}})


def runner(memory_gb: float, disk_gb: float = 1000, *, cores: int = 4, max_seconds: int | None = None) -> RunnerClass:
    return RunnerClass(
        name="r",
        max_memory_bytes=int(memory_gb * GB),
        max_disk_bytes=int(disk_gb * GB),
        runs_on="ubuntu-latest",
        cores=cores,
        max_seconds=max_seconds,
    )


def test_a_family_with_lines_of_its_own_is_sized_by_them_and_its_draft_by_qwen3s():
    lines, measured = MODEL.for_family("qwen3_moe")
    assert measured and lines.stages["target_export"].memory == LinearFit(a=2.0, b=0)
    moe = estimate_build(1 * GB, 10 * GB, runner(100), MODEL, family="qwen3_moe")
    dense = estimate_build(1 * GB, 10 * GB, runner(100), MODEL, family="qwen3")
    assert (moe.peak_memory_bytes, dense.peak_memory_bytes) == (21 * GB, 11 * GB)  # side by side: draft 1 + target
    assert MODEL.for_family("gemma4") == (MODEL, False)  # unmeasured: the Qwen3 lines stand in


def test_an_unmeasured_family_is_planned_by_the_qwen3_lines_and_the_reason_says_so():
    runners = RunnerSettings(classes=[runner(100)], sizing=MODEL, headroom=0.0)
    _, _, reason = choose_runner(Pair(1 * GB, 10 * GB, family="gemma4"), runners)
    assert "sized by the qwen3 lines: none measured for gemma4 targets" in reason
    _, _, reason = choose_runner(Pair(1 * GB, 10 * GB, family="qwen3_moe"), runners)
    assert "sized by" not in reason


def test_a_family_may_borrow_a_measured_familys_lines_and_the_plan_says_whose():
    """Qwen3.5-MoE stores its experts as Qwen3-MoE does (fused at load): until its own width is measured, the recipe
    may size it by qwen3_moe's lines rather than the dense Qwen3 ones, and the reason names the stand-in."""
    borrowed = SizingModel.model_validate(
        LINES | {"families": {"qwen3_moe": MOE, "qwen3_5_moe": MOE | {"measured_on": "qwen3_moe"}}}
    )
    lines, measured = borrowed.for_family("qwen3_5_moe")
    assert not measured and lines.stages["target_export"].memory == LinearFit(a=2.0, b=0)
    assert borrowed.measured_family("qwen3_5_moe") == "qwen3_moe" and borrowed.measured_family("gemma4") == "qwen3"
    runners = RunnerSettings(classes=[runner(100)], sizing=borrowed, headroom=0.0)
    _, estimate, reason = choose_runner(Pair(1 * GB, 10 * GB, family="qwen3_5_moe"), runners)
    assert estimate.peak_memory_bytes == 21 * GB
    assert "sized by the qwen3_moe lines: none measured for qwen3_5_moe targets" in reason
    assert SizingModel.model_validate(borrowed.model_dump(mode="json")) == borrowed


def test_families_round_trip_through_a_recipe_and_bad_ones_are_refused_by_name():
    assert SizingModel.model_validate(MODEL.model_dump(mode="json")) == MODEL
    assert "families" in MODEL.model_dump() and "families" not in SizingModel().model_dump()
    with pytest.raises(ValidationError, match="the top-level lines are qwen3's"):
        SizingModel.model_validate(LINES | {"families": {"qwen3": MOE}})
    with pytest.raises(ValidationError, match="hold no families of their own: qwen3_moe"):
        SizingModel.model_validate(LINES | {"families": {"qwen3_moe": MOE | {"families": {"x": MOE}}}})


def test_the_headroom_refuses_a_class_the_estimate_only_just_fits():
    """The issue's case: 29.6 GB estimated against a 30 GB class is 1 % headroom; the recipe asks for 15 %."""
    pair = Pair(0, int(28.6 * GB))  # the target export holds its bytes: a 28.6 GB peak
    tight = RunnerSettings(classes=[runner(30)], sizing=MODEL)
    assert tight.headroom == 0.15 == load_recipe().runners.headroom
    chosen, estimate, reason = choose_runner(pair, tight)
    assert chosen is None and "short of memory with 15% headroom" in reason
    assert f"max_memory_bytes >= {33 * GB}" in reason  # 28.6 GB x 1.15 = 32.9, in whole GB
    assert choose_runner(pair, tight.model_copy(update={"headroom": 0.0}))[0] is not None
    assert estimate.peak_memory_bytes < 30 * GB


def test_seconds_scale_with_the_classes_cores_and_the_recipe_adds_its_validation_budget():
    pair = Pair(1 * GB, 10 * GB)
    four = estimate_build(pair.draft_bytes, pair.target_bytes, runner(100, cores=4), MODEL)
    eight = estimate_build(pair.draft_bytes, pair.target_bytes, runner(100, cores=8), MODEL)
    # On 2 cores: exports side by side max(101, 110) + inspect 110 + quality 110 + validate 111 = 441 s.
    assert (four.seconds, eight.seconds) == (220, 110)
    time = BuildTime(download_s=600, timing_budget_s=300, validation_timeout_s=3600, formats=2)
    budgeted = estimate_build(pair.draft_bytes, pair.target_bytes, runner(100, cores=4), MODEL, time=time)
    assert budgeted.seconds == 220 - 56 + 2 * (56 + 300)  # each format's validation gets the timer's budget
    assert budgeted.download_s == 600


def test_a_build_that_would_not_finish_in_the_jobs_time_is_refused_naming_the_cores_it_needs():
    pair = Pair(1 * GB, 10 * GB)
    time = BuildTime(download_s=100)
    slow = RunnerSettings(classes=[runner(100, cores=2, max_seconds=400)], sizing=MODEL, headroom=0.0)
    chosen, estimate, reason = choose_runner(pair, slow, time)
    assert chosen is None and estimate.seconds == 441 and "short of time" in reason
    assert "cores: 3" in reason  # 441 s x 2 cores / 3 cores = 294 s, + the download's 100: inside 400
    roomy = slow.model_copy(update={"classes": [runner(100, cores=3, max_seconds=400)]})
    assert choose_runner(pair, roomy, time)[0] is not None
    none_will_do = slow.model_copy(update={"classes": [runner(100, cores=2, max_seconds=100)]})
    assert "no number of cores finishes its stages inside the job's 2 min" in choose_runner(pair, none_will_do, time)[2]


def test_the_recipes_time_terms():
    recipe = load_recipe()
    time = BuildTime.of(recipe)
    assert time.download_s == recipe.hub.download_deadline_s and time.formats == len(recipe.export.draft_weight_formats)
    assert time.timing_budget_s == recipe.validation.timing_budget_s
    workflow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "watch.yml").read_text())
    build_job_s = workflow["jobs"]["build"]["timeout-minutes"] * 60
    # A class's default time limit is the build job's: a build planned past it would be cancelled unreported.
    assert build_job_s == BUILD_JOB_SECONDS and all(c.max_seconds == build_job_s for c in recipe.runners.classes)


TARGET = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24, "vocab_size": 201088}


def test_an_mxfp4_target_is_sized_by_the_bf16_bytes_the_export_loads():
    spec = read_target(TARGET | {"quantization_config": {"quant_method": "mxfp4"}})
    assert spec.quantization == "mxfp4" and read_target(TARGET).quantization is None
    # 4.25 bits a parameter on disk, 16 loaded: gpt-oss-20b's 13.8 GB of files load as about 52 GB (an upper bound).
    assert export_load_bytes("mxfp4", 13_800_000_000) == pytest.approx(13.8e9 * 16 / 4.25, rel=1e-9)
    assert export_load_bytes(None, 123) == 123
    candidate = Candidate(
        repo_id="a/b",
        revision="a" * 40,
        kind="dflash",
        draft_format="stateful",
        target_repo="openai/gpt-oss-20b",
        target_revision="b" * 40,
        target_model_type="gpt_oss",
        target_is_vlm=False,
        draft_bytes=1 * GB,
        target_bytes=13_800_000_000,
        profile="default",
        target_quantization="mxfp4",
    )
    pair = pair_of([candidate])
    assert pair.target_bytes == export_load_bytes("mxfp4", 13_800_000_000) and pair.draft_bytes == 1 * GB
    assert pair.family == "gpt_oss" and pair.drafts == 1


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "pre-quantised target (gptq): GPTQ"),
        ({"quantization_config": {"quant_method": "awq"}}, "pre-quantised target (awq): AWQ"),
        ({"quantization_config": {"quant_method": "fp8"}}, "pre-quantised target (fp8)"),
        ({"text_config": {**TARGET, "quantization_config": {"quant_method": "FP8"}}}, "(fp8)"),
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "(bitsandbytes): the bot knows no export"),
        ({"quantization_config": {"bits": 4}}, "quantization_config without a quant_method"),
    ],
)
def test_a_target_pre_quantised_in_a_way_the_export_cannot_take_is_a_skip_naming_it(config, named):
    with pytest.raises(Skip) as raised:
        read_target(TARGET | config, subject="org/target")
    assert named in raised.value.message and raised.value.stage == "classify"
