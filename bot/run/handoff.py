"""What a build hands to the publisher: per draft, a folder with `build-outcome.json` and (when built) the bundle.

`run` and the Actions fan-out use the same hand-off: the token-free builder (`dflash-bot build --job`: the process
`run` starts per target group, or the Actions build job) writes the folders with `write_outcome`, and the
publishing side reads them back with `read_built`, checking that each bundle is the build its job planned before
anything is published.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.build.bundle import Bundle
from bot.core.outcome import Outcome, Status
from bot.core.record import PROVENANCE_FILE, RecordError
from bot.plan.planner import BuildJob
from bot.run.report import RunReport

OUTCOME_FILE = "build-outcome.json"
_ARTIFACT_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class BuildOutcomeFile(BaseModel):
    """`build-outcome.json`: what a build did for one draft, beside its bundle (or instead of one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: BuildJob
    outcome: Outcome


def write_outcome(folder: Path, job: BuildJob, outcome: Outcome) -> None:
    """Leave a draft's `build-outcome.json` in its folder (created if the build left nothing there)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OUTCOME_FILE).write_text(
        BuildOutcomeFile(job=job, outcome=outcome).model_dump_json(indent=2) + "\n", encoding="utf-8"
    )


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
        report.add(handed.outcome)
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
    official, planned = built.official_target, job.official_target
    pinned = (planned.repo, planned.revision) if planned is not None else None
    if official is not None and (official.repo, official.revision) != pinned:
        raise refuse(
            Status.FAILED,
            f"bundle names the official target {official.repo}@{official.revision[:7]}, which its job did not pin: "
            "not published",
        )
    served = official is not None and official.used  # validated against the official IR: no target to publish
    missing = [name for name in ("openvino_model.xml", "openvino_model.bin") if not (bundle.draft_dir / name).is_file()]
    if missing or not (served or (bundle.target_dir / "openvino_tokenizer.xml").is_file()):
        raise refuse(
            Status.FAILED, f"bundle is incomplete (missing {', '.join(missing) or 'target IR files'}): not published"
        )
    return bundle
