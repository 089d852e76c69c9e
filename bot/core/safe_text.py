"""Text from sources made visible-only, before it reaches a page, a card, a collection note or the log.

A repo id is checked by `bot.core.naming`, but everything else a source controls (file names, card values, error
messages that quote them) may hold characters that render as nothing or reorder what is around them: C0/C1
controls (a terminal escape, a carriage return that hides the start of a log line), bidi embeddings, overrides and
isolates (U+202A-U+202E, U+2066-U+2069: "Trojan Source"), marks and zero-width characters (U+200B-U+200F, U+2060,
U+FEFF). `clean` is the one function every renderer calls: the status page, collection notes, card text from a
source and the log formatter.
"""

from __future__ import annotations

import unicodedata

# Letters and marks that draw nothing but are not of category Cf: the combining grapheme joiner, Hangul and
# Khmer fillers. Category Cf (format characters: every bidi control, ZWSP/ZWNJ/ZWJ, word joiner, BOM, soft
# hyphen, invisible operators, tag characters) is removed as a whole.
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")
# Line and paragraph separators break a line in some viewers: a space keeps the words apart.
_BREAKS = frozenset({"Zl", "Zp"})


def clean(text: object, *, keep_newlines: bool = False) -> str:
    """`text` without control, bidi-control and zero-width characters.

    Args:
        text: anything (`str()` is applied; None gives "").
        keep_newlines: keep `\\n` (the log keeps a traceback's lines); otherwise it becomes a space, like a tab.

    Returns:
        The visible text: tabs and line breaks become spaces, every other control or invisible format
        character is removed. Printable ASCII comes back unchanged (and cheaply).
    """
    if text is None:
        return ""
    value = str(text)
    if value.isascii() and value.isprintable():
        return value
    return "".join(_kept(char, keep_newlines) for char in value)


def _kept(char: str, keep_newlines: bool) -> str:
    if char == "\n":
        return char if keep_newlines else " "
    if char == "\t":
        return " "
    if char in _INVISIBLE:
        return ""
    category = unicodedata.category(char)
    if category in _BREAKS:
        return " "
    if category in ("Cc", "Cf", "Cs"):  # controls, format characters, lone surrogates
        return ""
    return char
