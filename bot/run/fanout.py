"""The GitHub Actions fan-out of one run (DESIGN §8): plan a matrix, build one entry per runner, publish once.

`dflash-bot run` does all of this in one process. On Actions the stages run as separate jobs so that builds go to
runners sized for them and so that the trust boundary (DESIGN §3) is a job boundary:

- `plan_matrix` (plan job, read token): discovers and plans exactly like `run`, and turns each `BuildJob` into a
  matrix entry with a runner class from its estimated peak memory. Skips, up-to-date sources, builds no runner
  class can take and entries over the 256-entry limit (deferred to the next run) are kept in the plan record,
  so the final report lists every source. Card-only refreshes are not matrix entries: they need the write
  token and no checkpoint, so the publish job performs them from the plan record.
- `build_job` (one build job per entry, read token only): downloads the pinned revisions and builds one bundle,
  then writes `build-outcome.json` beside it, so a failed or skipped build still reaches the report.
- `publish_run` (publish job, write token, never loads a checkpoint): refreshes cards, publishes every bundle
  (checking it is the build its entry planned, and re-checking the Hub first) and reports entries whose build job
  left no bundle.

The hand-off files are typed records (`MatrixPlan`, `BuildOutcomeFile`) parsed with pydantic where they enter.
"""

from __future__ import annotations

import functools
import re
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from bot.build.bundle import Bundle
from bot.core import log
from bot.core.errors import BotError, Failure
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe, RunnerSettings
from bot.core.record import BuildRecord
from bot.hub import REQUESTS, Hub
from bot.plan import planner as plan
from bot.plan.sizing import choose_runner
from bot.publish.card import template_fingerprint
from bot.publish.publisher import refresh_cards
from bot.run.handoff import OUTCOME_FILE, BuildOutcomeFile, OutcomeRecord, artifact_name, read_built
from bot.run.pipeline import (
    RunMemory,
    RunOptions,
    fetch_and_build,
    finish_status,
    group_jobs,
    guard,
    guard_group,
    load_memory,
    plan_run,
    publish_jobs,
)
from bot.run.report import RunReport

PLAN_SCHEMA = 2


class JobError(BotError):
    """A `--job` or plan record that is not what `plan --matrix` writes; fix the caller, not the checkpoint."""

    exit_code = 4


class _Handoff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MatrixEntry(_Handoff):
    """One build runner: a target and the drafts of it to build there (the target is downloaded and exported once)."""

    jobs: list[plan.BuildJob] = Field(min_length=1)
    name: str
    artifact: str
    runner: str
    runs_on: str | list[str]
    peak_bytes: int  # estimated peak memory (bot.plan.sizing, fitted in docs/scale.md)
    peak_disk_bytes: int = 0
    parallel_exports: bool = True  # whether the draft and target exports fit the class's memory side by side


class PlanReport(_Handoff):
    outcomes: list[OutcomeRecord]
    hub_requests: int
    deferred: list[str]


class MatrixPlan(_Handoff):
    """What the plan job hands on: the entries to build, the card refreshes, and the report so far."""

    schema_version: int = PLAN_SCHEMA
    recipe: str
    recipe_fingerprint: str
    dry_run: bool
    entries: list[MatrixEntry]
    card_refresh: list[str]  # source repo ids whose published cards need re-rendering
    report: PlanReport
    # For the status page the publish job writes: what the listing held, what planning reported from the
    # status repo's memory, and the records of the sources it found up to date.
    only: str | None = None
    toolchain_fp: str | None = None  # the memory's toolchain fingerprint (the publish job imports no exporter)
    listed: list[str] = Field(default_factory=list)
    remembered: list[str] = Field(default_factory=list)
    up_to_date: list[BuildRecord] = Field(default_factory=list)

    def matrix(self) -> dict:
        """GitHub's matrix JSON; empty on a dry run (the entries are still in the plan record)."""
        return {"include": [] if self.dry_run else [e.model_dump(mode="json") for e in self.entries]}

    def run_report(self) -> RunReport:
        return RunReport(
            outcomes=[o.outcome() for o in self.report.outcomes],
            hub_requests=self.report.hub_requests,
            dry_run=self.dry_run,
            deferred=list(self.report.deferred),
        )


