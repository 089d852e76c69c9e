"""`bot.builder.draft_build`: each export child's own home under the group's scratch folder, the records a group build
passes between its modules (checkout names, a draft's build and how it ends, the schedule's default layers), how a
step's error is labelled, and what `GroupContext` keeps out of public messages."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.builder.draft_build import Checkout, DraftBuild, GroupContext, Schedule, child_home, run_step
from bot.core.errors import Failure, Stage
from bot.core.recipe import load_recipe
from bot.core.settings import SANDBOX_LAYERS
from bot.core.toolchain import Toolchain
from bot.plan.job import BuildJob
from tests import records


def test_child_home_is_per_child_under_the_scratch_homes(tmp_path: Path) -> None:
    draft, target = child_home(tmp_path, "draft-0"), child_home(tmp_path, "target")
    assert draft == tmp_path / "homes" / "draft-0"
    assert target == tmp_path / "homes" / "target"
    assert draft != target and draft.parent == target.parent


def test_checkout_name_is_the_repo_or_the_folder() -> None:
    assert Checkout(Path("/w/copy"), repo_id="org/model", revision="abc").name == "org/model"
    assert Checkout(Path("/w/local-model")).name == "local-model"


def test_a_draft_build_is_ok_with_a_passed_bundle_and_no_error(tmp_path: Path) -> None:
    passed, failed = SimpleNamespace(passed=True), SimpleNamespace(passed=False)
    error = Failure("gate failed")
    draft = DraftBuild(BuildJob.local(records.candidate(repo_id=None, revision=None)), Checkout(tmp_path), tmp_path)
    assert draft.ok is False  # not built yet
    assert DraftBuild(draft.job, draft.checkout, draft.out, bundle=passed).ok is True  # type: ignore[arg-type]
    assert DraftBuild(draft.job, draft.checkout, draft.out, bundle=failed).ok is False  # type: ignore[arg-type]
    assert DraftBuild(draft.job, draft.checkout, draft.out, passed, error).ok is False  # type: ignore[arg-type]
    assert DraftBuild(draft.job, draft.checkout, draft.out, error=error).ok is False


def test_a_stopped_draft_names_its_checkout_and_keeps_what_the_error_knew(tmp_path: Path) -> None:
    """`stopped` names the draft and the stage where an inner layer did not, and never renames what it did."""
    draft = DraftBuild(BuildJob.local(records.candidate()), Checkout(tmp_path, "org/draft"), tmp_path / "out")
    fresh = draft.stopped(Failure("boom"), Stage.BUILD).error
    assert fresh is not None and (fresh.subject, fresh.stage) == ("org/draft", Stage.BUILD)
    inner = draft.stopped(Failure("boom", subject="org/target", stage=Stage.VERIFY), Stage.BUILD).error
    assert inner is not None and (inner.subject, inner.stage) == ("org/target", Stage.VERIFY)
    assert draft.error is None  # the draft handed in is never changed


def test_schedule_allows_every_sandbox_layer_by_default() -> None:
    schedule = Schedule(parallel_exports=False, memory_budget_bytes=1 << 30, estimate="1 GiB")
    assert schedule.sandbox_layers == SANDBOX_LAYERS == ("namespaces", "landlock")


def test_run_step_names_the_step_in_the_error() -> None:
    assert run_step(Stage.BUNDLE, lambda: 42) == 42

    def fail() -> None:
        raise Failure("optimum-cli failed", stage=Stage.BUILD)

    with pytest.raises(Failure) as caught:
        run_step(Stage.BUNDLE, fail)
    assert caught.value.stage is Stage.BUNDLE
    assert caught.value.message == "optimum-cli failed"

    with pytest.raises(ValueError):  # only the bot's own errors are labelled; others pass through untouched
        run_step(Stage.BUNDLE, lambda: int("x"))


def _context(scratch: Path, python: str | None) -> GroupContext:
    toolchain = Toolchain(versions={}, capabilities=frozenset(), python=python)
    schedule = Schedule(parallel_exports=True, memory_budget_bytes=1 << 30, estimate="")
    return GroupContext(recipe=load_recipe(), toolchain=toolchain, scratch=scratch, schedule=schedule)


def test_environments_are_the_profile_environment_only_when_it_is_another(tmp_path: Path) -> None:
    assert _context(tmp_path, None).environments() == []
    assert _context(tmp_path, "/opt/profiles/nightly/bin/python").environments() == [Path("/opt/profiles/nightly")]


def test_public_leaves_out_the_work_folder_and_environments_and_is_short(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    ctx = _context(scratch, "/opt/profiles/nightly/bin/python")
    text = ctx.public(f"export failed: {scratch}/logs/export-draft.log in /opt/profiles/nightly/lib")
    assert text == "export failed: …/logs/export-draft.log in …/lib"
    assert str(tmp_path) not in text
    assert len(ctx.public("x" * 1000)) == 300


def test_a_draft_build_holds_its_plans_job_or_for_local_folders_a_job_of_its_own(tmp_path: Path) -> None:
    """The builder reads the job the plan made (not a copy): its candidate, its published format and its repos; a
    build of local folders makes a job of its own, which names no repos and which `build --job` refuses."""
    planned = BuildJob.from_candidate(records.candidate(), ("new",), load_recipe().publish)
    planned = planned.model_copy(update={"published_format": "int8"})
    draft = DraftBuild(planned, Checkout(tmp_path), tmp_path / "out")
    assert draft.job is planned and draft.job.planned and draft.job.published_format == "int8"
    candidate = records.candidate(repo_id=None, revision=None)
    local = DraftBuild(BuildJob.local(candidate), Checkout(tmp_path), tmp_path / "out")
    assert local.job.candidate is candidate and not local.job.planned and local.job.published_format is None
    with pytest.raises(ValueError, match="names no output repos"):
        local.job.repos  # noqa: B018 (the property raises)
    data = planned.model_dump(mode="json")
    for broken in ({**data, "draft_repo": None}, {**local.job.model_dump(mode="json"), "published_format": "int8"}):
        with pytest.raises(ValueError, match=r"neither|local build job"):
            BuildJob.model_validate(broken)
