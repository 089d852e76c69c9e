"""What each draft format means to a user: the words the card, the provenance and the report use (docs/design.md §5).

A stateful draft (optimum-intel 2.2.0) runs as GenAI's single-request proof of concept beside a PagedAttention
target; a per-row draft converts to PagedAttention like any decoder and runs inside continuous batching, so the
card, the provenance and the run report call it "PagedAttention-ready". One table here keeps the three in step.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

STATEFUL, PER_ROW = "stateful", "per-row"
PAGED_ATTENTION_READY = "PagedAttention-ready"


@dataclass(frozen=True)
class FormatFacts:
    """The user-facing facts of one draft format.

    Attributes:
        format: "stateful" or "per-row" (the provenance's `draft.format`).
        label: the short name the card title line and the report use.
        paged_attention_ready: whether SDPA→PagedAttention converts the draft (checked by bot.builder.check_ir).
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


# ---- checkpoint layouts: every draft layout on the Hub, and what a toolchain needs to export it (issue 32) ----
#
# A *layout* is how a draft checkpoint spells itself (which fields, nested where, which weights), as opposed to the
# *format* above (what the bot's export produces). The status page groups drafts by a layout's `group`, and every
# skip of a draft names its layout, the config field that decided it and the capability it waits for, in the one
# wording `skip_reason` writes and `describe_reason` reads back (the status memory keeps only the reason text).

DFLASH, DFLASH2, DSPARK, SPECULATORS, OTHER = "DFlash", "DFlash2", "DSpark", "speculators", "other"
GROUPS = (DFLASH, DFLASH2, DSPARK, SPECULATORS, OTHER)  # the page's order
PER_ROW_NEED = "per-row DFlash export (optimum-intel after 2.2.0)"
SPECULATORS_NEED = (
    "an export that reads the speculators layout (nested transformer_layer_config, aux_hidden_state_layer_ids "
    "counted from the embedding, a reduced draft vocabulary with d2t/t2d maps): optimum-intel reads z-lab's only"
)
UNNAMED_TARGET = "an unnamed target"


@dataclass(frozen=True)
class Layout:
    """One draft checkpoint layout.

    Attributes:
        id: the stable name `status.json` keeps (`StatusEntry.layout`).
        group: the status page's group (`GROUPS`).
        label: the words a skip reason starts with (unique: `describe_reason` finds the layout by it).
        needs: what an exporter must support to build it, as a skip reason's "waits for".
    """

    id: str
    group: str
    label: str
    needs: str


_LAYOUTS = (
    Layout("zlab-dflash", DFLASH, "z-lab DFlash draft", "a DFlash draft exporter (optimum-intel 2.2.0, stateful)"),
    Layout(
        "zlab-dflash-other-base",
        DFLASH,
        "z-lab DFlash draft on a non-Qwen3 backbone",
        "DFlash export of non-qwen3 draft backbones (optimum-intel 2.2.0 exports qwen3 ones only)",
    ),
    Layout(
        "deepspec-dflash",
        DFLASH,
        "DeepSpec DFlash draft (flat fields, markov_rank 0)",
        f"{PER_ROW_NEED} with DSpark's anchor-first rows (candidate_position_offset 0)",
    ),
    Layout(
        "zlab-dflash2",
        DFLASH2,
        "z-lab DFlash2 draft",
        "DFlash2 export as two IRs, backbone plus selector (an open optimum-intel PR, in no release)",
    ),
    Layout(
        "deepspec-dspark",
        DSPARK,
        "DeepSpec DSpark draft (flat fields)",
        "a Markov-head DSpark export (Markov head and confidence head; no optimum-intel has one)",
    ),
    Layout(
        "specforge-dspark",
        DSPARK,
        "SpecForge DSpark draft (nested dflash_config)",
        "a Markov-head DSpark export (Markov head and confidence head; no optimum-intel has one)",
    ),
    Layout(
        "lfm2-dspark",
        DSPARK,
        "LiquidAI LFM2 DSpark draft",
        "a Markov-head DSpark export and a toolchain profile for LFM2 (short-convolution hybrid) targets",
    ),
    Layout("speculators-dflash", SPECULATORS, "speculators-format DFlash draft", SPECULATORS_NEED),
    Layout("speculators-dflash2", SPECULATORS, "speculators-format DFlash2 draft", SPECULATORS_NEED),
    Layout("speculators-dspark", SPECULATORS, "speculators-format DSpark draft", SPECULATORS_NEED),
    Layout("speculators-eagle", SPECULATORS, "speculators-format EAGLE draft", "an EAGLE draft exporter (none exists)"),
    Layout("speculators-other", SPECULATORS, "speculators-format draft of another algorithm", SPECULATORS_NEED),
    Layout("unknown", OTHER, "not a DFlash or DSpark draft", "nothing: the bot builds DFlash and DSpark drafts only"),
)
LAYOUTS = {layout.id: layout for layout in _LAYOUTS}
# A published build's kind -> the layout it was built from (the kinds the bot exports today).
_KIND_LAYOUT = {"dflash": "zlab-dflash", "dspark": "deepspec-dflash", "dflash2": "zlab-dflash2"}
_REASON = re.compile(
    r"(?P<label>"
    + "|".join(re.escape(layout.label) for layout in sorted(_LAYOUTS, key=lambda item: -len(item.label)))
    + r") for (?P<target>[A-Za-z0-9_.-]{1,96}/[A-Za-z0-9_.-]{1,96}|"
    + re.escape(UNNAMED_TARGET)
    + r"): .*; waits for: (?P<waits>.+)$",
    re.DOTALL,
)


@dataclass(frozen=True)
class SkipFacts:
    """What a layout skip's reason says: the layout, the target it names and the capability it waits for."""

    layout: str
    target: str | None
    waits_for: str


def layout(layout_id: str) -> Layout:
    """The layout of this id.

    Raises:
        KeyError: an id this bot does not know.
    """
    try:
        return LAYOUTS[layout_id]
    except KeyError:
        raise KeyError(f"unknown draft layout {layout_id!r} (known: {', '.join(LAYOUTS)})") from None


def layout_of_kind(kind: str | None) -> str | None:
    """The layout a published build of this kind came from (None: a kind the bot does not build)."""
    return _KIND_LAYOUT.get(kind or "")


def skip_reason(layout_id: str, target: str | None, decided_by: str, waits_for: str | None = None) -> str:
    """A layout skip's reason: "<label> for <target>: <field that decided it>; waits for: <capability>".

    Args:
        layout_id: the draft's layout (`LAYOUTS`).
        target: the target repo id when one was named (None: "an unnamed target").
        decided_by: the field and value that decided it, and why (e.g. "speculators_model_type 'dspark': ...").
        waits_for: the capability the toolchain would need (default: the layout's `needs`).
    """
    found = layout(layout_id)
    return f"{found.label} for {target or UNNAMED_TARGET}: {decided_by}; waits for: {waits_for or found.needs}"


def describe_reason(reason: str) -> SkipFacts | None:
    """Read a `skip_reason` back, wherever it sits in a reason (a stage prefix, a subject); None for other text."""
    match = _REASON.search(reason)
    if match is None:
        return None
    by_label = {item.label: item.id for item in _LAYOUTS}
    target = match.group("target")
    return SkipFacts(
        layout=by_label[match.group("label")],
        target=None if target == UNNAMED_TARGET else target,
        waits_for=match.group("waits").strip(),
    )