def plan_matrix(reader: Hub, recipe: Recipe, options: RunOptions) -> MatrixPlan:
    """Discover and plan like `run`, then lay the builds out as matrix entries (no weights downloaded)."""
    report = RunReport(dry_run=options.dry_run)
    requests_before = REQUESTS.count
    state = RunMemory()
    decisions, jobs = plan_run(reader, recipe, options, report, state)
    card_refresh = [d.listing.repo_id for d in decisions if d.action == plan.Action.CARD and d.published is not None]
    entries: list[MatrixEntry] = []
    for (target, _), members in group_jobs(jobs).items():
        for part, group in enumerate(_fit(members, recipe.runners)):
            runner, estimate, why = _runner_for(group, recipe.runners)
            if runner is None:
                for job in group:
                    report.add(Outcome(job.source, job.revision, Status.SKIPPED, why))
                continue
            suffix = f"-{part + 1}" if part else ""
            entries.append(
                MatrixEntry(
                    jobs=group,
                    name=target.split("/")[-1] + suffix,
                    artifact=artifact_name(target) + suffix,
                    runner=runner.name,
                    runs_on=runner.runs_on,
                    peak_bytes=estimate.peak_memory_bytes,
                    peak_disk_bytes=estimate.peak_disk_bytes,
                    parallel_exports=estimate.parallel_exports,
                )
            )
    limit = recipe.runners.max_entries
    for entry in entries[limit:]:
        for job in entry.jobs:
            report.deferred.append(job.source)
            report.add(
                Outcome(
                    job.source,
                    job.revision,
                    Status.DEFERRED,
                    f"over the {limit}-entry matrix limit: built by the next run",
                )
            )
    entries = entries[:limit]
    if options.dry_run:
        for entry in entries:
            for job in entry.jobs:
                report.add(
                    Outcome(
                        job.source,
                        job.revision,
                        Status.PLANNED,
                        f"build on {entry.runner}: {'; '.join(job.reasons)} (target {job.target})",
                    )
                )
        for decision in decisions:
            if decision.listing.repo_id in card_refresh:
                report.add(
                    Outcome(
                        decision.listing.repo_id, decision.listing.sha, Status.PLANNED, "card: card template changed"
                    )
                )
    return MatrixPlan(
        recipe=recipe.name,
        recipe_fingerprint=recipe.fingerprint(),
        dry_run=options.dry_run,
        entries=entries,
        card_refresh=card_refresh,
        only=options.only,
        listed=state.listed,
        toolchain_fp=state.memory.toolchain_fp if state.memory else None,
        remembered=sorted(state.remembered),
        up_to_date=[
            built.published_as(repos, built.card.template_fingerprint if built.card else "")
            for built, repos in state.published.values()
        ],
        report=PlanReport(
            outcomes=[OutcomeRecord.of(o) for o in report.outcomes],
            hub_requests=REQUESTS.count - requests_before,
            deferred=report.deferred,
        ),
    )


def build_jobs(
    reader: Hub,
    recipe: Recipe,
    jobs: list[plan.BuildJob],
    out: Path,
    *,
    work: Path | None = None,
    keep_work: bool = False,
) -> list[Outcome]:
    """Build one matrix entry (a target and drafts of it) into `out/<draft artifact>/`, one folder per draft.

    Each draft folder holds `build-outcome.json`, plus a publishable bundle when the outcome is `built` (for a
    failed validation gate, the bundle that failed, which publish refuses).
    """
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dflash-bot-job-", dir=work))
    report = RunReport()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        built: list = []
        guard_group(
            report,
            jobs,
            lambda: built.extend(fetch_and_build(reader, recipe, jobs, scratch, report, keep_work=keep_work)),
        )
        outcomes = {o.source: o for o in report.outcomes}
        for job, result in built:
            folder = out / artifact_name(job.source)
            if result.bundle is not None:
                shutil.move(str(result.bundle.root), str(folder))
            if result.error is not None:
                outcomes[job.source] = Outcome.of_error(job.source, job.revision, result.error)
            else:
                outcomes[job.source] = Outcome(
                    job.source, job.revision, Status.BUILT, "", [job.draft_repo, job.target_repo]
                )
    finally:
        if not keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    for job in jobs:
        folder = out / artifact_name(job.source)
        folder.mkdir(parents=True, exist_ok=True)
        outcome = outcomes.get(job.source) or Outcome(job.source, job.revision, Status.FAILED, "build stopped")
        (folder / OUTCOME_FILE).write_text(
            BuildOutcomeFile(job=job, outcome=OutcomeRecord.of(outcome)).model_dump_json(indent=2) + "\n",
            encoding="utf-8",
        )
    return [
        outcomes.get(job.source) or Outcome(job.source, job.revision, Status.FAILED, "build stopped") for job in jobs
    ]


