"""What a build hands to the publisher: per draft, a folder with `build-outcome.json` and (when built) the bundle.

`run` and the Actions fan-out use the same hand-off: the token-free builder (`dflash-bot build --job`: the process
`run` starts per target group, or the Actions build job) writes the folders with `write_outcome`, and the
publishing side reads a target group's back with `read_group`, checking that each bundle is the build its job
planned before anything is published.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.builder.bundle import Bundle, check_publishable
from bot.core.errors import Failure, Stage
from bot.core.fingerprints import template_fingerprint
from bot.core.outcome import Outcome, Status
from bot.core.record import PROVENANCE_FILE, RecordError
from bot.plan.job import BuildJob
from bot.publish.publisher import not_as_written
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
    """The artifact of one draft is not published; its outcome is already in the report. `tampered`: the bundle is
    not what the plan made (another job's, other revisions, repos or files), so nothing of its group is."""

    def __init__(self, tampered: bool = False) -> None:
        super().__init__()
        self.tampered = tampered


def read_group(
    report: RunReport, jobs: list[BuildJob], folder: Path | None, *, formats: Collection[str] | None = None
) -> list[tuple[BuildJob, Bundle]]:
    """The bundles one target group's build left under `folder` (`folder/artifact_name(source)` per job), held to
    the plan's jobs (each bundle the build its job planned, or its job's outcome added to `report`: failed or
    skipped in the build, missing, damaged); when one is not what the plan made (another job's, other revisions, a
    weight format or reused/official target the plan did not name, files its format never publishes), none of
    the group is: that bundle is refused with its reason and every other draft of the group with its name.
    Every job's outcome that is not handed on goes to `report`."""
    seen = RunReport()
    card_fp = template_fingerprint()  # this checkout's card templates: the same for every bundle of the group
    ready: list[tuple[BuildJob, Bundle]] = []
    tampered: tuple[BuildJob, Outcome] | None = None
    for job in jobs:
        try:
            ready.append(
                (
                    job,
                    _checked_bundle(
                        seen, job, folder / artifact_name(job.source) if folder else None, formats, card_fp
                    ),
                )
            )
        except _NotPublished as refused:
            if refused.tampered and tampered is None:
                tampered = (job, seen.outcomes[-1])
    if tampered is None:
        report.outcomes.extend(seen.outcomes)
        return ready
    bad, why = tampered
    held = {id(job) for job, _ in ready}
    for outcome in seen.outcomes:
        report.add(outcome)
    for job in jobs:
        if id(job) in held:
            reason = (
                f"not published: bundle {artifact_name(bad.source)} of its group is not what the plan made "
                f"({why.reason})"
            )
            report.add(Outcome(job.source, job.revision, Status.FAILED, reason, stage=Stage.PUBLISH.value))
    return []


def _checked_bundle(
    report: RunReport, job: BuildJob, folder: Path | None, formats: Collection[str] | None, card_fp: str
) -> Bundle:
    def refuse(status: Status, reason: str, *, tampered: bool = False) -> _NotPublished:
        report.add(Outcome(job.source, job.revision, status, reason))
        return _NotPublished(tampered)

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
            tampered=True,
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
            tampered=True,
        )
    official, planned = built.official_target, job.official_target
    pinned = (planned.repo, planned.revision) if planned is not None else None
    if official is not None and (official.repo, official.revision) != pinned:
        raise refuse(
            Status.FAILED,
            f"bundle names the official target {official.repo}@{official.revision[:7]}, which its job did not pin: "
            "not published",
            tampered=True,
        )
    served = official is not None and official.used  # validated against the official IR: no target to publish
    missing = [name for name in ("openvino_model.xml", "openvino_model.bin") if not (bundle.draft_dir / name).is_file()]
    if missing or not (served or (bundle.target_dir / "openvino_tokenizer.xml").is_file()):
        raise refuse(
            Status.FAILED, f"bundle is incomplete (missing {', '.join(missing) or 'target IR files'}): not published"
        )
    unplanned = _not_planned(job, bundle, formats, card_fp, f"bundle {folder.name}")
    if unplanned is not None:
        raise refuse(Status.FAILED, f"{unplanned}: not published", tampered=True)
    return bundle


def _not_planned(job: BuildJob, bundle: Bundle, formats: Collection[str] | None, card_fp: str, name: str) -> str | None:
    """What of a bundle the plan did not make (None: nothing): its draft weight format (which picks its repo among
    the ones the plan named), the reused or official target it was built against, the repos and card templates its
    record names (it is published as written: they must be the job's, `BuildJob.publish_repos`, and this
    checkout's), who approved it (`approved_by`: the card says so), and its file set (names and kinds its format
    publishes, `bot.builder.bundle.check_publishable`; a reused or official target's files among the ones the plan
    pinned). Its record comes with it, so only the plan is asked."""
    built = bundle.record
    weight_format = built.draft_weight_format
    allowed = {*formats, job.published_format} if formats is not None else None
    if (job.draft_repos and weight_format not in job.draft_repos) or (
        allowed is not None and weight_format not in allowed
    ):
        return f"{name} is a draft in weight format {weight_format!r}, which the plan does not build"
    reuse = job.reuse_target
    if built.export.target_reused_from != (reuse.pinned if reuse is not None else None):
        return (
            f"{name} was built against the target {built.export.target_reused_from or 'exported by it'}, not the plan's"
        )
    if (why := not_as_written(built, job.publish_repos(built), card_fp)) is not None:
        return f"{name}: {why}"
    if built.approved_by != job.candidate.approved_by:
        return f"{name}'s record says it was approved by {built.approved_by}, the plan by {job.candidate.approved_by}"
    if built.files is None:
        return f"{name} lists no file hashes"
    served = built.official_target is not None and built.official_target.used
    pinned_files = job.official_target.files if served and job.official_target else reuse.files if reuse else None
    if pinned_files is not None and not set(built.files.target) <= set(pinned_files):
        extra = sorted(set(built.files.target) - set(pinned_files))
        return f"{name} lists target files the plan did not pin ({', '.join(extra[:5])})"
    try:
        check_publishable(bundle.draft_dir, "draft", f"{name}: draft/")
        check_publishable(bundle.target_dir, "official" if served else "target", f"{name}: target/")
    except Failure as error:
        return error.message.removesuffix(": not published")
    return None
