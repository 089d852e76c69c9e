"""The build job (`bot.plan.job`): what `group_jobs` groups a run's builds by."""

from __future__ import annotations

from bot.discover.candidates import Candidate
from bot.plan.job import BuildJob, group_jobs

SHA = "a" * 40


def job(source: str, target: str = "Qwen/T", target_revision: str = "b" * 40) -> BuildJob:
    candidate = Candidate(
        repo_id=source,
        revision=SHA,
        kind="dflash",
        draft_format="stateful",
        target_repo=target,
        target_revision=target_revision,
        target_model_type="qwen3",
        target_is_vlm=False,
        draft_bytes=1,
        target_bytes=2,
        profile="default",
        download_bytes=3,
    )
    name = source.split("/")[1]
    return BuildJob(candidate=candidate, reasons=("new", "forced"), draft_repo=f"ns/{name}", target_repo="ns/T")


def test_group_jobs_groups_by_target_and_target_revision_in_order():
    a, b, c = job("z/A"), job("z/B", target_revision="c" * 40), job("z/C")
    d = job("z/D", target="Qwen/Other")
    groups = group_jobs([a, b, c, d])
    assert groups == {("Qwen/T", "b" * 40): [a, c], ("Qwen/T", "c" * 40): [b], ("Qwen/Other", "b" * 40): [d]}
    assert group_jobs([]) == {}
