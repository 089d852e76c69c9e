"""What each draft format means to a user: the words the card, the provenance and the report use (DESIGN §5).

A stateful draft (optimum-intel 2.2.0) runs as GenAI's single-request proof of concept beside a PagedAttention
target; a per-row draft converts to PagedAttention like any decoder and runs inside continuous batching, so the
card, the provenance and the run report call it "PagedAttention-ready". One table here keeps the three in step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

STATEFUL, PER_ROW = "stateful", "per-row"
PAGED_ATTENTION_READY = "PagedAttention-ready"


@dataclass(frozen=True)
class FormatFacts:
    """The user-facing facts of one draft format.

    Attributes:
        format: "stateful" or "per-row" (the provenance's `draft.format`).
        label: the short name the card title line and the report use.
        paged_attention_ready: whether SDPA→PagedAttention converts the draft (checked by bot.build.check_ir).
        runtime: how GenAI runs it (a card bullet).
        limits: what GenAI allows with it (a card bullet and the usage comment).
        validation: the GenAI interface that validates it.
    """

    format: str
    label: str
    paged_attention_ready: bool
    runtime: str
    limits: str
    validation: str

    def as_provenance(self) -> dict:
        return asdict(self)


_FACTS = {
    STATEFUL: FormatFacts(
        format=STATEFUL,
        label="stateful",
        paged_attention_ready=False,
        runtime="KV cache as model state, run by GenAI beside the PagedAttention target",
        limits="GenAI's DFlash path supports greedy decoding, batch size 1, one active request, prefix caching off.",
        validation="LLMPipeline / VLMPipeline, one request at a time",
    ),
    PER_ROW: FormatFacts(
        format=PER_ROW,
        label=PAGED_ATTENTION_READY,
        paged_attention_ready=True,
        runtime="per-row, PagedAttention-ready: SDPA→PagedAttention converts every draft layer, so GenAI runs the "
        "draft inside continuous batching beside the target",
        limits="Needs an OpenVINO GenAI release with per-row DFlash support (continuous batching on PagedAttention, "
        "several requests at once); greedy decoding, prefix caching off.",
        validation="ContinuousBatchingPipeline, several concurrent requests",
    ),
}


def facts(draft_format: str) -> FormatFacts:
    """The facts of `draft_format`.

    Raises:
        KeyError: an unknown format (a provenance this bot did not write).
    """
    try:
        return _FACTS[draft_format]
    except KeyError:
        raise KeyError(f"unknown draft format {draft_format!r} (known: {', '.join(_FACTS)})") from None


def report_note(draft_format: str | None) -> str:
    """A few words for the run report's reason column, e.g. "per-row draft, PagedAttention-ready"."""
    if draft_format is None or draft_format not in _FACTS:
        return ""
    found = _FACTS[draft_format]
    return f"{found.format} draft, {PAGED_ATTENTION_READY}" if found.paged_attention_ready else f"{found.format} draft"
