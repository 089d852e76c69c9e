"""What happened to one source in a run: the one set of statuses every path reports with (run, plan, build, publish).

A status is a value of `Status`; `Outcome` carries it with the reason and the repos concerned. `run` and the
Actions fan-out produce the same statuses for the same events: a card refresh that committed is `published`, one
that found nothing to change is `up-to-date`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import ConfigDict, TypeAdapter

from bot.core.errors import BotError, InfrastructureFailure, Skip
from bot.core.safe_text import clean

MAX_REASON_CHARS = 4000  # longer reasons (quoting a stranger's config or a whole error page) are cut


class Status(StrEnum):
    PUBLISHED = "published"  # a commit was made (the build, or the card alone)
    UP_TO_DATE = "up-to-date"  # the Hub already held this build and card
    SKIPPED = "skipped"  # the source is not ours to build (unsupported, broken, gated); not a failure
    FAILED = "failed"  # something that should have worked did not
    PLANNED = "planned"  # dry runs: what would happen
    DEFERRED = "deferred"  # over the Actions matrix limit: built by the next run
    BUILT = "built"  # a build job's bundle, handed on to the publish job


@dataclass(frozen=True)
class Outcome:
    """One source's status in a run, why, and the repos it concerns.

    Its one serialised form is its fields as JSON (`to_dict`, `from_dict`, and pydantic wherever a hand-off record
    holds an `Outcome`): the run report, the Actions plan record and each build's `build-outcome.json` all use it.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")  # a hand-off file with a field this bot never writes is refused

    source: str
    revision: str | None
    status: Status
    reason: str = ""
    repos: list[str] = field(default_factory=list)
    stage: str | None = None  # the step a skip or failure happened in (the memory re-examines some)

    def __post_init__(self) -> None:
        # A reason quotes source-controlled text (file names, card values): the table, the step summary, the
        # annotations and the status page show it without controls, bidi or zero-width characters.
        # A stranger's config may hold a megabyte-long string: the reason keeps the first MAX_REASON_CHARS of it.
        reason = clean(self.reason)
        object.__setattr__(
            self, "reason", reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS] + "…"
        )

    @classmethod
    def of_error(cls, source: str, revision: str | None, error: BotError) -> Outcome:
        """A skip or failure; its reason names the stage when one is known, and the repo it concerns when that is
        not the source itself (the target, an output repo).

        An `InfrastructureFailure` (our side's) gets no `stage`, so the status memory never keeps it as the source's
        (`bot.status.memory.source_fault`); its reason still names the step.
        """
        reason = error.reason()
        if (
            error.subject
            and error.subject != source
            and not error.message.startswith(error.subject)
            and error.subject not in reason[: len(error.subject) + 8]
        ):
            reason = f"{error.subject}: {reason}"
        stage = None if isinstance(error, InfrastructureFailure) else error.stage
        return cls(source, revision, status_of(error), reason, stage=stage)

    def to_dict(self) -> dict:
        """The JSON form (the report's `outcomes` entries)."""
        return _OUTCOME.dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, data: dict) -> Outcome:
        """Read the JSON form back.

        Raises:
            pydantic.ValidationError: a field missing, unknown or of the wrong type.
        """
        return _OUTCOME.validate_python(data)


_OUTCOME: TypeAdapter[Outcome] = TypeAdapter(Outcome)


def status_of(error: BotError) -> Status:
    return Status.SKIPPED if isinstance(error, Skip) else Status.FAILED
