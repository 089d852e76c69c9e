"""Progress output that knows whether it runs in GitHub Actions.

Elsewhere it prints plain, line-buffered progress lines; on Actions, `group()` folds a stage's output and
warnings/errors become annotations (see `bot.run.actions`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

import github_action_utils as gha

from bot.core.safe_text import clean

_LOGGER_NAME = "dflash-bot"


_state = {"on_actions": False}


class CleanFormatter(logging.Formatter):
    """Every line as visible text: a source's file name or error text may carry controls, bidi overrides or
    zero-width characters that would hide or reorder what the log shows (`bot.core.safe_text.clean`)."""

    def format(self, record: logging.LogRecord) -> str:
        return clean(super().format(record), keep_newlines=True)


def setup(verbose: bool = False, *, on_actions: bool = False) -> logging.Logger:
    """Configure the bot's logger once; stdout is line-buffered so subprocess output stays in order.

    Args:
        on_actions: fold groups with `::group::` (from `Settings.on_actions`).
    """
    _state["on_actions"] = on_actions
    with contextlib.suppress(AttributeError, ValueError):
        getattr(sys.stdout, "reconfigure", lambda **_: None)(line_buffering=True)
    logger = logging.getLogger(_LOGGER_NAME)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(CleanFormatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    return logger


def get() -> logging.Logger:
    return logging.getLogger(_LOGGER_NAME)


def on_github_actions() -> bool:
    return _state["on_actions"]


@contextlib.contextmanager
def group(title: str) -> Iterator[None]:
    """A timed, foldable section: `::group::` on Actions, a `==>` header elsewhere."""
    logger = get()
    started = time.monotonic()
    if on_github_actions():
        gha.start_group(title)  # escapes the title the way the runner parses it
    else:
        logger.info("==> %s", title)
    try:
        yield
    finally:
        elapsed = time.monotonic() - started
        if on_github_actions():
            gha.end_group()
        logger.info("    %s done in %.1fs", title, elapsed)


def step(message: str, *args: object) -> None:
    get().info("    " + message, *args)
