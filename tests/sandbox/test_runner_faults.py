"""Issue 41: a full disk in the middle of an export is the runner's fault, never the source's, whatever the child's
last line says. A real child through the build's runner (`run_logged` over `sandboxed`) writes to `/dev/full` (the
kernel answers ENOSPC) and, as torch's writer does, raises its own error from the `OSError`: its last line says
"file write failed", the `No space left on device` is above it. Before: a `Failure` at the export stage, remembered
as the source's, so the next healthy run skipped the source for `recheck_after` (7 days)."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

from bot.core.errors import Failure, InfrastructureFailure, RunnerFault, Stage, as_runners
from bot.core.outcome import Outcome
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env
from bot.status.memory import StatusEntry, source_fault

SOURCE = "z-lab/Qwen3-Tiny-DFlash-b16"

_FULL_DISK_WRITER = r"""
try:
    with open("/dev/full", "wb") as out:
        out.write(b"\0" * 65536)
        out.flush()
except OSError as error:
    raise RuntimeError(
        "[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0: file write failed"
    ) from error
"""


def _export(tmp_path: Path, script: str) -> Failure:
    work = tmp_path / "target"
    with pytest.raises(Failure) as caught:
        run_logged(
            [*sandboxed("exec", writes=[work]), sys.executable, "-c", script],
            log_path=tmp_path / "target.log",
            timeout_s=60,
            env=untrusted_env(home=work / "home"),
            what="target export",
        )
    error = caught.value
    error.at(stage=Stage.EXPORT_TARGET)  # as the export step gives it (`bot.builder.export`)
    return error


def _remembered(error: Failure) -> bool:
    """Whether the status memory would keep this failure as the source's (the pipeline's path: `as_runners`, then
    the outcome, then the entry the memory writes)."""
    outcome = Outcome.of_error(SOURCE, "0" * 40, as_runners(error))
    entry = StatusEntry(
        source=SOURCE,
        status="failed",
        reason=outcome.reason,
        stage=outcome.stage,
        toolchain_fingerprint="t",
        recipe_fingerprint="r",
        last_checked=dt.datetime.now(dt.UTC),
    )
    return source_fault(entry)


def test_a_disk_that_fills_mid_export_is_the_runners_fault_though_the_last_line_hides_it(tmp_path):
    error = _export(tmp_path, _FULL_DISK_WRITER)
    assert "file write failed" in error.message  # the child's last line, as before
    assert isinstance(error, InfrastructureFailure) and error.runner is RunnerFault.DISK_FULL, error.message
    assert "No space left on device" in error.message, error.message
    assert not _remembered(error)
    assert "the runner's fault (disk full), not the source's: tried again next run" in error.reason()


def test_a_child_that_fails_for_its_own_reason_stays_the_sources(tmp_path):
    """Control: the same child failing without a full disk is remembered as the source's, at its stage."""
    error = _export(tmp_path, "raise ValueError('hidden_size must be divisible by num_heads')")
    assert type(error) is Failure and "hidden_size must be divisible" in error.message
    assert _remembered(error)
