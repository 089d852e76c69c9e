"""The GitHub Actions fan-out of one run (DESIGN §8): plan a matrix, build one entry per runner, publish once.

`dflash-bot run` does all of this in one process. On Actions the stages run as separate jobs so that builds go to
runners sized for them and so that the trust boundary (DESIGN §3) is a job boundary:

- `plan_matrix` (plan job, read token): discovers and plans exactly like `run`, and turns each build into a
  matrix entry with a runner class from its estimated peak memory. Skips, up-to-date sources, builds no runner
  class can take and entries over the 256-entry limit (deferred to the next run) are kept in the plan record,
  so the final report lists every source. Card-only refreshes are not matrix entries: they need the write
  token and no checkpoint, so the publish job performs them from the plan record.
- `build_job` (one build job per entry, read token only): downloads the pinned revisions and builds one bundle,
  then writes `build-outcome.json` beside it, so a failed or skipped build still reaches the report.
- `publish_run` (publish job, write token, never loads a checkpoint): refreshes cards, publishes every bundle
  (re-checking the Hub first) and reports entries whose build job left no bundle.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from bot import log, plan
from bot.bundle import PROVENANCE_FILE, read_provenance
from bot.discover import Candidate
from bot.errors import BotError, Failure, Skip
from bot.hub import REQUESTS, Hub
from bot.pipeline import RunOptions, fetch_and_build, plan_run
from bot.publish import UP_TO_DATE as PUBLISH_UP_TO_DATE
from bot.publish import publish_bundle, refresh_cards
from bot.recipe import Recipe, RunnerClass, RunnerSettings
from bot.report import FAILED, PLANNED, PUBLISHED, SKIPPED, UP_TO_DATE, Outcome, RunReport
from bot.sizing import choose_runner

DEFERRED = "deferred"
BUILT = "built"
OUTCOME_FILE = "build-outcome.json"
PLAN_SCHEMA = 1
_ARTIFACT_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class JobError(BotError):
    """A `--job` or plan record that is not what `plan --matrix` writes; fix the caller, not the checkpoint."""

    exit_code = 4


@dataclass(frozen=True)
class BuildJob:
    """One build of the matrix: a draft and its target, both pinned to revisions, and where they will publish."""

    source: str
    revision: str
    target: str
    target_revision: str
    kind: str
    format: str
    reasons: tuple[str, ...]
    draft_repo: str
    target_repo: str
    weight_bytes: int

    @classmethod
    def from_candidate(cls, candidate: Candidate, reasons: tuple[str, ...], recipe: Recipe) -> BuildJob:
        return cls(source=candidate.repo_id, revision=candidate.revision, target=candidate.target_repo,
                   target_revision=candidate.target_revision, kind=candidate.kind, format=candidate.draft_format,
                   reasons=tuple(reasons), draft_repo=plan.draft_output_repo(recipe, candidate.repo_id),
                   target_repo=plan.target_output_repo(recipe, candidate.target_repo),
                   weight_bytes=candidate.weight_bytes)

    @classmethod
    def from_dict(cls, data: object) -> BuildJob:
        """Parse a job as `plan --matrix` wrote it.

        Raises:
            JobError: not a mapping, a missing or unknown field, or a field of the wrong type.
        """
        if not isinstance(data, dict):
            raise JobError("a build job must be a JSON object", stage="job")
        fields = cls.__dataclass_fields__
        unknown = sorted(set(data) - set(fields))
        missing = sorted(set(fields) - set(data))
        if unknown or missing:
            raise JobError(f"build job fields: missing {missing}, unknown {unknown}", stage="job")
        for name in fields:
            value = data[name]
            expected = int if name == "weight_bytes" else (list, tuple) if name == "reasons" else str
            if not isinstance(value, expected) or isinstance(value, bool):
                raise JobError(f"build job field '{name}' has the wrong type", stage="job")
        if not all(isinstance(r, str) for r in data["reasons"]):
            raise JobError("build job field 'reasons' must be a list of strings", stage="job")
        for name in ("source", "target", "draft_repo", "target_repo"):
            if not re.fullmatch(r"[\w.-]+/[\w.-]+", data[name]):
                raise JobError(f"build job field '{name}' is not a repo id: {data[name][:80]!r}", stage="job")
        return cls(**{**data, "reasons": tuple(data["reasons"])})

    def to_dict(self) -> dict:
        return {**asdict(self), "reasons": list(self.reasons)}

    def candidate(self) -> Candidate:
        """The pipeline's record for this job (the build classifies the downloaded files again itself)."""
        return Candidate(repo_id=self.source, revision=self.revision, kind=self.kind, draft_format=self.format,
                         target_repo=self.target, target_revision=self.target_revision, target_is_vlm=False,
                         target_how="plan", weight_bytes=self.weight_bytes)


