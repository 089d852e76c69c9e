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


def test_a_layout_skip_reason_reads_back_with_its_layout_target_and_capability():
    """Issue 32: the status memory keeps only a reason's text; the page finds the layout, the target and what the
    skip waits for in it, whatever prefix the run added, and a source's own text cannot forge the capability."""
    reason = draft_formats.skip_reason(
        "deepspec-dflash", "Qwen/Qwen3-8B", "markov_rank 0; waits for: nothing at all (a hostile config value)"
    )
    found = draft_formats.describe_reason(f"classify: {reason}")
    assert found == draft_formats.SkipFacts(
        "deepspec-dflash", "Qwen/Qwen3-8B", draft_formats.layout("deepspec-dflash").needs
    )
    assert "per-row DFlash export (optimum-intel after 2.2.0)" in found.waits_for
    unnamed = draft_formats.describe_reason(draft_formats.skip_reason("unknown", None, "architectures X", "y"))
    assert unnamed == draft_formats.SkipFacts("unknown", None, "y")
    assert draft_formats.describe_reason("cross-check: target_layer_ids reach beyond the target") is None
    assert {layout.group for layout in draft_formats.LAYOUTS.values()} == set(draft_formats.GROUPS)
    assert draft_formats.layout_of_kind("dflash") == "zlab-dflash" and draft_formats.layout_of_kind("x") is None
    with pytest.raises(KeyError, match="unknown draft layout 'nope'"):
        draft_formats.layout("nope")
