"""One error hierarchy for the whole bot: a skip is not a failure.

The orchestrator catches `BotError` per candidate, records it and moves on; the run exits non-zero only when
something *failed*. Messages say what was wrong and, where possible, what to change.
"""

from __future__ import annotations


class BotError(Exception):
    """Root of every expected error. Carries the checkpoint and the stage it happened in."""

    exit_code = 1

    def __init__(self, message: str, *, subject: str | None = None, stage: str | None = None):
        super().__init__(message)
        self.message = message
        self.subject = subject
        self.stage = stage

    def at(self, *, subject: str | None = None, stage: str | None = None) -> BotError:
        """Fill in where the error happened, keeping what an inner layer already knew."""
        self.subject = self.subject or subject
        self.stage = self.stage or stage
        return self

    def reason(self) -> str:
        """The message with the step it happened in (`export-draft: ...`), for a report's reason column."""
        return f"{self.stage}: {self.message}" if self.stage else self.message

    def one_line(self) -> str:
        where = " ".join(part for part in (self.subject, f"[{self.stage}]" if self.stage else None) if part)
        return f"{where}: {self.message}" if where else self.message


class Skip(BotError):
    """The input is not something this bot can or should build (unsupported, broken, gated). Not a failure."""

    exit_code = 3


class Failure(BotError):
    """Something that should have worked did not: export crashed, IR check failed, a validation gate failed."""

    exit_code = 2


class HubError(Failure):
    """The Hub refused or kept failing a request; `status` is its HTTP status (None: no answer at all)."""

    def __init__(self, message: str, *, status: int | None, subject: str | None = None, stage: str | None = None):
        super().__init__(message, subject=subject, stage=stage)
        self.status = status


class PreconditionFailed(HubError):
    """A commit lost the `parent_commit` race (HTTP 412): another writer committed first."""


class UsageError(BotError):
    """Options or environment that cannot work together; refused before any Hub call or download."""

    exit_code = 2


class RecipeError(BotError):
    """The recipe YAML is invalid; raised before any Hub call or download."""

    exit_code = 4
