"""Sizing from measurement: the export schedule, the runner class, early removal of sources, the skip reason."""

from __future__ import annotations

import re

import pytest

from bot.core.recipe import load_recipe
from bot.core.runners import SIZED_STAGES, LinearFit, RunnerClass, RunnerSettings, SizingModel
from bot.plan.sizing import Pair, choose_runner, estimate_build, estimate_schedule, local_runner, stage_peaks

GB = 10**9
# A model with round numbers, so the expected figures can be worked out by hand.
MODEL = SizingModel.model_validate(
    {
        "draft_export_memory": LinearFit(a=1.0, b=1 * GB),
        "target_export_memory": LinearFit(a=1.0, b=1 * GB),
        "validate_memory": LinearFit(a=0.5, b=0),
        "inspect_memory": LinearFit(a=0.25, b=0),
        "ir_bytes": LinearFit(a=0.25, b=0),
        "export_scratch_disk": LinearFit(a=0.0, b=0),
        "quality_memory": LinearFit(a=0.0, b=0),
        "draft_export_file": LinearFit(a=1.0, b=0),
        "target_export_file": LinearFit(a=1.0, b=0),
        "validate_file": LinearFit(a=0.25, b=0),
        "inspect_file": LinearFit(a=0.0, b=0),
        "quality_file": LinearFit(a=1.0, b=0),
    }
)


def with_line(model: SizingModel, **lines: LinearFit) -> SizingModel:
    """`model` with some lines changed, named as a recipe names them (`quality_memory`)."""
    return SizingModel.model_validate({**model.model_dump(), **lines})


def test_the_recipes_lines_are_one_per_sized_stage_and_kind_and_round_trip():
    assert SizingModel.line_names() == [
        *(f"{stage}_{kind}" for stage in SIZED_STAGES for kind in ("memory", "file", "seconds")),
        "ir_bytes",
        "export_scratch_disk",
    ]
    assert list(MODEL.model_dump()) == [*SizingModel.line_names(), "cores"]  # no families: none written
    assert SizingModel.model_validate(MODEL.model_dump(mode="json")) == MODEL
    assert MODEL.stages["validate"].memory == LinearFit(a=0.5, b=0)
    assert with_line(MODEL, validate_file=LinearFit(a=9.0, b=1)).stages["validate"].file == LinearFit(a=9.0, b=1)
    peaks = stage_peaks(1 * GB, 4 * GB, MODEL)
    assert set(peaks.memory) == set(peaks.file) == set(SIZED_STAGES)


# Safetensors bytes of the real checkpoints (shapes from tinymodels.shapes, which reproduce the Hub's sizes).
QWEN3_4B = 8_044_936_192
QWEN3_4B_DFLASH = 1_074_854_400
QWEN3_8B = 16_381_470_720
QWEN3_8B_DFLASH = 2_097_259_104  # z-lab/Qwen3-8B-DFlash-b16, from its safetensors metadata
# Qwen3.5-4B: about 4.66 B parameters with its vision tower, so ~9.3 GB of bf16; its draft has the 4B's width.
QWEN3_5_4B = 9_300_000_000
# Qwen3.5-9B: 8.95 B text parameters (32 layers, hidden 4096, MLP 12288, vocabulary 248320, untied) plus its vision
# tower and MTP layer, about 9.65 B, so ~19.3 GB of bf16; z-lab/Qwen3.5-9B-DFlash is a ~1 B-parameter draft of the
# 8B draft's width, ~2.1 GB. Approximate (no local copy of their metadata): together 21.4 GB, the sum the old RSS
# model's 27.7 GB estimate in issue 23 implies (1.1865 x bytes + 2.29 GB).
QWEN3_5_9B = 19_300_000_000
QWEN3_5_9B_DFLASH = 2_100_000_000
# A 27B-class pair (Qwen3.5-27B: ~27.8 B parameters, ~55.6 GB of bf16; a draft of ~1.7 B parameters). Approximate:
# it stands for the pairs the free runner cannot take.
QWEN3_5_27B = 55_600_000_000
QWEN3_5_27B_DFLASH = 3_500_000_000


