"""Charts: PNG bytes that depend on the figures only, so an unchanged build uploads nothing."""

from __future__ import annotations

import io

import pytest

from bot.core.record_checks import SpeedRun
from bot.publish.charts import (
    ACCEPTANCE_CHART,
    ACCEPTANCE_SIZE,
    DPI,
    PairFigures,
    acceptance_png,
    speedups_png,
    write_acceptance_chart,
)

RUNS = [
    SpeedRun(
        num_assistant_tokens=3,
        max_new_tokens=33,
        accept_length=4.0,
        tokens_per_s=52.0,
        baseline_tokens_per_s=20.0,
        speedup=2.6,
    ),
    SpeedRun(
        num_assistant_tokens=7,
        max_new_tokens=33,
        accept_length=8.0,
        tokens_per_s=61.0,
        baseline_tokens_per_s=21.0,
        speedup=2.9,
    ),
]


def _size(png: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        assert not {"Software", "Creation Time", "date:create"} & set(image.info)
        return image.size


def test_acceptance_chart_is_deterministic_and_fixed_size() -> None:
    first, second = acceptance_png(RUNS), acceptance_png(list(reversed(RUNS)))
    assert first == second and first.startswith(b"\x89PNG")
    assert _size(first) == (int(ACCEPTANCE_SIZE[0] * DPI), int(ACCEPTANCE_SIZE[1] * DPI))
    assert acceptance_png(RUNS, baseline_tokens_per_s=30.0) != first
    changed = [
        RUNS[0],
        SpeedRun(
            num_assistant_tokens=7,
            max_new_tokens=33,
            accept_length=7.5,
            tokens_per_s=61.0,
            baseline_tokens_per_s=21.0,
            speedup=2.9,
        ),
    ]
    assert acceptance_png(changed) != first
    with pytest.raises(ValueError):
        acceptance_png([])


def test_speedups_chart_is_deterministic() -> None:
    pairs = [PairFigures("b-int4-ov", 3.0, 1.4), PairFigures("a-int4-ov", 4.0, 1.8)]
    first = speedups_png(pairs)
    assert first == speedups_png(list(reversed(pairs)))
    assert speedups_png([PairFigures("b-int4-ov", 3.0, 1.5), pairs[1]]) != first
    empty = speedups_png([])
    assert empty == speedups_png([]) and empty != first
    assert _size(speedups_png(pairs * 3))[1] > _size(first)[1]  # one row per pair


def test_chart_from_provenance_matches_the_runs(tmp_path) -> None:
    from bot.core.record_checks import Validation

    validation = Validation.model_validate(
        {
            "lossless": True,
            "mismatches": [],
            "prompts": ["a"],
            "runs": [run.model_dump() for run in RUNS],
            "recommended_num_assistant_tokens": 7,
            "accept_length": 8.0,
            "min_accept_length": 1.5,
            "acceptance_passed": True,
            "device": "CPU",
            "hardware": "x",
            "pipeline": "LLMPipeline",
            "gates": {"lossless": True, "acceptance": True},
        }
    )
    path = write_acceptance_chart(tmp_path / "draft", validation)
    assert path == tmp_path / "draft" / ACCEPTANCE_CHART and path.read_bytes() == acceptance_png(RUNS)
