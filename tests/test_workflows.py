"""What the workflow linters cannot know about `.github/workflows/` (issue 30): a dispatch is never dropped, the
schedule keeps itself enabled, every stage deadline of the shipped recipe fits its job with room for install and
report, the light jobs install no export toolchain, the write token is checked before bundles are downloaded, the
publish job holds one group's bundles at a time, and the README names every action the workflows use.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bot.core.recipe import DEFAULT_RECIPE, load_recipe

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
# Minutes a job spends outside the bot's stages: set-up, checkout and install (the light install measured about
# 1 min from a warm pip cache, the full one several), and the report and artifact hand-off after them.
LIGHT_INSTALL_MIN, FULL_INSTALL_MIN, REPORT_MIN = 5, 15, 5


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def github_expression(expression: str, **context: str) -> str:
    """Evaluate the `&&`/`||`/`format()` subset of a GitHub expression the workflows use (strings are truthy)."""
    inner = expression.strip()
    assert inner.startswith("${{") and inner.endswith("}}"), expression
    python = inner[3:-2].replace("&&", " and ").replace("||", " or ").replace("format(", "_format(")
    names = {key.replace(".", "_"): value for key, value in context.items()}
    python = re.sub(r"github\.(\w+)", lambda m: f"github_{m.group(1)}", python)
    return str(eval(python, {"_format": lambda text, *args: text.format(*args)}, names))


def test_scheduled_and_dispatched_runs_never_cancel_each_other():
    """GitHub keeps one pending run per concurrency group and cancels the older one: a dispatch waiting behind a
    long build in the schedule's group was dropped by the next tick."""
    group = workflow("watch.yml")["concurrency"]["group"]
    tick = github_expression(group, **{"github.event_name": "schedule", "github.run_id": "1"})
    later_tick = github_expression(group, **{"github.event_name": "schedule", "github.run_id": "2"})
    dispatch = github_expression(group, **{"github.event_name": "workflow_dispatch", "github.run_id": "3"})
    other = github_expression(group, **{"github.event_name": "workflow_dispatch", "github.run_id": "4"})
    assert tick == later_tick  # scheduled runs still never overlap
    assert len({tick, dispatch, other}) == 3  # each dispatch in a group of its own
    assert workflow("watch.yml")["concurrency"]["cancel-in-progress"] is False


def test_the_schedule_keeps_itself_enabled():
    """GitHub disables a scheduled workflow after 60 days without repository activity; the API call that enables
    it again needs `actions: write` and nothing else."""
    job = workflow("watch.yml")["jobs"]["keep-enabled"]
    assert job["permissions"] == {"actions": "write"} and "if" not in job  # on every trigger
    (step,) = job["steps"]
    assert step["run"] == 'gh api --method PUT "repos/$REPO/actions/workflows/watch.yml/enable"'
    assert (WORKFLOWS / "watch.yml").is_file()  # the id the call names is this file's name
    assert step["env"]["GH_TOKEN"] == "${{ github.token }}"


def test_every_stage_deadline_fits_its_job_with_room_for_install_and_report():
    """A deadline the job's `timeout-minutes` cuts short never reports its stage: GitHub kills the job first."""
    jobs = workflow("watch.yml")["jobs"]
    recipe = load_recipe(DEFAULT_RECIPE)
    plan_min = recipe.hub.plan_deadline_s / 60
    assert plan_min + LIGHT_INSTALL_MIN + REPORT_MIN <= jobs["plan"]["timeout-minutes"], plan_min
    # A build job downloads, exports and validates one group, each stage under its own deadline.
    build_min = (recipe.hub.download_deadline_s + recipe.export.timeout_s + recipe.validation.timeout_s) / 60
    assert build_min + FULL_INSTALL_MIN + REPORT_MIN <= jobs["build"]["timeout-minutes"], build_min
    # Every upload of the publish job together runs under the upload deadline (bot/hub/transport.py:
    # `Transport.uploads`).
    publish_min = recipe.hub.upload_deadline_s / 60
    assert publish_min + LIGHT_INSTALL_MIN + REPORT_MIN <= jobs["publish"]["timeout-minutes"], publish_min


def test_the_plan_and_publish_jobs_install_no_export_toolchain_and_the_build_job_does():
    """Planning compares published builds with the toolchain a build would run in, which a light install knows from
    the pins and `toolchains/exporter.yaml` (tests/run/test_light_install.py plans in one); publishing needs none."""
    jobs = workflow("watch.yml")["jobs"]
    installs = {
        name: [s["run"] for s in job["steps"] if s.get("run", "").startswith("make install")]
        for name, job in jobs.items()
    }
    assert installs["publish"] == ["make install-light"]
    assert installs["plan"] == ["make install-light"] and installs["build"] == ["make install"]
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\ninstall-light:", 1)[1].split("\n\n", 1)[0]
    assert "-e '.[publish]'" in target and "build" not in target