def runner(memory_gb: float, disk_gb: float, name: str = "r") -> RunnerClass:
    return RunnerClass(
        name=name, max_memory_bytes=int(memory_gb * GB), max_disk_bytes=int(disk_gb * GB), runs_on="ubuntu-latest"
    )


def test_exports_run_in_parallel_only_when_both_fit_together():
    # draft 1 GB -> export 2 GB; target 4 GB -> export 5 GB; together 7 GB; validate 2.5 GB, inspect 1 GB.
    roomy = estimate_build(1 * GB, 4 * GB, runner(8, 100), MODEL)
    assert roomy.parallel_exports and roomy.peak_memory_bytes == 7 * GB
    tight = estimate_build(1 * GB, 4 * GB, runner(6, 100), MODEL)
    assert not tight.parallel_exports and tight.peak_memory_bytes == 5 * GB
    assert tight.fits(runner(6, 100)) and not roomy.fits(runner(6, 100))
    assert not estimate_build(1 * GB, 4 * GB, runner(4, 100), MODEL).fits(runner(4, 100))


def test_the_quality_step_runs_after_the_exports_and_a_reused_target_has_none():
    with_quality = with_line(MODEL, quality_memory=LinearFit(a=0.0, b=6 * GB))
    # exports 2 + 5 GB side by side; the quality step (6 GB) runs after them, alone
    assert (
        estimate_schedule(1 * GB, 4 * GB, with_quality, parallel_exports=True, remove_sources=False).peak_memory_bytes
        == 7 * GB
    )
    assert (
        estimate_schedule(1 * GB, 4 * GB, with_quality, parallel_exports=False, remove_sources=False).peak_memory_bytes
        == 6 * GB
    )
    # a reused target: no target export, no quality step; the draft export 2 GB, validation 2.5 GB
    reused = estimate_schedule(
        1 * GB, 4 * GB, with_quality, parallel_exports=True, remove_sources=False, target_reused=True
    )
    assert reused.peak_memory_bytes == 2.5 * GB


def test_validation_can_be_the_peak():
    heavy_validate = with_line(MODEL, validate_memory=LinearFit(a=2.0, b=0))
    estimate = estimate_schedule(1 * GB, 4 * GB, heavy_validate, parallel_exports=True, remove_sources=False)
    assert estimate.peak_memory_bytes == 10 * GB


def test_the_quality_step_can_be_the_peak_and_loads_small_originals_in_f32():
    heavy_quality = with_line(MODEL, quality_memory=LinearFit(a=1.0, b=2 * GB))
    # A 1.2 GB target (0.6B) is measured in f32: the line at its 1.2 GB (+ 2 GB) and its f32 copy, 2.4 GB.
    small = estimate_schedule(0, int(1.2 * GB), heavy_quality, parallel_exports=False, remove_sources=False)
    assert small.peak_memory_bytes == int(5.6 * GB)
    # An 8 GB target (4B) is measured in its bf16 from the mapped checkpoint: no copy, the line's 10 GB, more than
    # its export's 9 GB.
    large = estimate_schedule(0, 8 * GB, heavy_quality, parallel_exports=False, remove_sources=False)
    assert stage_peaks(0, 8 * GB, heavy_quality).memory["target_export"] == 9 * GB
    assert large.peak_memory_bytes == 10 * GB
    # A reused target brings its figures: no quality step, no quality peak.
    assert stage_peaks(0, 8 * GB, heavy_quality, target_reused=True).memory["quality"] == 0


def test_sources_are_removed_after_export_only_when_disk_is_tight():
    # sources 5 GB, IRs 1.25 GB, bundle 1.25 GB: kept 7.5 GB; removed max(6.25, 2.5) = 6.25 GB.
    kept = estimate_build(1 * GB, 4 * GB, runner(8, 10), MODEL)
    assert not kept.remove_sources and kept.peak_disk_bytes == int(7.5 * GB)
    removed = estimate_build(1 * GB, 4 * GB, runner(8, 7), MODEL)
    assert removed.remove_sources and removed.peak_disk_bytes == int(6.25 * GB)
    assert removed.fits(runner(8, 7))