def parse_jobs(text: str) -> list[plan.BuildJob]:
    """A `--job` argument: one matrix entry's jobs (a list), the whole entry, or one job, as `plan --matrix` wrote
    them; all of one target.

    Raises:
        JobError: not JSON, not build jobs (a field missing, unknown or of the wrong type), or jobs of more than
            one target revision.
    """
    jobs: list[plan.BuildJob] | None = None
    errors: list[ValidationError] = []
    for model in (_JobList, MatrixEntry, plan.BuildJob):
        try:
            parsed = model.model_validate_json(text)
        except ValidationError as exc:
            errors.append(exc)
            continue
        jobs = (
            [parsed]
            if isinstance(parsed, plan.BuildJob)
            else list(parsed.root if isinstance(parsed, _JobList) else parsed.jobs)
        )
        break
    if jobs is None:
        first = errors[-1].errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(job)"
        raise JobError(f"--job is not a build job from `plan --matrix`: {where}: {first['msg']}", stage="job") from None
    if not jobs or len({(j.target, j.target_revision) for j in jobs}) != 1:
        raise JobError("--job must hold the drafts of one target revision", stage="job")
    return jobs


class _JobList(RootModel[list[plan.BuildJob]]):
    model_config = ConfigDict(frozen=True)


def load_plan(path: Path, recipe: Recipe) -> MatrixPlan:
    """Read the plan record the plan job wrote (`plan --matrix --out`), for the recipe this job runs.

    Raises:
        JobError: unreadable, not a plan record of this schema, an entry whose artifact name does not match its
            source, or a plan made from another recipe.
    """
    try:
        planned = MatrixPlan.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise JobError(f"cannot read the plan record: {exc.strerror}", subject=str(path), stage="publish") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(plan)"
        raise JobError(
            f"not a plan record of schema {PLAN_SCHEMA}: {where}: {first['msg']}", subject=str(path), stage="publish"
        ) from None
    if planned.schema_version != PLAN_SCHEMA:
        raise JobError(
            f"plan record schema {planned.schema_version}, this bot reads {PLAN_SCHEMA}",
            subject=str(path),
            stage="publish",
        )
    if (planned.recipe, planned.recipe_fingerprint) != (recipe.name, recipe.fingerprint()):
        raise JobError(
            f"the plan was made from recipe {planned.recipe} ({planned.recipe_fingerprint}), not from "
            f"{recipe.name} ({recipe.fingerprint()}): nothing published from it",
            subject=str(path),
            stage="publish",
        )
    for entry in planned.entries:
        # The artifact names a folder: nothing but the entry's own target may be there.
        base = artifact_name(entry.jobs[0].target)
        if (
            not re.fullmatch(re.escape(base) + r"(-\d+)?", entry.artifact)
            or len({(job.target, job.target_revision) for job in entry.jobs}) != 1
        ):
            raise JobError(
                f"plan entry artifact {entry.artifact!r} does not match its target", subject=str(path), stage="publish"
            )
    return planned


