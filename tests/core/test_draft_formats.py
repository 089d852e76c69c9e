"""bot.core.draft_formats: the user-facing facts of the stateful and per-row formats, and the report's note."""

from __future__ import annotations

import pytest

from bot.core import draft_formats
from bot.core.draft_formats import PAGED_ATTENTION_READY, PER_ROW, STATEFUL, facts, report_note


def test_stateful_facts():
    found = facts(STATEFUL)
    assert found.format == "stateful"
    assert found.label == "stateful"
    assert found.paged_attention_ready is False
    assert "LLMPipeline" in found.validation


def test_per_row_facts_are_paged_attention_ready():
    found = facts(PER_ROW)
    assert found.format == "per-row"
    assert found.label == PAGED_ATTENTION_READY == "PagedAttention-ready"
    assert found.paged_attention_ready is True
    assert "ContinuousBatchingPipeline" in found.validation


def test_unknown_format_names_the_known_ones():
    with pytest.raises(KeyError, match=r"unknown draft format 'dspark' \(known: stateful, per-row\)"):
        facts("dspark")


def test_as_provenance_holds_every_field():
    data = facts(PER_ROW).as_provenance()
    assert set(data) == {"format", "label", "paged_attention_ready", "runtime", "limits", "validation"}
    assert data["format"] == "per-row"
    assert data["paged_attention_ready"] is True


def test_facts_are_frozen():
    with pytest.raises(AttributeError):
        facts(STATEFUL).label = "other"


@pytest.mark.parametrize(
    ("draft_format", "note"),
    [
        (PER_ROW, "per-row draft, PagedAttention-ready"),
        (STATEFUL, "stateful draft"),
        (None, ""),
        ("unknown", ""),
    ],
)
def test_report_note(draft_format, note):
    assert report_note(draft_format) == note


def test_module_constants():
    assert (draft_formats.STATEFUL, draft_formats.PER_ROW) == ("stateful", "per-row")
