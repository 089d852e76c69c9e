"""The catalogue's large pairs planned from their real configs and real byte sizes (issue 40's "done when").

`make-tiny --shape NAME --sparse` checkouts (the real config.json and safetensors of the real byte sizes as sparse
files: no disk, no download) of Qwen3-Coder-30B-A3B (qwen3_moe), Qwen3.5/3.6-35B-A3B (qwen3_5_moe), Qwen3.5/3.6-27B
(qwen3_5) and gemma-4-31B (gemma4: written in the gemma4 toolchain profile's python, transformers 5.5), each with a
DFlash draft of its width, read by discovery (`classify_folders`: configs, safetensors
headers, the target family's profile) and laid out by the plan job's own `_entries` as `plan --matrix` lays them
out: with the shipped recipe each is skipped naming the class it needs; with the README's ready class blocks for
GitHub's larger Linux runners declared each is planned onto one, with memory, disk and time estimates in the matrix
and the plan table. (A local Hub would hash 170 GB of sparse zeros to serve them: minutes, where this takes
seconds; tests/plan/test_sizing.py plans the 8B pair over HTTP.)
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from bot.core.recipe import Recipe, load_recipe
from bot.core.runners import RunnerSettings
from bot.discover.candidates import classify_folders
from bot.plan.job import BuildJob, group_jobs
from bot.plan.planner import planned_outcomes
from bot.run.fanout import MatrixEntry, _entries
from bot.run.report import RunReport
from tests.conftest import REPO_ROOT

# shape -> the draft repo that names its target (z-lab publishes these as <Target>-DFlash).
CATALOGUE = {
    "qwen3-coder-30b-a3b": "z-lab/Qwen3-Coder-30B-A3B-DFlash",
    "qwen3.5-35b-a3b": "z-lab/Qwen3.5-35B-A3B-DFlash",
    "qwen3.5-27b": "z-lab/Qwen3.5-27B-DFlash",
    "gemma-4-31b": "z-lab/gemma-4-31B-it-DFlash",
    "qwen3.6-35b-a3b": "z-lab/Qwen3.6-35B-A3B-DFlash",
    "qwen3.6-27b": "z-lab/Qwen3.6-27B-DFlash",
}


def readme_classes(marker: str) -> list[dict]:
    """The runner classes of the README's YAML block holding `marker` (its ready class blocks)."""
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.DOTALL)
    (block,) = [b for b in blocks if marker in b]
    return yaml.safe_load(block)["runners"]["classes"]


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory) -> list[BuildJob]:
    """One build job per catalogue pair, as discovery and planning make them (repos and revisions named)."""
    from tinymodels.shapes import SHAPES, make_shape

    work = tmp_path_factory.mktemp("catalogue")
    jobs = []
    for shape, draft_repo in CATALOGUE.items():
        pair = make_shape(shape, work / shape, sparse=True)
        found = classify_folders(pair.draft, pair.target, load_recipe())
        target = SHAPES[shape].target_repo
        candidate = dataclasses.replace(
            found, repo_id=draft_repo, revision="a" * 40, target_repo=target, target_revision="b" * 40
        )
        jobs.append(
            BuildJob(candidate=candidate, reasons=("new",), draft_repo=f"ns/{shape}-d", target_repo=f"ns/{shape}")
        )
    return jobs


def plan(jobs: list[BuildJob], recipe: Recipe) -> tuple[list[MatrixEntry], RunReport]:
    """What `plan --matrix --dry-run` makes of the jobs: the matrix entries, and the report with the plan table."""
    report = RunReport(dry_run=True)
    entries = _entries(report, group_jobs(jobs).values(), recipe)
    for outcome in planned_outcomes([(job, entry.where()) for entry in entries for job in entry.jobs], []):
        report.add(outcome)
    return entries, report


def test_the_real_sizes_and_families_are_what_discovery_reads(catalogue):
    sizes = {job.source: (job.candidate.target_model_type, job.candidate.target_bytes) for job in catalogue}
    assert sizes["z-lab/Qwen3-Coder-30B-A3B-DFlash"][0] == "qwen3_moe"
    assert sizes["z-lab/Qwen3.5-35B-A3B-DFlash"][0] == "qwen3_5_moe"
    assert sizes["z-lab/Qwen3.5-27B-DFlash"][0] == "qwen3_5"
    assert sizes["z-lab/gemma-4-31B-it-DFlash"][0] == "gemma4"
    assert sizes["z-lab/Qwen3.6-35B-A3B-DFlash"] == sizes["z-lab/Qwen3.5-35B-A3B-DFlash"]  # Qwen3.5's classes, sizes
    assert sizes["z-lab/Qwen3.6-27B-DFlash"] == sizes["z-lab/Qwen3.5-27B-DFlash"]
    # The checkpoints' bf16 bytes as tinymodels.shapes writes them from the published configs: 61, 70, 55 and 63 GB
    # (gemma-4-31B: 31,273,088,876 parameters, its published count, with the vision tower).
    assert [round(n / 1e9) for _, n in sizes.values()] == [61, 70, 55, 63, 70, 55]


def test_the_shipped_recipe_skips_each_large_pair_naming_the_class_it_needs(catalogue):
    entries, report = plan(catalogue, load_recipe())
    assert entries == []
    reasons = {o.source: o.reason for o in report.outcomes}
    assert set(CATALOGUE.values()) <= set(reasons)
    for draft_repo in CATALOGUE.values():
        reason = reasons[draft_repo]
        assert "do not fit the largest runner class 'standard'" in reason, reason
        assert re.search(r"max_memory_bytes >= \d+ and max_disk_bytes >= \d+", reason), reason
        assert re.search(r"about \d+ min of stages on 4 cores", reason), reason


def test_with_githubs_larger_runners_declared_each_large_pair_plans_with_memory_disk_and_time(catalogue):
    recipe = load_recipe()
    classes = readme_classes("linux-8-core")
    runners = RunnerSettings.model_validate({**recipe.runners.model_dump(), "classes": classes})
    entries, report = plan(catalogue, recipe.model_copy(update={"runners": runners}))
    by_source = {job.source: entry for entry in entries for job in entry.jobs}
    assert set(by_source) == set(CATALOGUE.values()), [o.reason for o in report.outcomes]
    declared = {c.name: c for c in runners.classes}
    for entry in by_source.values():
        chosen = declared[entry.runner]
        assert chosen.name != "standard" and entry.runs_on == chosen.runs_on
        assert 0 < entry.peak_bytes * 1.15 <= chosen.max_memory_bytes
        assert 0 < entry.peak_disk_bytes * 1.15 <= chosen.max_disk_bytes
        assert 0 < entry.seconds * 1.15 + recipe.hub.download_deadline_s <= chosen.max_seconds
    table = {o.source: o.reason for o in report.outcomes if o.status == "planned"}
    for source, entry in by_source.items():  # the plan table names the class and the three estimates
        assert f"on {entry.runner} (memory " in table[source] and " min of stages)" in table[source]
