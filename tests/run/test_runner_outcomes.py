"""Issue 41: a runner accident at any step is reported as ours and never remembered as the source's. `guard` (every
step's wrapper) meets the machine's own errors: a real full disk (`/dev/full` answers ENOSPC) raised as the `OSError`
it is, and a `Failure` whose message shows one. Before: "unexpected OSError" (a bug's words, with a traceback), and a
`Failure` at a source stage kept its stage, so the memory would skip the source for `recheck_after`."""

from __future__ import annotations

import datetime as dt

import pytest

from bot.core.errors import Failure, Stage
from bot.core.outcome import Status
from bot.run.report import RunReport
from bot.run.run_side import guard
from bot.status.memory import StatusEntry, source_fault

SOURCE = "z-lab/Qwen3-Tiny-DFlash-b16"


def _remembered(reason: str, stage: str | None) -> bool:
    entry = StatusEntry(
        source=SOURCE,
        status="failed",
        reason=reason,
        stage=stage,
        toolchain_fingerprint="t",
        recipe_fingerprint="r",
        last_checked=dt.datetime.now(dt.UTC),
    )
    return source_fault(entry)


def _write_to_a_full_disk() -> None:
    with open("/dev/full", "wb") as out:  # the kernel's full device: every write fails with ENOSPC
        out.write(b"\0" * 65536)
        out.flush()


def _failure_showing_a_full_disk() -> None:
    raise Failure(
        "bundle of the target: copying openvino_model.bin failed: [Errno 28] No space left on device",
        stage=Stage.EXPORT_TARGET,
    )


@pytest.mark.parametrize("action", [_write_to_a_full_disk, _failure_showing_a_full_disk], ids=["oserror", "failure"])
def test_a_full_disk_at_any_step_is_the_runners_and_never_remembered(action, caplog):
    report = RunReport()
    assert not guard(report, SOURCE, "0" * 40, action)
    (outcome,) = report.outcomes
    assert outcome.status == Status.FAILED and outcome.stage is None, outcome
    assert "the runner's fault (disk full), not the source's: tried again next run" in outcome.reason, outcome.reason
    assert "No space left on device" in outcome.reason and "unexpected" not in outcome.reason
    assert not _remembered(outcome.reason, outcome.stage)
    assert not [r for r in caplog.records if r.exc_info], "a runner's accident is no bug: no traceback"


def test_a_bug_stays_a_bug(caplog):
    """Control: an exception that is not the machine's is reported as unexpected, its traceback logged, as before."""
    report = RunReport()
    assert not guard(report, SOURCE, None, lambda: {}["missing"])
    (outcome,) = report.outcomes
    assert outcome.reason.startswith("unexpected KeyError") and "runner" not in outcome.reason
    assert [r for r in caplog.records if r.exc_info], "the bug's traceback reaches the log (and caplog sees it)"
