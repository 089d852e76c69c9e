"""The per-candidate boundary (`pipeline.guard`): any error in one source's step is that source's outcome, and the
run goes on with the next (issue 12: no run dies without its report)."""

from __future__ import annotations

import pytest

from bot.core.errors import Failure, Skip, Stage
from bot.core.outcome import Status
from bot.run.report import RunReport
from bot.run.run_side import guard, guard_group
from tests.plan.test_planner import RECIPE, BuildJob, Candidate


def _boom() -> None:
    raise OverflowError("int too large to convert to float")


@pytest.mark.parametrize(
    "action,status,reason",
    [
        (_boom, Status.FAILED, "unexpected OverflowError: int too large to convert to float"),
        (lambda: (_ for _ in ()).throw(Skip("gated repo", stage=Stage.INFO)), Status.SKIPPED, "info: gated repo"),
        (lambda: (_ for _ in ()).throw(Failure("Hub answered 500", stage=Stage.COMMIT)), Status.FAILED, "commit: Hub"),
    ],
)
def test_any_error_in_one_step_is_that_sources_outcome_and_the_next_step_runs(action, status, reason):
    report = RunReport()
    ran = []
    assert guard(report, "a/b", "s" * 40, action) is False
    assert guard(report, "c/d", None, lambda: ran.append("next")) is True
    (outcome,) = report.outcomes
    assert (outcome.source, outcome.status) == ("a/b", status) and outcome.reason.startswith(reason)
    assert ran == ["next"] and report.exit_code == (1 if status == Status.FAILED else 0)


def test_a_step_serving_a_target_group_gives_every_member_the_cause():
    candidate = Candidate(
        repo_id="z-lab/A",
        revision="a" * 40,
        kind="dflash",
        draft_format="stateful",
        target_repo="Qwen/A",
        target_revision="b" * 40,
        target_model_type="qwen3",
        target_is_vlm=False,
        draft_bytes=1,
        target_bytes=2,
        profile="default",
    )
    jobs = [
        BuildJob.from_candidate(candidate, ("new",), RECIPE.publish),
        BuildJob.from_candidate(
            candidate.__class__(**{**candidate.__dict__, "repo_id": "z-lab/B"}), ("new",), RECIPE.publish
        ),
    ]
    report = RunReport()
    assert guard_group(report, jobs, _boom) is False
    assert [(o.source, o.status) for o in report.outcomes] == [("z-lab/A", Status.FAILED), ("z-lab/B", Status.FAILED)]
    assert all("OverflowError" in o.reason for o in report.outcomes)
