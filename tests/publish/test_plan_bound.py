"""Issue 29, class 1: the publish job holds each bundle to the plan, never to the bundle's own record.

A build job that gained code execution can rewrite its bundle consistently (files and record together), so
`check_folder` against the record proves nothing. These tests hand the real publish code (`publish_run`, as the
Actions publish job calls it, with the plan record, and without one) hand-made bundles on a real local Hub, each
tampered one way, beside an honest bundle of the same target group: nothing of the group is committed, no repo the
plan never named is written, nothing outside the format is published, and a repo holding files the bot did not
publish keeps them. No export: the IR files are a few bytes (publish never loads them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from bot.core.fingerprints import template_fingerprint
from bot.core.outcome import Outcome, Status
from bot.core.record import BuildRecord
from bot.hub.client import Hub
from bot.plan.job import BuildJob
from bot.publish.publisher import publish_bundle
from bot.run.fanout import MatrixEntry, MatrixPlan, PlanReport, publish_run
from bot.run.handoff import OUTCOME_FILE, BuildOutcomeFile, artifact_name, write_outcome
from tests.conftest import HUB_TOKEN, fast_recipe
from tests.publish.handmade import DRAFT, TARGET, make_bundle, planned_job, seed_sources
from tests.records import build_record

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

RECIPE = fast_recipe()  # one draft weight format: int4
TARGET_REPO = "Qwen/Qwen3-Tiny"
SOURCES = ("z-lab/Qwen3-Tiny-DFlash-b16", "z-lab/Qwen3-Tiny-DFlash-b8")
VICTIM = "victim-org/Their-Model"  # another organisation's repo the write token can write
CARD_FP = template_fingerprint()


def _job(source: str) -> BuildJob:
    return planned_job(source, TARGET_REPO, RECIPE)


JOBS = [_job(source) for source in SOURCES]
PLANNED = [repo for job in JOBS for repo in (job.repos_for("int4").draft, job.repos_for("int4").target)]
HAND_MADE = JOBS[0].draft_repos["int8"]  # in the bot's namespace, made by a person, never planned by this recipe


def _record(source: str) -> BuildRecord:
    """A scheduled build's record of `source` (its author trusted by the recipe, as the plan's jobs say)."""
    built = build_record()
    return built.model_copy(
        update={"source": built.source.model_copy(update={"repo": source}), "approved_by": "recipe"}
    )


@pytest.fixture(scope="module")
def hub(hub):
    seed_sources(hub.url, HUB_TOKEN, *SOURCES, TARGET_REPO)
    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    for repo in (VICTIM, HAND_MADE):
        api.create_repo(repo)
        api.upload_file(path_or_fileobj=b"# theirs\n", path_in_repo="README.md", repo_id=repo)
        api.upload_file(path_or_fileobj=b"notes", path_in_repo="notes.md", repo_id=repo)
    return hub


def _plan(jobs: list[BuildJob]) -> MatrixPlan:
    entry = MatrixEntry(
        jobs=jobs,
        name="Qwen3-Tiny",
        artifact=artifact_name(TARGET_REPO),
        runner="standard",
        runs_on="ubuntu-latest",
        peak_bytes=1,
    )
    return MatrixPlan(
        recipe=RECIPE.name,
        recipe_fingerprint=RECIPE.fingerprint(),
        dry_run=False,
        entries=[entry],
        card_refresh=[],
        report=PlanReport(outcomes=[], hub_requests=0, deferred=[]),
    )


def _artifact(root: Path, tamper=None) -> Path:
    """The group's artifact as the build job uploads it: one folder per draft, the first one tampered."""
    folder = root / artifact_name(TARGET_REPO)
    for index, job in enumerate(JOBS):
        built = _record(job.source)
        draft, target, built = dict(DRAFT), dict(TARGET), built.published_as(job.publish_repos(built), CARD_FP)
        if index == 0 and tamper is not None:
            draft, target, built = tamper(draft, target, built)
        sub = folder / artifact_name(job.source)
        make_bundle(sub, built=built, draft=draft, target=target)  # its record as the (tampered) build wrote it
        write_outcome(sub, job, Outcome(job.source, job.revision, Status.BUILT, "built"))
    return root