def test_the_smallest_class_that_fits_is_chosen():
    runners = RunnerSettings(classes=[runner(64, 200, "large"), runner(15, 14, "standard")], sizing=MODEL)
    chosen, estimate, reason = choose_runner(Pair(1 * GB, 4 * GB), runners)
    assert chosen.name == "standard" and estimate.parallel_exports
    assert reason.startswith(
        "runner class 'standard': memory 7.0 GB, disk 7.5 GB, about 2 min of stages (exports in parallel; +5.0 GB "
        "file-backed)"
    )
    chosen, estimate, _ = choose_runner(Pair(2 * GB, 16 * GB), runners)
    assert chosen.name == "large"


def test_a_real_qwen3_4b_pair_plans_onto_the_standard_runner():
    """As measured (docs/scale.md), by anonymous peaks: the target export holds 4.3 GB anonymous (11.1 GB RSS, the
    rest the mapped checkpoint; its floor is 5 GB) and the draft's 0.9 GB, so both fit the 15 GB side by side (5.3
    GB; validation 4.6 GB). The file-backed working set beside it, about 9.6 GB, is reported and decides nothing.
    optimum-cli writes the bf16 IR to a temporary folder before compressing it, so the exports hold sources +
    temporary IRs + int4 IRs, about 20.8 GB: over the 14 GB GitHub documents, within the 60 GB the recipe claims for
    its runners (after watch.yml's "Make room" step). On a class with only the documented disk the skip names the
    disk to add, with the recipe's 15 % headroom on top (19.8 GB: a class of 23 GB)."""
    runners = load_recipe().runners
    chosen, estimate, reason = choose_runner(Pair(QWEN3_4B_DFLASH, QWEN3_4B), runners)
    standard = runners.classes[0]
    assert chosen is not None and chosen.name == "standard", reason
    assert estimate.parallel_exports and 5 * GB < estimate.peak_memory_bytes < 6 * GB
    assert 8 * GB < estimate.peak_file_bytes < 10 * GB and "file-backed" in reason
    assert 20 * GB < estimate.peak_disk_bytes < 22 * GB
    documented = runners.model_copy(update={"classes": [standard.model_copy(update={"max_disk_bytes": 14 * GB})]})
    chosen, _, reason = choose_runner(Pair(QWEN3_4B_DFLASH, QWEN3_4B), documented)
    # The skip names the smallest class that takes it: exports one after the other, sources removed after export.
    assert chosen is None and "disk 19.8 GB and about 3 min of stages on 4 cores (exports one after the other" in reason
    assert "max_disk_bytes >= 23000000000" in reason


@pytest.mark.parametrize(
    ("shape", "draft_repo", "draft_bytes", "target_bytes"),
    [
        ("qwen3-8b", "z-lab/Qwen3-8B-DFlash-b16", QWEN3_8B_DFLASH, QWEN3_8B),
    ],
)
def test_a_local_hub_seeded_with_a_real_pair_gets_a_matrix_entry_on_standard(
    tmp_path, shape, draft_repo, draft_bytes, target_bytes
):
    """The real configs and safetensors of the real byte sizes (sparse files, adopted by the local Hub without
    copying), discovered over HTTP with the default recipe: one matrix entry, on `standard`."""
    from bot.hub.client import Hub
    from bot.plan.step import RunOptions
    from bot.run.fanout import plan_matrix
    from hubserver import LocalHub
    from tinymodels.shapes import SHAPES, make_shape

    token = "hf_sizing_token_0123456789"
    pair = make_shape(shape, tmp_path / "pair", sparse=True)
    target_repo = SHAPES[shape].target_repo
    with LocalHub(tmp_path / "hub", "maintainer", token) as hub:
        hub.seed_folder(target_repo, pair.target)
        hub.seed_folder(draft_repo, pair.draft)
        planned = plan_matrix(Hub(hub.url, token), load_recipe(), RunOptions())
    assert [o.reason for o in planned.report.outcomes if o.status != "planned"] == []
    (entry,) = planned.entries
    (job,) = entry.jobs
    assert (job.source, job.target) == (draft_repo, target_repo)
    # The files' sizes: the tensors' bytes plus each shard's safetensors header.
    assert 0 < job.candidate.draft_bytes - draft_bytes < 10**5
    assert 0 < job.candidate.target_bytes - target_bytes < 10**6
    assert entry.runner == "standard" and entry.parallel_exports
    assert entry.peak_bytes <= 15 * GB and entry.peak_disk_bytes <= 60 * GB


