"""`bot.builder.draft_record`'s pure part: an export's cost as the build record keeps it (seconds to a tenth, each
memory peak in bytes, a peak that was not measured left out rather than recorded as 0)."""

from __future__ import annotations

from pathlib import Path

from bot.builder.draft_record import _export_cost
from bot.builder.export import ExportResult
from bot.core.record import StageResources


def _export(seconds: float, rss: int = 0, anon: int = 0, file: int = 0) -> ExportResult:
    cost = StageResources(seconds=seconds, peak_rss_bytes=rss, peak_anon_bytes=anon, peak_file_bytes=file)
    return ExportResult(role="draft", ir_dir=Path("ir"), log=Path("export-draft.log"), resources=cost)


def test_export_cost_keeps_time_and_memory_peaks() -> None:
    cost = _export_cost(_export(12.345, rss=3_000_000_000, anon=2_000_000_000, file=1_000_000_000))
    assert cost.seconds == 12.3
    assert (cost.peak_rss_bytes, cost.peak_anon_bytes, cost.peak_file_bytes) == (
        3_000_000_000,
        2_000_000_000,
        1_000_000_000,
    )


def test_unmeasured_peaks_are_left_out() -> None:
    cost = _export_cost(_export(0.04))
    assert cost.seconds == 0.0
    assert cost.peak_rss_bytes is None and cost.peak_anon_bytes is None and cost.peak_file_bytes is None
    dumped = cost.model_dump(exclude_none=True)
    assert "peak_rss_bytes" not in dumped and dumped["seconds"] == 0.0


def test_only_the_measured_peak_is_kept() -> None:
    cost = _export_cost(_export(99.96, anon=512))
    assert cost.seconds == 100.0
    assert (cost.peak_rss_bytes, cost.peak_anon_bytes, cost.peak_file_bytes) == (None, 512, None)
