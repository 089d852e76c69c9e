"""bot.core.outcome: statuses, outcomes of errors, their cleaned reasons and the JSON round trip."""

from __future__ import annotations

import pydantic
import pytest

from bot.core.errors import Failure, HubError, InfrastructureFailure, Skip, Stage
from bot.core.outcome import Outcome, Status, status_of

SOURCE = "z-lab/Qwen3-Tiny-DFlash-b16"


def test_status_values():
    assert [s.value for s in Status] == [
        "published",
        "up-to-date",
        "skipped",
        "failed",
        "planned",
        "deferred",
        "built",
    ]


def test_status_of_errors():
    assert status_of(Skip("gated")) is Status.SKIPPED
    assert status_of(Failure("crashed")) is Status.FAILED
    assert status_of(InfrastructureFailure("disk full")) is Status.FAILED


def test_of_error_keeps_the_stage_and_names_it_in_the_reason():
    outcome = Outcome.of_error(SOURCE, "a" * 40, Failure("export crashed", subject=SOURCE, stage=Stage.EXPORT_DRAFT))
    assert outcome.status is Status.FAILED
    assert outcome.reason == "export-draft: export crashed"
    assert outcome.stage == "export-draft"
    assert outcome.repos == []


def test_of_error_names_another_subject():
    error = Skip("is gated", subject="Qwen/Qwen3-Tiny", stage=Stage.INFO)
    outcome = Outcome.of_error(SOURCE, None, error)
    assert outcome.status is Status.SKIPPED
    assert outcome.reason == "Qwen/Qwen3-Tiny: info: is gated"


def test_of_error_does_not_repeat_a_subject_the_message_names():
    error = Skip("Qwen/Qwen3-Tiny is gated", subject="Qwen/Qwen3-Tiny")
    assert Outcome.of_error(SOURCE, None, error).reason == "Qwen/Qwen3-Tiny is gated"


def test_infrastructure_failure_has_no_stage_but_names_it():
    error = HubError("503", status=503, subject=SOURCE, stage=Stage.DOWNLOAD)
    outcome = Outcome.of_error(SOURCE, None, error)
    assert outcome.stage is None
    assert outcome.reason == "download: 503"
    assert outcome.status is Status.FAILED


def test_reason_is_cleaned_of_invisible_characters():
    outcome = Outcome(SOURCE, None, Status.SKIPPED, "bad\u202efile\u200b\nname\x1b")
    assert outcome.reason == "badfile name"


def test_json_round_trip():
    outcome = Outcome(SOURCE, "b" * 40, Status.PUBLISHED, "built", ["a/b", "a/c"], stage="publish")
    data = outcome.to_dict()
    assert data == {
        "source": SOURCE,
        "revision": "b" * 40,
        "status": "published",
        "reason": "built",
        "repos": ["a/b", "a/c"],
        "stage": "publish",
    }
    assert Outcome.from_dict(data) == outcome


def test_from_dict_refuses_unknown_fields_and_statuses():
    data = Outcome(SOURCE, None, Status.FAILED).to_dict()
    with pytest.raises(pydantic.ValidationError):
        Outcome.from_dict({**data, "extra": 1})
    with pytest.raises(pydantic.ValidationError):
        Outcome.from_dict({**data, "status": "exploded"})
    with pytest.raises(pydantic.ValidationError):
        Outcome.from_dict({k: v for k, v in data.items() if k != "source"})
