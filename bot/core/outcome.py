"""What happened to one source in a run: the one set of statuses every path reports with (run, plan, build, publish).

A status is a value of `Status`; `Outcome` carries it with the reason and the repos concerned. `run` and the
Actions fan-out produce the same statuses for the same events: a card refresh that committed is `published`, one
that found nothing to change is `up-to-date`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from bot.core.errors import BotError, Skip
from bot.core.safe_text import clean


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
    source: str
    revision: str | None
    status: Status
    reason: str = ""
    repos: list[str] = field(default_factory=list)
    stage: str | None = None  # the step a skip or failure happened in (the memory re-examines some)

    def __post_init__(self) -> None:
        # A reason quotes source-controlled text (file names, card values): the table, the step summary, the
        # annotations and the status page show it without controls, bidi or zero-width characters.
        object.__setattr__(self, "reason", clean(self.reason))

    @classmethod
    def of_error(cls, source: str, revision: str | None, error: BotError) -> Outcome:
        """A skip or failure; its reason names the stage when one is known, and the repo it concerns when that is
        not the source itself (the target, an output repo)."""
        reason = error.reason()
        if (
            error.subject
            and error.subject != source
            and not error.message.startswith(error.subject)
            and error.subject not in reason[: len(error.subject) + 8]
        ):
            reason = f"{error.subject}: {reason}"
        return cls(source, revision, status_of(error), reason, stage=error.stage)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "revision": self.revision,
            "status": str(self.status),
            "reason": self.reason,
            "repos": list(self.repos),
            "stage": self.stage,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Outcome:
        return cls(
            source=str(data["source"]),
            revision=data.get("revision"),
            status=Status(data["status"]),
            reason=str(data.get("reason", "")),
            repos=[str(r) for r in data.get("repos", [])],
            stage=data.get("stage"),
        )


def status_of(error: BotError) -> Status:
    return Status.SKIPPED if isinstance(error, Skip) else Status.FAILED
