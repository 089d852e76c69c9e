"""Issue 30, deliverable 6: the publish job's disk holds one group. `publish_run` with a `fetch` (the Actions publish
job's `--artifacts-from-run`) downloads each planned group's artifact just before publishing it and deletes it
before the next one; the Hub ends in the state publishing every downloaded artifact at once gives. Hand-made
bundles on two real local Hubs, no export.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from bot.cli.ending import run_command_line
from bot.core.errors import UsageError
from bot.core.outcome import Outcome, Status
from bot.core.record import BuildRecord
from bot.hub.client import Hub
from bot.plan.job import BuildJob
from bot.run.fanout import MatrixEntry, MatrixPlan, PlanReport, publish_run
from bot.run.handoff import artifact_name, write_outcome
from hubserver import LocalHub
from tests.conftest import HUB_ORGS, HUB_TOKEN, HUB_USER, fast_recipe
from tests.publish.handmade import make_bundle, planned_job, seed_sources
from tests.records import build_record

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

RECIPE = fast_recipe()
GROUPS = {"Qwen/Qwen3-Tiny": "z-lab/Qwen3-Tiny-DFlash-b16", "Qwen/Qwen3-Tiny-Other": "z-lab/Qwen3-Tiny-Other-DFlash"}
MISSING = ("Qwen/Qwen3-Tiny-Gone", "z-lab/Qwen3-Tiny-Gone-DFlash")  # its build job uploaded nothing


def _job(source: str, target: str) -> BuildJob:
    return planned_job(source, target, RECIPE)


JOBS = {target: _job(source, target) for target, source in (*GROUPS.items(), MISSING)}


def _record(job: BuildJob) -> BuildRecord:
    built = build_record()
    return built.model_copy(
        update={
            "source": built.source.model_copy(update={"repo": job.source}),
            "target": built.target.model_copy(update={"repo": job.target}),
        }
    )


def _plan() -> MatrixPlan:
    entries = [
        MatrixEntry(
            jobs=[job],
            name=target,
            artifact=artifact_name(target),
            runner="standard",
            runs_on="ubuntu-latest",
            peak_bytes=1,
        )
        for target, job in JOBS.items()
    ]
    return MatrixPlan(
        recipe=RECIPE.name,
        recipe_fingerprint=RECIPE.fingerprint(),
        dry_run=False,
        entries=entries,
        card_refresh=[],
        report=PlanReport(outcomes=[], hub_requests=0, deferred=[]),
        listed=[job.source for job in JOBS.values()],
    )


def _artifacts(root: Path) -> Path:
    """Every group's artifact as its build job uploads it (none for the group whose build job died)."""
    for target in GROUPS:
        job = JOBS[target]
        sub = root / artifact_name(target) / artifact_name(job.source)
        make_bundle(sub, built=_record(job), repos=job.repos_for("int4"))
        write_outcome(sub, job, Outcome(job.source, job.revision, Status.BUILT, "built"))
    return root


def _state(server: LocalHub) -> dict[str, set[str] | None]:
    """Each planned repo's files, and the status repo's (a dataset)."""
    writer = Hub(server.url, HUB_TOKEN)
    repos = [repo for job in JOBS.values() for repo in (job.repos_for("int4").draft, job.repos_for("int4").target)]
    state = {repo: (set(listing.sizes) if (listing := writer.files_or_none(repo)) else None) for repo in repos}
    api = HfApi(endpoint=server.url, token=HUB_TOKEN)
    state[RECIPE.status_repo_id] = set(api.list_repo_files(RECIPE.status_repo_id, repo_type="dataset"))
    return state


def _seeded(folder: Path) -> LocalHub:
    server = LocalHub(folder, HUB_USER, HUB_TOKEN, orgs=HUB_ORGS)
    server.__enter__()
    seed_sources(server.url, HUB_TOKEN, *GROUPS.values(), *GROUPS, *MISSING)
    return server


def test_groups_published_one_at_a_time_leave_the_hub_as_all_at_once(tmp_path):
    staged = _artifacts(tmp_path / "uploaded")  # what the workflow run holds as artifacts
    bundles = tmp_path / "disk"
    bundles.mkdir()
    on_disk: list[list[str]] = []

    def fetch(artifact: str, folder: Path) -> None:
        on_disk.append(sorted(p.name for p in bundles.iterdir()))  # what the disk holds before this download
        if not (staged / artifact).is_dir():
            raise OSError(f"no artifact {artifact}")
        shutil.copytree(staged / artifact, folder)

    one, all_at_once = _seeded(tmp_path / "hub-one"), _seeded(tmp_path / "hub-all")
    try:
        by_group = publish_run(Hub(one.url, HUB_TOKEN), RECIPE, bundles, _plan(), fetch)
        together = publish_run(Hub(all_at_once.url, HUB_TOKEN), RECIPE, staged, _plan())
        assert on_disk == [[], [], []]  # each download found the previous group deleted
        assert list(bundles.iterdir()) == []
        statuses = {o.source: o.status for o in by_group.outcomes}
        assert statuses == {**dict.fromkeys(GROUPS.values(), Status.PUBLISHED), MISSING[1]: Status.FAILED}
        assert statuses == {o.source: o.status for o in together.outcomes}
        state = _state(one)
        assert state == _state(all_at_once)
        assert all(state[JOBS[target].repos_for("int4").draft] for target in GROUPS)
        assert state[RECIPE.status_repo_id]  # the status page, written once at the end
    finally:
        one.__exit__(None, None, None)
        all_at_once.__exit__(None, None, None)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--plan", "PLAN"], "needs --plan"),
        (["--plan", "PLAN", "--bundles", "b"], "GITHUB_RUN_ID and GITHUB_REPOSITORY"),
    ],
)
def test_artifacts_from_run_needs_a_plan_a_folder_and_an_actions_run(tmp_path, monkeypatch, capsys, args, why):
    (tmp_path / "plan.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_RUN_ID", raising=False)
    args = [str(tmp_path / "plan.json") if a == "PLAN" else a for a in args]
    capsys.readouterr()
    code = run_command_line(["publish", "--artifacts-from-run", *args])
    err = capsys.readouterr().err
    assert code == UsageError.exit_code and why in err and "Traceback" not in err, err