def test_the_write_token_is_checked_before_any_bundle_is_downloaded():
    steps = workflow("watch.yml")["jobs"]["publish"]["steps"]
    check = next(i for i, step in enumerate(steps) if "dflash-bot check" in step.get("run", ""))
    publish = next(i for i, step in enumerate(steps) if "dflash-bot publish" in step.get("run", ""))
    assert check < publish
    assert steps[check]["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"


def test_the_publish_job_holds_one_group_on_disk_at_a_time():
    """No step downloads every bundle: the publish command fetches each planned group's artifact itself, publishes
    it and deletes it before the next (`bot.run.fanout.publish_run` with `gh_fetch`; tests/run/test_fanout.py
    checks that loop). Only the publish job may read this run's artifacts through the API, and no build job holds
    a GitHub token."""
    jobs = workflow("watch.yml")["jobs"]
    steps = jobs["publish"]["steps"]
    downloads = [s for s in steps if s.get("uses", "").startswith("actions/download-artifact")]
    assert [s["with"] for s in downloads] == [{"name": "plan", "path": "plan"}]
    (publish,) = [s for s in steps if "dflash-bot publish" in s.get("run", "")]
    assert "--artifacts-from-run" in publish["run"] and '--bundles "$BUNDLES"' in publish["run"]
    assert publish["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert jobs["publish"]["permissions"] == {"contents": "read", "actions": "read"}
    for step in jobs["build"]["steps"]:
        assert "GH_TOKEN" not in step.get("env", {}) and "HF_TOKEN" not in step.get("env", {})
    assert jobs["build"]["permissions"] == {"contents": "read"}


def test_bundles_live_one_day_and_are_deleted_once_published():
    jobs = workflow("watch.yml")["jobs"]
    (upload,) = [s for s in jobs["build"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload["with"]["retention-days"] == 1
    cleanup = jobs["clean-up"]
    assert cleanup["needs"] == "publish" and cleanup["permissions"] == {"actions": "write"}
    assert "needs.publish.result == 'success'" in cleanup["if"]
    assert 'startswith("bundle-")' in cleanup["steps"][0]["run"]


def test_the_toolchain_pull_request_uses_a_configured_token_and_says_what_to_enable_without_one():
    steps = workflow("toolchain.yml")["jobs"]["pull-request"]["steps"]
    (create,) = [s for s in steps if "create-pull-request" in s.get("uses", "")]
    assert create["with"]["token"] == "${{ secrets.TOOLCHAIN_PR_TOKEN || github.token }}"
    said = next(s for s in steps if s.get("if") == "failure()")
    assert (
        "TOOLCHAIN_PR_TOKEN" in said["run"]
        and "Allow GitHub Actions to create and approve pull requests" in (said["run"])
    )


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yml")), ids=lambda p: p.name)
def test_the_readme_lists_every_action_a_workflow_uses(path):
    readme = (ROOT / "README.md").read_text()
    used = {
        step["uses"].split("@")[0]
        for job in yaml.safe_load(path.read_text())["jobs"].values()
        for step in job.get("steps", [])
        if "uses" in step
    }
    assert used and all(f"`{action}`" in readme for action in used), used


def test_the_toolchain_bump_carries_a_new_exporter_snapshot():
    """A bump without toolchains/exporter.yaml made with the new pins fails tests/core/test_exporter.py on its pull
    request, and a light plan would refuse the stale snapshot."""
    check = workflow("toolchain.yml")["jobs"]["check"]["steps"]
    snapshot = next(step for step in check if "bot.core.exporter --write" in step.get("run", ""))
    assert snapshot["run"].index("make install") < snapshot["run"].index("bot.core.exporter --write")
    assert "cp toolchains/exporter.yaml candidate/" in snapshot["run"]
    pull = workflow("toolchain.yml")["jobs"]["pull-request"]["steps"]
    take = next(step for step in pull if step.get("name") == "Take the candidate's pins")
    assert 'cp "$CANDIDATE/exporter.yaml" toolchains/exporter.yaml' in take["run"]
    opened = next(step for step in pull if "create-pull-request" in step.get("uses", ""))
    assert "toolchains/exporter.yaml" in opened["with"]["add-paths"].split()