def _with_auto_map(files: dict[str, bytes]) -> dict[str, bytes]:
    config = json.loads(files["config.json"])
    return {**files, "config.json": json.dumps({**config, "auto_map": {"AutoModel": "modeling_dflash.Model"}}).encode()}


def _format(built: BuildRecord, weight_format: str) -> BuildRecord:
    return built.model_copy(update={"export": built.export.model_copy(update={"draft_weight_format": weight_format})})


TAMPERED = {
    "modeling code": (lambda d, t, b: ({**d, "modeling_dflash.py": b"import os"}, t, b), "modeling_dflash.py"),
    "pickle": (lambda d, t, b: ({**d, "pytorch_model.bin": b"\x80\x04K."}, t, b), "pytorch_model.bin"),
    "draft auto_map": (lambda d, t, b: (_with_auto_map(d), t, b), "auto_map"),
    "target auto_map": (lambda d, t, b: (d, _with_auto_map(t), b), "auto_map"),
    "nested file": (lambda d, t, b: (d, {**t, "sub/openvino_model.xml": b"<x/>"}, b), "sub/"),
    "IR without its pair": (lambda d, t, b: (d, {**t, "openvino_extra_model.xml": b"<x/>"}, b), "openvino_extra"),
    "unplanned weight format": (lambda d, t, b: (d, t, _format(b, "int8")), "weight format 'int8'"),
    "unplanned reused target": (
        lambda d, t, b: (
            d,
            t,
            b.model_copy(
                update={"export": b.export.model_copy(update={"target_reused_from": VICTIM + "@" + "e" * 40})}
            ),
        ),
        "built against the target victim-org",
    ),
    # The record is published as the builder wrote it: the repos it names must be the plan's.
    "record names another repo": (
        lambda d, t, b: (d, t, b.published_as(b.repos.model_copy(update={"draft": VICTIM}), CARD_FP)),
        f"record names {VICTIM}",
    ),
    "record without repos": (lambda d, t, b: (d, t, b.model_copy(update={"repos": None})), "record names no repos"),
    "record of other card templates": (lambda d, t, b: (d, t, b.published_as(b.repos, "0" * 64)), "card templates"),
    # Who approved it is the plan's to say (the cards tell downloaders): a record claiming otherwise is refused.
    "record claiming a dispatch": (
        lambda d, t, b: (d, t, b.model_copy(update={"approved_by": "dispatch"})),
        "approved by dispatch, the plan by recipe",
    ),
}


def _heads(writer: Hub) -> dict[str, str | None]:
    return {
        repo: (head.sha if (head := writer.files_or_none(repo)) else None) for repo in (*PLANNED, VICTIM, HAND_MADE)
    }


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_bundle_refuses_its_whole_group_and_writes_nothing(hub, tmp_path, case):
    tamper, named = TAMPERED[case]
    writer = Hub(hub.url, HUB_TOKEN)
    before = _heads(writer)
    report = publish_run(writer, RECIPE, _artifact(tmp_path, tamper), _plan(JOBS))
    outcomes = {o.source: o for o in report.outcomes}
    bad, sibling = outcomes[SOURCES[0]], outcomes[SOURCES[1]]
    assert bad.status == sibling.status == Status.FAILED, (bad, sibling)
    assert f"bundle {artifact_name(SOURCES[0])}" in bad.reason and named in bad.reason, bad.reason
    assert f"bundle {artifact_name(SOURCES[0])} of its group is not what the plan made" in sibling.reason
    assert report.commits == []
    assert _heads(writer) == before  # nothing planned was created, nothing unplanned touched