def test_a_qwen3_5_4b_pair_fits_the_standard_runner_by_the_qwen3_fit():
    """A ~9.3 GB target (Qwen3.5-4B with its vision tower) by the Qwen3 fit: both exports side by side, about 5.8 GB
    anonymous of the 15 GB (its VLM export itself is not measured yet)."""
    chosen, estimate, reason = choose_runner(Pair(QWEN3_4B_DFLASH, QWEN3_5_4B), load_recipe().runners)
    assert chosen is not None and chosen.name == "standard", reason
    assert 5 * GB < estimate.peak_memory_bytes < 7 * GB


def test_the_8b_and_9b_pairs_plan_onto_standard_by_their_anonymous_peaks():
    """By anonymous peaks the Qwen3-8B and Qwen3.5-9B pairs fit the standard class's 15 GB (8.3 and 9.4 GB; the 8B
    build ran end to end under a 15 GB cgroup, docs/scale.md) and its 60 GB of disk (42.3 and 49.0 GB: the bf16
    sources, optimum-cli's temporary bf16 IR and the IRs). Their file-backed working sets (19.0 and 21.9 GB) exceed
    15 GB: reported, and never a reason to refuse. On a class with the disk GitHub documents, each is skipped naming
    the smallest disk it needs (exports one after the other, sources removed after export: 40.2 and 46.8 GB, so 47
    and 54 GB with the 15 % headroom)."""
    runners = load_recipe().runners
    standard = runners.classes[0]
    for draft_bytes, target_bytes, disk_gb in ((QWEN3_8B_DFLASH, QWEN3_8B, 47), (QWEN3_5_9B_DFLASH, QWEN3_5_9B, 54)):
        chosen, estimate, reason = choose_runner(Pair(draft_bytes, target_bytes), runners)
        assert chosen is not None and chosen.name == "standard", reason
        assert estimate.peak_memory_bytes <= standard.max_memory_bytes < estimate.peak_file_bytes
        assert 30 * GB < estimate.peak_disk_bytes <= standard.max_disk_bytes
        documented = runners.model_copy(update={"classes": [standard.model_copy(update={"max_disk_bytes": 14 * GB})]})
        chosen, _, reason = choose_runner(Pair(draft_bytes, target_bytes), documented)
        assert chosen is None and f"max_disk_bytes >= {disk_gb * GB}" in reason


def test_a_27b_pair_is_skipped_with_the_peaks_and_the_class_to_add():
    runners = load_recipe().runners
    chosen, estimate, reason = choose_runner(Pair(QWEN3_5_27B_DFLASH, QWEN3_5_27B), runners)
    assert chosen is None
    assert estimate.peak_memory_bytes > runners.classes[-1].max_memory_bytes
    assert f"estimated peak memory {estimate.peak_memory_bytes / GB:.1f} GB" in reason
    assert f"disk {estimate.peak_disk_bytes / GB:.1f} GB" in reason
    assert "largest runner class 'standard'" in reason
    assert "add a class to the recipe's runners.classes with max_memory_bytes >=" in reason
    # The class the reason proposes takes the build, with the headroom to spare.
    memory, disk = (int(n) for n in re.findall(r"max_memory_bytes: (\d+), max_disk_bytes: (\d+)", reason)[0])
    assert memory >= estimate.peak_memory_bytes * 1.15 and disk >= estimate.peak_disk_bytes * 1.15
    proposed = runners.model_copy(update={"classes": [*runners.classes, runner(memory / GB, disk / GB, "large")]})
    assert choose_runner(Pair(QWEN3_5_27B_DFLASH, QWEN3_5_27B), proposed)[0].name == "large"


