"""`bot.core.safe_text.clean` and every place source text is shown: the status page, collection notes, card text from a
source, and the log formatter."""

from __future__ import annotations

import logging

import pytest

from bot.core.log import CleanFormatter
from bot.core.safe_text import clean
from bot.discover.source_card import escape_markdown_html
from bot.publish.collection import PublishedPair, draft_note
from bot.status.page import md_text

# What an attacker puts in a file name or card value to hide or reorder text: bidi override and isolates, marks,
# zero-width space/joiners, word joiner, BOM, a terminal escape, a carriage return, a line separator, a tag char.
HOSTILE = "gpj\u202e.exe\u2066x\u2069\u200f\u200b\u200c\u200d\u2060\ufeff\x1b[31m\r\u2028\U000e0041\u00ad\u034f"
INVISIBLE = [
    "\u202e",
    "\u2066",
    "\u2069",
    "\u200f",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\x1b",
    "\r",
    "\u2028",
    "\U000e0041",
    "\u00ad",
    "\u034f",
]


def test_clean_removes_controls_bidi_and_zero_width() -> None:
    assert clean(HOSTILE) == "gpj.exex[31m "
    assert clean("line one\nline two\tend") == "line one line two end"
    assert clean("line one\nline two", keep_newlines=True) == "line one\nline two"
    assert clean("Qwen/Qwen3-8B émoji 模型 ×") == "Qwen/Qwen3-8B émoji 模型 ×"  # visible text untouched
    assert clean(None) == "" and clean(3.5) == "3.5"


@pytest.mark.parametrize(
    "render",
    [
        md_text,
        escape_markdown_html,
        lambda text: draft_note(
            PublishedPair(
                draft_repo="OV/x-int4-ov",
                target_repo="OV/t-int4-ov",
                source=text,
                target="Qwen/t",
                accept_length=2.0,
                speedup=1.5,
                recommended_k=3,
            )
        ),
    ],
    ids=["status page", "card", "collection note"],
)
def test_every_renderer_shows_visible_text_only(render) -> None:
    shown = render(f"weights {HOSTILE} here")
    assert not any(char in shown for char in INVISIBLE), ascii(shown)


def test_collection_note_never_says_nan() -> None:
    pair = PublishedPair(
        draft_repo="OV/x-int4-ov",
        target_repo="OV/t-int4-ov",
        source="z-lab/x",
        target="Qwen/t",
        accept_length=float("nan"),
        speedup=float("inf"),
        recommended_k=3,
    )
    note = draft_note(pair)
    assert "nan" not in note.lower() and "inf" not in note.lower() and "n/a" in note


def test_log_lines_are_visible_text_and_keep_their_line_breaks() -> None:
    formatter = CleanFormatter("%(message)s")
    record = logging.LogRecord("dflash-bot", logging.WARNING, __file__, 1, "skipped %s:\n  %s", (HOSTILE, "next"), None)
    line = formatter.format(record)
    assert not any(char in line for char in INVISIBLE), ascii(line)
    assert line == "skipped gpj.exex[31m :\n  next"