def test_a_rewritten_job_naming_another_repo_is_refused_with_and_without_a_plan(hub, tmp_path):
    writer = Hub(hub.url, HUB_TOKEN)
    before = _heads(writer)
    root = _artifact(tmp_path)
    forged = JOBS[0].model_copy(update={"draft_repo": VICTIM, "draft_repos": {"int4": VICTIM}})
    sub = root / artifact_name(TARGET_REPO) / artifact_name(SOURCES[0])
    write_outcome(sub, forged, Outcome(forged.source, forged.revision, Status.BUILT, "built"))
    assert BuildOutcomeFile.model_validate_json((sub / OUTCOME_FILE).read_bytes()).job.draft_repo == VICTIM

    with_plan = publish_run(writer, RECIPE, root, _plan(JOBS))
    assert [o.status for o in with_plan.outcomes] == [Status.FAILED, Status.FAILED], with_plan.outcomes
    assert "not this entry" in with_plan.outcomes[0].reason
    # `publish --bundles` without `--plan`: the jobs come from the artifact, so they are held to the recipe.
    without = publish_run(writer, RECIPE, root, None)
    assert {o.status for o in without.outcomes} == {Status.FAILED}, without.outcomes
    assert all(f"names repos the recipe does not publish to ({VICTIM})" in o.reason for o in without.outcomes)
    assert with_plan.commits == without.commits == []
    assert _heads(writer) == before


def test_a_repo_holding_files_the_bot_did_not_publish_is_refused_and_keeps_them(hub, tmp_path):
    writer = Hub(hub.url, HUB_TOKEN)
    before = writer.files_or_none(HAND_MADE)
    repos = JOBS[0].repos_for("int4").model_copy(update={"draft": HAND_MADE})
    bundle = make_bundle(tmp_path / "b", built=_record(SOURCES[0]), repos=repos)
    with pytest.raises(Exception, match=f"{HAND_MADE} is not the bot's repo: it holds README.md, notes.md"):
        publish_bundle(writer, bundle, repos, private=False)
    after = writer.files_or_none(HAND_MADE)
    assert after is not None and before is not None and after.sha == before.sha and "notes.md" in after.sizes


@pytest.mark.parametrize(
    ("draft", "card", "named"),
    [(VICTIM, CARD_FP, f"its record names {VICTIM} and"), (None, "0" * 64, "card templates")],
)
def test_the_publisher_commits_a_record_only_as_written_for_the_repos_it_writes(hub, tmp_path, draft, card, named):
    """`publish --bundle` has no plan: the publisher's own gate holds the record to the repos it was handed."""
    writer = Hub(hub.url, HUB_TOKEN)
    before = _heads(writer)
    planned = JOBS[0].repos_for("int4")
    claimed = planned.model_copy(update={"draft": draft or planned.draft})
    bundle = make_bundle(tmp_path / "b", built=_record(SOURCES[0]).published_as(claimed, card))
    with pytest.raises(Exception, match=named) as refused:
        publish_bundle(writer, bundle, planned, private=False)
    assert "nothing of its group is published" in str(refused.value)
    assert _heads(writer) == before


def test_the_honest_group_is_published_with_only_the_formats_files(hub, tmp_path):
    """The control: the same artifact untampered publishes both drafts and the target, and nothing else."""
    writer = Hub(hub.url, HUB_TOKEN)
    report = publish_run(writer, RECIPE, _artifact(tmp_path), _plan(JOBS))
    statuses = {o.source: o.status for o in report.outcomes if o.source in SOURCES}
    assert statuses == dict.fromkeys(SOURCES, Status.PUBLISHED), report.outcomes
    draft = writer.files_or_none(JOBS[0].repos_for("int4").draft)
    target = writer.files_or_none(JOBS[0].repos_for("int4").target)
    assert draft is not None and target is not None
    rendered = {"README.md", "openvino_export.json", ".gitattributes"}
    assert set(draft.sizes) == set(DRAFT) | rendered | {"assets/acceptance.png"}
    assert set(target.sizes) == set(TARGET) | rendered