@dataclass(frozen=True)
class MatrixEntry:
    job: BuildJob
    name: str
    artifact: str
    runner: str
    runs_on: str | list[str]
    peak_bytes: int

    def to_dict(self) -> dict:
        return {"name": self.name, "artifact": self.artifact, "runner": self.runner, "runs_on": self.runs_on,
                "peak_bytes": self.peak_bytes, "job": self.job.to_dict()}


@dataclass(frozen=True)
class MatrixPlan:
    """What the plan job hands on: the entries to build, the card refreshes, and the report so far."""

    entries: list[MatrixEntry]
    card_refresh: list[str]  # source repo ids whose published cards need re-rendering
    report: RunReport

    def matrix(self) -> dict:
        """GitHub's matrix JSON; empty on a dry run (the entries are still in the plan record)."""
        return {"include": [] if self.report.dry_run else [e.to_dict() for e in self.entries]}

    def to_dict(self) -> dict:
        return {"schema": PLAN_SCHEMA, "dry_run": self.report.dry_run,
                "entries": [e.to_dict() for e in self.entries], "card_refresh": self.card_refresh,
                "report": self.report.to_dict()}


def artifact_name(source: str) -> str:
    """An artifact name unique per source and legal for actions/upload-artifact."""
    return "bundle-" + _ARTIFACT_UNSAFE.sub("_", source.replace("/", "--"))


def plan_matrix(reader: Hub, recipe: Recipe, options: RunOptions) -> MatrixPlan:
    """Discover and plan like `run`, then lay the builds out as matrix entries (no weights downloaded)."""
    report = RunReport(dry_run=options.dry_run)
    requests_before = REQUESTS.count
    decisions, candidates = plan_run(reader, recipe, options, report)
    reasons = {d.listing.repo_id: d.reasons for d in decisions}
    card_refresh = [d.listing.repo_id for d in decisions if d.action == plan.CARD_ONLY and d.published is not None]
    entries: list[MatrixEntry] = []
    for candidate in candidates:
        job = BuildJob.from_candidate(candidate, reasons.get(candidate.repo_id, ()), recipe)
        # Only the draft + target sum is known here: counted as one target, which over-estimates a little.
        runner, estimate, why = choose_runner(0, job.weight_bytes, recipe.runners)
        peak = estimate.peak_memory_bytes
        if runner is None:
            report.outcomes.append(Outcome(job.source, job.revision, SKIPPED, why))
            continue
        entries.append(MatrixEntry(job=job, name=job.source.split("/")[-1], artifact=artifact_name(job.source),
                                   runner=runner.name, runs_on=runner.runs_on, peak_bytes=peak))
    limit = recipe.runners.max_entries
    for entry in entries[limit:]:
        report.deferred.append(entry.job.source)
        report.outcomes.append(Outcome(entry.job.source, entry.job.revision, DEFERRED,
                                       f"over the {limit}-entry matrix limit: built by the next run"))
    entries = entries[:limit]
    if options.dry_run:
        for entry in entries:
            report.outcomes.append(Outcome(entry.job.source, entry.job.revision, PLANNED,
                                           f"build on {entry.runner}: {'; '.join(entry.job.reasons)} "
                                           f"(target {entry.job.target})"))
        for source in card_refresh:
            report.outcomes.append(Outcome(source, _sha(decisions, source), PLANNED, "card: card template changed"))
    report.hub_requests = REQUESTS.count - requests_before
    return MatrixPlan(entries=entries, card_refresh=card_refresh, report=report)