def publish_run(writer: Hub, recipe: Recipe, bundles: Path | None, planned: MatrixPlan | None) -> RunReport:
    """The publish job: card refreshes from the plan, then every bundle; returns the whole run's report.

    With a plan, each entry's bundle is looked up as `bundles/<artifact>` and an entry without one is a failure
    (its build job died before uploading anything). Without a plan, every bundle folder under `bundles` is
    published (its outcome file names the job). Never loads a checkpoint: it reads JSON and uploads files.
    """
    report = planned.run_report() if planned else RunReport()
    requests_before = REQUESTS.count
    if planned is not None and planned.dry_run:
        return report
    state = (
        RunMemory(
            listed=list(planned.listed),
            remembered=set(planned.remembered),
            published={r.source.repo or "": (r, r.repos) for r in planned.up_to_date if r.repos},
        )
        if planned
        else RunMemory()
    )
    for source in planned.card_refresh if planned else []:
        with log.group(f"refresh cards of {source}"):
            guard(report, source, None, functools.partial(_card_refresh, report, state, writer, recipe, source))
    if planned is not None:
        groups = [(entry.jobs, (bundles / entry.artifact) if bundles else None) for entry in planned.entries]
    else:
        groups = [([], p) for p in sorted(bundles.iterdir()) if p.is_dir()] if bundles else []
    for jobs, folder in groups:
        with log.group(f"publish {folder.name if folder else jobs[0].target}"):
            ready = _check_artifact(report, jobs, folder)
            if ready:
                guard_group(
                    report,
                    [job for job, _ in ready],
                    functools.partial(publish_jobs, report, writer, recipe, ready, state),
                )
    if planned is not None:  # the status page needs the plan's view of every listed source
        state.memory = load_memory(
            writer, recipe, template_fingerprint(), RunOptions(), toolchain_fp=planned.toolchain_fp
        )
        finish_status(report, state, writer, recipe, RunOptions(only=planned.only))
    # The plan's requests and this job's; each build job's downloads are in its own log.
    report.hub_requests += REQUESTS.count - requests_before
    return report


def _check_artifact(
    report: RunReport, jobs: list[plan.BuildJob], folder: Path | None
) -> list[tuple[plan.BuildJob, Bundle]]:
    """The bundles of one build job's artifact that are the builds its matrix entry planned; every other draft
    gets its outcome here (built elsewhere, failed, missing, damaged, or not what was planned)."""
    if not jobs and folder is not None:  # no plan: what the artifact's outcome files say
        jobs = []
        for path in sorted(folder.glob("*/" + OUTCOME_FILE)):
            try:
                jobs.append(BuildOutcomeFile.model_validate_json(path.read_bytes()).job)
            except (OSError, ValidationError):
                report.add(
                    Outcome(str(path.parent), None, Status.FAILED, f"unreadable {OUTCOME_FILE} in a build artifact")
                )
    ready = []
    for job in jobs:
        bundle = read_built(report, job, folder / artifact_name(job.source) if folder is not None else None)
        if bundle is not None:
            ready.append((job, bundle))
    return ready


def _card_refresh(report: RunReport, state: RunMemory, writer: Hub, recipe: Recipe, source: str) -> None:
    draft_repo = plan.draft_output_repo(recipe.publish, source)
    published = writer.draft_record(draft_repo)
    if published is None:
        raise Failure(f"{draft_repo} has no record to re-render the card from", subject=source, stage="publish")
    result = refresh_cards(writer, published, private=recipe.publish.private)
    report.add_published(source, published.source.revision, result, "card refreshed")
    state.published[source] = (published, result.repos)


def _group_bytes(jobs: list[plan.BuildJob]) -> tuple[int, int]:
    """(draft bytes, target bytes) one build runner holds: every draft of the group, and the target once."""
    return sum(job.draft_bytes for job in jobs), jobs[0].target_bytes


def _runner_for(jobs: list[plan.BuildJob], runners: RunnerSettings):
    """`choose_runner` for one entry (a target reused from the Hub is downloaded as its IR, not exported)."""
    return choose_runner(*_group_bytes(jobs), runners, target_reused=jobs[0].reuse_target is not None)


def _fit(jobs: list[plan.BuildJob], runners: RunnerSettings) -> list[list[plan.BuildJob]]:
    """The group as one entry when a runner class takes it whole, else one entry per draft."""
    if len(jobs) == 1 or _runner_for(jobs, runners)[0] is not None:
        return [jobs]
    return [[job] for job in jobs]
