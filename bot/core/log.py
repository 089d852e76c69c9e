"""Progress output that knows whether it runs in GitHub Actions.

Elsewhere it prints plain, line-buffered progress lines; on Actions, `group()` folds a stage's output and every
warning or error logged becomes an annotation (`ActionsFormatter`), with its traceback as the log lines after it;
`bot.run.actions` annotates the run report's outcomes. A long step says how far it got every `PROGRESS_INTERVAL_S`
as plain lines everywhere (`heartbeat` for a child the bot waits on, `ByteProgress` for a download).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator

import github_action_utils as gha

from bot.core.safe_text import clean

_LOGGER_NAME = "dflash-bot"
# How often a long step (a download, a child exporting, measuring or validating) says how far it got; read at each
# use, so the tests set it small.
PROGRESS_INTERVAL_S = 30.0
_OWN_HANDLER = "dflash_bot_handler"  # marks the handler `setup` made


_state = {"on_actions": False}
_ANNOTATED = ((logging.ERROR, "error"), (logging.WARNING, "warning"))


class CleanFormatter(logging.Formatter):
    """Every line as visible text: a source's file name or error text may carry controls, bidi overrides or
    zero-width characters that would hide or reorder what the log shows (`bot.core.safe_text.clean`)."""

    def format(self, record: logging.LogRecord) -> str:
        return clean(super().format(record), keep_newlines=True)


class ActionsFormatter(CleanFormatter):
    """On Actions, a warning or error is an annotation (`::warning::`, `::error::`), so the run's page lists it;
    its traceback follows as plain log lines, so a bug shows where it happened, not one line.

    No other line can pass for a workflow command: logged text quotes source-controlled names and messages, and the
    runner reads a command from any line that starts with `::` (`::add-mask::`, `::stop-commands::`).
    """

    def format(self, record: logging.LogRecord) -> str:
        command = next((name for level, name in _ANNOTATED if record.levelno >= level), None)
        if command is None:
            return _disarmed(super().format(record))
        lines = [annotation(command, record.getMessage())]
        if record.exc_info:
            lines.append(self.formatException(record.exc_info))
        if record.stack_info:
            lines.append(self.formatStack(record.stack_info))
        return "\n".join([lines[0], *(_disarmed(clean(text, keep_newlines=True)) for text in lines[1:])])


def annotation(command: str, message: str) -> str:
    """The workflow command for one annotation (`error`, `warning`, `notice`): the message escaped the way the
    runner decodes it, so a multi-line message stays one annotation and cannot start a command of its own."""
    text = clean(message, keep_newlines=True)
    return f"::{command}::" + text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def error_line(line: str) -> str:
    """A line that ends a command with an error: an `::error::` annotation on Actions, the line as it is elsewhere."""
    return annotation("error", line) if on_github_actions() else line


def _disarmed(text: str) -> str:
    return "\n".join(
        line.replace("::", ": :", 1) if line.lstrip().startswith("::") else line for line in text.split("\n")
    )


def setup(verbose: bool = False, *, on_actions: bool = False) -> logging.Logger:
    """Configure the bot's logger once; stdout is line-buffered so subprocess output stays in order.

    Args:
        on_actions: fold groups with `::group::` and turn warnings and errors into annotations (from
            `Settings.on_actions`).
    """
    _state["on_actions"] = on_actions
    with contextlib.suppress(AttributeError, ValueError):
        getattr(sys.stdout, "reconfigure", lambda **_: None)(line_buffering=True)
    logger = logging.getLogger(_LOGGER_NAME)
    # A library that configures logging with `dictConfig` (disable_existing_loggers) silences loggers made before it.
    logger.disabled = False
    # The bot's own handler, made again on the stderr of now: one an earlier setup made may hold a stream that has
    # since been replaced. Handlers someone else added are left as they are, formatters included.
    for handler in [h for h in logger.handlers if getattr(h, _OWN_HANDLER, False)]:
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    setattr(handler, _OWN_HANDLER, True)
    handler.setFormatter((ActionsFormatter if on_actions else CleanFormatter)("%(message)s"))
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


def duration(seconds: float) -> str:
    """`45s`, `1m30s`, `2h05m`: an elapsed time as a progress line shows it."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole // 60 % 60:02d}m"


def size(n: float) -> str:
    """`120.3 MB`, `4.0 GB`: bytes in decimal units, as a progress line shows them."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


class ByteProgress:
    """A transfer's progress as plain lines (`<label>: 120.3 MB of 4.0 GB, 35.1 MB/s`), at most one per
    `PROGRESS_INTERVAL_S`, never one per chunk: the same on Actions and in a terminal.

    `done` is where the transfer starts (a resumed download's bytes already on disk); the rate counts the bytes of
    this transfer only.
    """

    def __init__(self, label: str, total: int, *, done: int = 0, clock: Callable[[], float] = time.monotonic):
        self._label, self._total, self._clock = label, total, clock
        self.done = self._start_bytes = done
        self._started = self._last = clock()

    def advance(self, n: int) -> None:
        self.done += n
        now = self._clock()
        if now - self._last >= PROGRESS_INTERVAL_S:
            self._last = now
            rate = (self.done - self._start_bytes) / max(now - self._started, 1e-9)
            step("%s: %s of %s, %s/s", self._label, size(self.done), size(self._total), size(rate))


@contextlib.contextmanager
def heartbeat(what: str, doing: Callable[[], str]) -> Iterator[None]:
    """While the body runs, a line every `PROGRESS_INTERVAL_S`: `<what>: still running after 1m30s (<doing>)`,
    where `doing()` says what it is doing now (a child's last log line); a step that ends sooner says nothing."""
    stop = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not stop.wait(PROGRESS_INTERVAL_S):
            try:
                now = doing()
            except Exception as exc:  # a progress line never fails the step it describes
                now = f"no detail: {type(exc).__name__}"
            step("%s: still running after %s (%s)", what, duration(time.monotonic() - started), now)

    thread = threading.Thread(target=beat, name=f"heartbeat: {what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