def test_this_machine_as_a_runner_class(tmp_path):
    here = local_runner(tmp_path)
    assert here.name == "local" and here.max_memory_bytes > 0 and here.max_disk_bytes > 0


def test_a_memory_cgroup_limit_below_what_the_machine_has_is_the_local_budget(tmp_path):
    """Inside a container or `systemd-run -p MemoryMax=` the kernel enforces the group's limit, not MemAvailable:
    the smallest limit of the group and its ancestors is this machine's memory (v1 and v2 layouts)."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25000000 kB\nMemAvailable:   20000000 kB\n")
    v1 = tmp_path / "v1"
    (v1 / "memory" / "jobs" / "build").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # the root: no limit
    (v1 / "memory" / "jobs" / "memory.limit_in_bytes").write_text(f"{15 * GB}\n")
    (v1 / "memory" / "jobs" / "build" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "cgroup-v1").write_text("5:devices:/\n4:memory:/jobs/build\n0::/\n")
    limited = local_runner(tmp_path / "w", meminfo=meminfo, proc_cgroup=tmp_path / "cgroup-v1", cgroup_root=v1)
    assert limited.max_memory_bytes == 15 * GB
    v2 = tmp_path / "v2"
    (v2 / "build.scope").mkdir(parents=True)
    (v2 / "build.scope" / "memory.max").write_text(f"{30 * GB}\n")  # more than is available: MemAvailable wins
    (tmp_path / "cgroup-v2").write_text("0::/build.scope\n")
    roomy = local_runner(tmp_path / "w", meminfo=meminfo, proc_cgroup=tmp_path / "cgroup-v2", cgroup_root=v2)
    assert roomy.max_memory_bytes == 20_000_000 * 1024
    (v2 / "build.scope" / "memory.max").write_text("max\n")
    unlimited = local_runner(tmp_path / "w", meminfo=meminfo, proc_cgroup=tmp_path / "cgroup-v2", cgroup_root=v2)
    assert unlimited.max_memory_bytes == roomy.max_memory_bytes


def test_a_reused_target_leaves_the_draft_export_and_genai_as_the_peak():
    """With the published target IR reused (bot.plan.reuse) no target export runs: the peak is the draft export or the
    validation. Validation holds one pipeline at a time, 4.6 GB anonymous for a Qwen3-4B pair (docs/scale.md), so a
    draft update for a Qwen3-8B target (no bf16 target on disk) fits the standard class."""
    runners = load_recipe().runners
    full = choose_runner(Pair(QWEN3_4B_DFLASH, QWEN3_4B), runners)[1]
    chosen, reused, reason = choose_runner(Pair(QWEN3_4B_DFLASH, QWEN3_4B, target_reused=True), runners)
    assert chosen is not None and chosen.name == "standard", reason
    peaks = stage_peaks(QWEN3_4B_DFLASH, QWEN3_4B, runners.sizing)
    assert (
        reused.peak_memory_bytes == max(peaks.memory["draft_export"], peaks.memory["validate"]) < full.peak_memory_bytes
    )
    assert reused.peak_disk_bytes < full.peak_disk_bytes / 2  # no bf16 target, no temporary IR
    chosen, eight_b, reason = choose_runner(Pair(QWEN3_8B_DFLASH, QWEN3_8B, target_reused=True), runners)
    assert (
        chosen is not None
        and chosen.name == "standard"
        and eight_b.peak_memory_bytes == stage_peaks(QWEN3_8B_DFLASH, QWEN3_8B, runners.sizing).memory["validate"]
    ), reason
