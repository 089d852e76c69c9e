"""The plan step's pure helpers (`bot.run.run_side`): `guard` and `guard_group` turning errors into outcomes (an
unexpected one logged with its traceback at error level), and `report_planned` (the dry run's outcomes)."""

from __future__ import annotations

import logging

import pytest

from bot.core import log
from bot.core.errors import Failure, Skip, Stage
from bot.core.outcome import Outcome, Status
from bot.core.record import Repos
from bot.plan.planner import CARD_CHANGED
from bot.run.report import RunReport
from bot.run.run_side import guard, guard_group, report_planned
from tests.plan.test_job import SHA, job
from tests.records import SOURCE_SHA, build_record


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture()
def logged():
    """The bot logger's records during one test (whatever another test set its propagation to)."""
    handler = Records()
    logger = log.get()
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


def test_guard_returns_true_and_reports_nothing_when_the_step_finishes():
    report = RunReport()
    ran = []
    assert guard(report, "z/A", SHA, lambda: ran.append(1)) is True
    assert ran == [1] and report.outcomes == []


def test_guard_reports_a_bot_error_as_its_outcome(logged):
    report = RunReport()

    def skip():
        raise Skip("unsupported architecture", stage=Stage.DISCOVER)

    def fail():
        raise Failure("export crashed")

    assert guard(report, "z/A", SHA, skip) is False
    assert guard(report, "z/B", None, fail) is False
    assert report.outcomes == [
        Outcome("z/A", SHA, Status.SKIPPED, f"{Stage.DISCOVER}: unsupported architecture", stage=str(Stage.DISCOVER)),
        Outcome("z/B", None, Status.FAILED, "export crashed"),
    ]
    assert not [r for r in logged if r.levelno >= logging.ERROR]  # an expected error is no bug


def test_guard_logs_an_unexpected_exception_with_its_traceback_at_error_level(logged):
    report = RunReport()

    def buggy():
        raise ValueError("config\n  missing")

    assert guard(report, "z/A", SHA, buggy) is False
    (outcome,) = report.outcomes
    assert outcome.status == Status.FAILED
    assert outcome.reason == "unexpected ValueError: config missing"
    errors = [r for r in logged if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].getMessage() == "z/A: unexpected ValueError: config missing"
    assert errors[0].exc_info is not None and errors[0].exc_info[0] is ValueError
    assert "in buggy" in logging.Formatter().formatException(errors[0].exc_info)


def test_guard_group_gives_each_source_of_the_group_the_cause():
    jobs = [job("z/A"), job("z/B"), job("z/C")]
    report = RunReport()

    def fail():
        raise Failure("target export failed", stage=Stage.EXPORT_TARGET)

    assert guard_group(report, jobs, fail) is False
    assert [o.source for o in report.outcomes] == ["z/A", "z/B", "z/C"]
    assert {(o.status, o.reason) for o in report.outcomes} == {
        (Status.FAILED, f"{Stage.EXPORT_TARGET}: target export failed")
    }
    assert guard_group(RunReport(), jobs, lambda: None) is True


def test_report_planned_words_builds_and_card_refreshes():
    report = RunReport()
    report_planned(report, [(job("z/A"), "standard")], [build_record()])
    assert report.outcomes == [
        Outcome("z/A", SHA, Status.PLANNED, "build on standard: new; forced (target Qwen/T)", ["ns/A", "ns/T"]),
        Outcome("z-lab/Qwen3-Tiny-DFlash-b16", SOURCE_SHA, Status.PLANNED, f"card: {CARD_CHANGED}"),
    ]


def test_a_dry_run_names_every_repo_a_build_may_publish_to(capsys):
    """Issue 30: a dry run's report and table said nowhere where a build would publish (`repos` was empty)."""
    planned = job("z/A").model_copy(update={"draft_repos": {"int4": "ns/A-int4-ov", "int8": "ns/A-int8-ov"}})
    planned = planned.model_copy(update={"draft_repo": "ns/A-int8-ov"})  # published as int8 now: listed first
    report = RunReport(dry_run=True)
    published = build_record().model_copy(update={"repos": Repos(draft="ns/B-int4-ov", target="ns/T")})
    report_planned(report, [(planned, "standard")], [published])
    assert [outcome.repos for outcome in report.outcomes] == [
        ["ns/A-int8-ov", "ns/A-int4-ov", "ns/T"],
        ["ns/B-int4-ov", "ns/T"],
    ]
    assert "[ns/A-int4-ov](http://hub/ns/A-int4-ov)" in report.markdown("http://hub")
    report.print_table()
    assert "ns/A-int8-ov" in capsys.readouterr().out
