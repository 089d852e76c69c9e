"""The build job (`bot.plan.job`): what `group_jobs` groups a run's builds by, and the repos a build of a job is
published to (`OutputRepos.for_build`, `publish_repos`), worked out there only."""

from __future__ import annotations

from bot.core import record
from bot.core.record import OfficialTarget, Repos
from bot.plan.job import BuildJob, OutputRepos, group_jobs
from tests import records
from tests.records import REPOS, build_record

SHA = "a" * 40
OFFICIAL = "OpenVINO/Qwen3-Tiny-int4-ov"


def job(source: str, target: str = "Qwen/T", target_revision: str = "b" * 40) -> BuildJob:
    candidate = records.candidate(
        repo_id=source, revision=SHA, target_repo=target, target_revision=target_revision, draft_bytes=1,
        target_bytes=2, download_bytes=3,
    )  # fmt: skip
    name = source.split("/")[1]
    return BuildJob(candidate=candidate, reasons=("new", "forced"), draft_repo=f"ns/{name}", target_repo="ns/T")


def test_group_jobs_groups_by_target_and_target_revision_in_order():
    a, b, c = job("z/A"), job("z/B", target_revision="c" * 40), job("z/C")
    d = job("z/D", target="Qwen/Other")
    groups = group_jobs([a, b, c, d])
    assert groups == {("Qwen/T", "b" * 40): [a, c], ("Qwen/T", "c" * 40): [b], ("Qwen/Other", "b" * 40): [d]}
    assert group_jobs([]) == {}


def with_official(used: bool) -> record.BuildRecord:
    official = OfficialTarget(repo=OFFICIAL, revision="c" * 40, used=used, reason=None if used else "too old")
    return build_record().model_copy(update={"official_target": official})


def paired(built: record.BuildRecord) -> Repos:
    return OutputRepos({"int4": REPOS.draft}, REPOS.target).for_build("int4", built.official_target)


def test_output_repos_name_the_official_target_only_when_it_was_used():
    assert paired(build_record()) == REPOS
    assert paired(with_official(used=False)) == REPOS
    assert paired(with_official(used=True)) == Repos(draft=REPOS.draft, target=OFFICIAL)


def test_a_build_is_published_to_its_chosen_formats_repo_and_the_official_target_it_used():
    planned = job("z/A").model_copy(update={"draft_repos": {"int4": "ns/A-int4-ov", "int8": "ns/A-int8-ov"}})
    int8 = build_record().model_copy(
        update={"export": build_record().export.model_copy(update={"draft_weight_format": "int8"})}
    )
    assert planned.publish_repos(int8) == Repos(draft="ns/A-int8-ov", target="ns/T")
    served = with_official(used=True).model_copy(update={"export": int8.export})
    assert planned.publish_repos(served) == Repos(draft="ns/A-int8-ov", target=OFFICIAL)
    assert planned.publish_repos(served) == planned.repos_for("int8", served.official_target)