def build_job(reader: Hub, recipe: Recipe, job: BuildJob, out: Path, *, work: Path | None = None,
              keep_work: bool = False) -> Outcome:
    """Build one matrix entry into the bundle folder `out`, and record the outcome in `out/build-outcome.json`.

    `out` holds a publishable bundle only when the outcome is `built`; otherwise it holds the outcome record
    (and, for a failed validation gate, the bundle that failed, which publish refuses).
    """
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-job-", dir=work))
    try:
        failures, built = fetch_and_build(reader, recipe, job.target, job.target_revision, [job.candidate()],
                                          scratch, keep_work=keep_work)
        if out.exists():
            shutil.rmtree(out)
        if failures:
            outcome = failures[0]
        else:
            (result,) = built
            if result.bundle is not None:
                shutil.move(str(result.bundle.root), str(out))
            if result.error is not None:
                status = SKIPPED if isinstance(result.error, Skip) else FAILED
                outcome = Outcome(job.source, job.revision, status, f"{result.error.stage}: {result.error.message}")
            else:
                outcome = Outcome(job.source, job.revision, BUILT, "", [job.draft_repo, job.target_repo])
    finally:
        if not keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTCOME_FILE).write_text(json.dumps({"job": job.to_dict(), "outcome": asdict(outcome)}, indent=2) + "\n",
                                    encoding="utf-8")
    return outcome


