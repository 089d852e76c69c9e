"""What a build hands to the publisher: per draft, a folder with `build-outcome.json` and (when built) the bundle.

The one-process `run` and the Actions fan-out use the same hand-off: the build side (a token-free process tree,
`dflash-bot build --job`) writes the folders, and the publishing side reads them back here, checking that each
bundle is the build its job planned before anything is published.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.build.bundle import Bundle
from bot.core.outcome import Outcome, Status
from bot.core.record import PROVENANCE_FILE, RecordError
from bot.plan.planner import BuildJob
from bot.run.report import RunReport

OUTCOME_FILE = "build-outcome.json"
_ARTIFACT_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class _Handoff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OutcomeRecord(_Handoff):
    source: str
    revision: str | None
    status: Status
    reason: str = ""
    repos: list[str] = Field(default_factory=list)
    stage: str | None = None

    @classmethod
    def of(cls, outcome: Outcome) -> OutcomeRecord:
        return cls(
            source=outcome.source,
            revision=outcome.revision,
            status=outcome.status,
            reason=outcome.reason,
            repos=list(outcome.repos),
            stage=outcome.stage,
        )

    def outcome(self) -> Outcome:
        return Outcome(self.source, self.revision, self.status, self.reason, list(self.repos), self.stage)


class BuildOutcomeFile(_Handoff):
    """`build-outcome.json`: what a build job did for one draft, beside its bundle (or instead of one)."""

    job: BuildJob
    outcome: OutcomeRecord


def artifact_name(source: str) -> str:
    """An artifact name unique per source and legal for actions/upload-artifact."""
    return "bundle-" + _ARTIFACT_UNSAFE.sub("_", source.replace("/", "--"))


class _NotPublished(Exception):
    """The artifact of one draft is not published; its outcome is already in the report."""


def read_built(report: RunReport, job: BuildJob, folder: Path | None) -> Bundle | None:
    """The bundle a build left for `job` in `folder`, when it is the build the job planned; otherwise None, with
    the job's outcome added to `report` (failed or skipped in the build, missing, damaged, or not what was
    planned). Nothing that fails these checks is ever published."""
    try:
        return _checked_bundle(report, job, folder)
    except _NotPublished:
        return None


def _checked_bundle(report: RunReport, job: BuildJob, folder: Path | None) -> Bundle:
    def refuse(status: Status, reason: str) -> _NotPublished:
        report.add(Outcome(job.source, job.revision, status, reason))
        return _NotPublished()

    if folder is None or not (folder / OUTCOME_FILE).is_file():
        raise refuse(Status.FAILED, "build job left no bundle (see that job's log)")
    try:
        handed = BuildOutcomeFile.model_validate_json((folder / OUTCOME_FILE).read_bytes())
    except (OSError, ValidationError):
        raise refuse(Status.FAILED, f"unreadable {OUTCOME_FILE} in the build job's artifact") from None
    if handed.job != job:
        raise refuse(
            Status.FAILED,
            f"the artifact's {OUTCOME_FILE} is for {handed.job.source}@"
            f"{handed.job.revision[:7]}, not this entry: not published",
        )
    if handed.outcome.status != Status.BUILT:
        report.add(handed.outcome.outcome())
        raise _NotPublished()
    try:
        bundle = Bundle.read(folder)
    except RecordError as exc:
        raise refuse(Status.FAILED, f"bundle {PROVENANCE_FILE} is unusable ({exc}): not published") from None
    built = bundle.record
    holds = (built.source.repo, built.source.revision, built.target.repo, built.target.revision)
    if holds != (job.source, job.revision, job.target, job.target_revision):
        raise refuse(
            Status.FAILED,
            f"bundle holds {holds[0]}@{str(holds[1])[:7]} for {holds[2]}@"
            f"{str(holds[3])[:7]}, not the planned revisions: not published",
        )
    missing = [name for name in ("openvino_model.xml", "openvino_model.bin") if not (bundle.draft_dir / name).is_file()]
    if missing or not (bundle.target_dir / "openvino_tokenizer.xml").is_file():
        raise refuse(
            Status.FAILED, f"bundle is incomplete (missing {', '.join(missing) or 'target IR files'}): not published"
        )
    return bundle