def load_plan(path: Path) -> MatrixPlan:
    """Read the plan record the plan job wrote (`plan --matrix --out`).

    Raises:
        JobError: unreadable, or not a plan record of this schema.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobError(f"cannot read the plan record: {exc}", subject=str(path), stage="publish") from None
    if not isinstance(data, dict) or data.get("schema") != PLAN_SCHEMA:
        raise JobError(f"not a plan record of schema {PLAN_SCHEMA}", subject=str(path), stage="publish")
    raw = data.get("report", {})
    report = RunReport(outcomes=[Outcome(**o) for o in raw.get("outcomes", [])],
                       hub_requests=raw.get("hub_requests", 0), dry_run=bool(data.get("dry_run")),
                       deferred=list(raw.get("deferred", [])))
    try:
        entries = [MatrixEntry(job=BuildJob.from_dict(e.get("job")), name=e["name"], artifact=e["artifact"],
                               runner=e["runner"], runs_on=e["runs_on"], peak_bytes=e["peak_bytes"])
                   for e in data.get("entries", [])]
    except (AttributeError, KeyError, TypeError) as exc:
        raise JobError(f"malformed plan entry: {exc}", subject=str(path), stage="publish") from None
    for entry in entries:
        if entry.artifact != artifact_name(entry.job.source):  # it names a folder: nothing else may be there
            raise JobError(f"plan entry artifact {entry.artifact!r} does not match its source", subject=str(path),
                           stage="publish")
    return MatrixPlan(entries=entries, card_refresh=list(data.get("card_refresh", [])), report=report)


def publish_run(writer: Hub, recipe: Recipe, bundles: Path | None, planned: MatrixPlan | None) -> RunReport:
    """The publish job: card refreshes from the plan, then every bundle; returns the whole run's report.

    With a plan, each entry's bundle is looked up as `bundles/<artifact>` and an entry without one is a failure
    (its build job died before uploading anything). Without a plan, every bundle folder under `bundles` is
    published. Never loads a checkpoint: it reads JSON and uploads files.
    """
    report = RunReport(outcomes=list(planned.report.outcomes) if planned else [],
                       deferred=list(planned.report.deferred) if planned else [])
    requests_before = REQUESTS.count
    if planned is not None and planned.report.dry_run:
        report.dry_run = True
        return report
    for source in planned.card_refresh if planned else []:
        with log.group(f"refresh cards of {source}"):
            _card_refresh(report, writer, recipe, source)
    if planned is not None:
        folders = [(e.job.source, e.job.revision, (bundles / e.artifact) if bundles else None)
                   for e in planned.entries]
    else:
        found = sorted(p.parent for p in (bundles.glob("*/" + OUTCOME_FILE) if bundles else []))
        found += sorted(p.parent for p in (bundles.glob("*/" + PROVENANCE_FILE) if bundles else [])
                        if not (p.parent / OUTCOME_FILE).exists())
        folders = [(None, None, folder) for folder in found]
    for source, revision, folder in folders:
        with log.group(f"publish {source or folder}"):
            _publish_folder(report, writer, recipe, source, revision, folder)
    # The plan's requests and this job's; each build job's downloads are in its own log.
    report.hub_requests = (planned.report.hub_requests if planned else 0) + REQUESTS.count - requests_before
    return report


def _publish_folder(report: RunReport, writer: Hub, recipe: Recipe, source: str | None, revision: str | None,
                    folder: Path | None) -> None:
    record_path = folder / OUTCOME_FILE if folder is not None else None
    if record_path is not None and record_path.is_file():
        try:
            recorded = Outcome(**json.loads(record_path.read_text(encoding="utf-8"))["outcome"])
        except (ValueError, KeyError, TypeError):
            report.outcomes.append(Outcome(source or str(folder), revision, FAILED,
                                           f"unreadable {OUTCOME_FILE} in the build job's artifact"))
            return
        source, revision = source or recorded.source, revision or recorded.revision
        if recorded.status != BUILT:
            report.outcomes.append(recorded)
            return
    elif folder is None or not (folder / PROVENANCE_FILE).is_file():
        report.outcomes.append(Outcome(source or str(folder), revision, FAILED,
                                       "build job left no bundle (see that job's log)"))
        return
    try:
        built = read_provenance(folder).get("source", {})
    except (OSError, ValueError, AttributeError):
        built = {}
    if (built.get("repo"), built.get("revision")) != (source or built.get("repo"), revision or built.get("revision")):
        report.outcomes.append(Outcome(source or str(folder), revision, FAILED,
                                       f"bundle holds {built.get('repo')}@{str(built.get('revision'))[:7]}, not the "
                                       "planned source revision: not published"))
        return
    try:
        result = publish_bundle(writer, folder, recipe)
    except BotError as error:
        status = SKIPPED if isinstance(error, Skip) else FAILED
        report.outcomes.append(Outcome(source or error.subject or str(folder), revision, status, error.message))
        return
    for repo, commit in result.commits.items():
        report.commits.append({"repo": repo, "commit": commit})
    status = UP_TO_DATE if result.status == PUBLISH_UP_TO_DATE else PUBLISHED
    report.outcomes.append(Outcome(source or result.draft_repo, revision, status, "",
                                   [result.draft_repo, result.target_repo]))


def _card_refresh(report: RunReport, writer: Hub, recipe: Recipe, source: str) -> None:
    draft_repo = plan.draft_output_repo(recipe, source)
    try:
        published = plan.read_published(writer, draft_repo)
        if published is None:
            raise Failure(f"{draft_repo} has no provenance to re-render the card from", subject=source,
                          stage="publish")
        revision = published.get("source", {}).get("revision")
        result = refresh_cards(writer, published, recipe)
    except BotError as error:
        report.outcomes.append(Outcome(source, None, SKIPPED if isinstance(error, Skip) else FAILED, error.message))
        return
    for repo, commit in result.commits.items():
        report.commits.append({"repo": repo, "commit": commit})
    report.outcomes.append(Outcome(source, revision, PUBLISHED if result.commits else UP_TO_DATE, "card refreshed",
                                   [result.draft_repo, result.target_repo]))


def _sha(decisions: list[plan.Decision], source: str) -> str | None:
    return next((d.listing.sha for d in decisions if d.listing.repo_id == source), None)

