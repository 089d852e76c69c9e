"""The GitHub Actions split of the one path (`bot.run.pipeline`, docs/design.md §8): plan a matrix, build one entry per
runner, publish once.

`dflash-bot run` walks the path in one process tree. On Actions its steps run as separate jobs, so that builds go to
runners sized for them and the trust boundary (docs/design.md §3) is a job boundary; each job calls the same step
functions as `run`, in the same order:

- plan job (`plan_matrix`, read token): `plan_step`, then each target group laid out as matrix entries with a
  runner class from its estimated peak memory. Skips, up-to-date sources, builds no runner class can take and
  entries over the 256-entry limit (deferred to the next run) are kept in the plan record, so the final report
  lists every source. Card-only refreshes are not matrix entries: they need the write token and no checkpoint, so
  the plan record carries the records to re-render and the publish job refreshes them.
- build job (`dflash-bot build --job`, read token only): `build_and_hand_off`, exactly as `run`'s builder does; a
  failed or skipped build still leaves its `build-outcome.json`, so it reaches the report.
- publish job (`publish_run`, write token, never loads a checkpoint): `publish_step` on the downloaded artifacts
  (each bundle held to the plan, never to its own record: the job it was built for, its revisions, weight format,
  reused or official target and file set, `bot.run.handoff.read_group`; one bundle that is not what the plan made
  and nothing of its group is published; the Hub re-checked first; an entry whose build job left nothing is a
  failure), then `finish_status`. With a `fetch` (`--artifacts-from-run` on Actions: `gh_fetch`) the job's disk
  holds one group: each entry's artifact is downloaded just before its group is checked and published, and deleted
  before the next one is downloaded.

The hand-off files are typed records (`MatrixPlan`, `bot.run.handoff.BuildOutcomeFile`) parsed with pydantic where
they enter; they pass between the jobs of one workflow run only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from bot.core import log
from bot.core.errors import BotError, JobError, Stage
from bot.core.fingerprints import Fingerprints, template_fingerprint
from bot.core.outcome import Outcome, Status
from bot.core.recipe import Recipe
from bot.core.record import BuildRecord
from bot.core.runners import RunnerClass
from bot.hub.client import Hub
from bot.hub.transport import REQUESTS
from bot.plan.job import BuildJob, OutputRepos, group_jobs
from bot.plan.planner import card_refreshes
from bot.plan.sizing import BuildEstimate, BuildTime, choose_runner, gb, minutes, pair_of
from bot.plan.step import RunOptions
from bot.run.handoff import OUTCOME_FILE, BuildOutcomeFile, artifact_name, read_group
from bot.run.pipeline import finish_status, publish_step
from bot.run.report import RunReport
from bot.run.run_side import RunMemory, load_memory, plan_step, report_planned

__all__ = [
    "JobError",
    "MatrixEntry",
    "MatrixPlan",
    "PlanReport",
    "gh_fetch",
    "load_plan",
    "parse_jobs",
    "plan_matrix",
    "publish_run",
]

Fetch = Callable[[str, Path], None]
"""Download the artifact named by the first argument into the folder named by the second (which does not exist yet).
Raises OSError or subprocess.CalledProcessError when it cannot: the entry is then published as one whose build job
left nothing."""

PLAN_SCHEMA = 3  # 3: jobs hold their candidate, outcomes and card refreshes as the bot's own records


class _Handoff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MatrixEntry(_Handoff):
    """One build runner: a target and the drafts of it to build there (the target is downloaded and exported once)."""

    jobs: list[BuildJob] = Field(min_length=1)
    name: str
    artifact: str
    runner: str
    runs_on: str | list[str]
    peak_bytes: int  # estimated peak memory (bot.plan.sizing, fitted in docs/scale.md)
    peak_disk_bytes: int = 0
    parallel_exports: bool = True  # whether the draft and target exports fit the class's memory side by side
    seconds: int = 0  # estimated seconds of the build's stages on the class (the download's deadline beside them)

    def where(self) -> str:
        """The class and its estimates, as the plan table names where a build runs."""
        return (
            f"{self.runner} (memory {gb(self.peak_bytes)}, disk {gb(self.peak_disk_bytes)}, "
            f"about {minutes(self.seconds)} of stages)"
        )


class PlanReport(_Handoff):
    outcomes: list[Outcome]
    hub_requests: int
    deferred: list[str]


class MatrixPlan(_Handoff):
    """What the plan job hands on: the entries to build, the card refreshes, and the report so far."""

    schema_version: int = PLAN_SCHEMA
    recipe: str
    recipe_fingerprint: str
    dry_run: bool
    entries: list[MatrixEntry]
    card_refresh: list[BuildRecord]  # the published records whose cards need re-rendering, as planning read them
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
            outcomes=list(self.report.outcomes),
            hub_requests=self.report.hub_requests,
            dry_run=self.dry_run,
            deferred=list(self.report.deferred),
        )

    def run_memory(self) -> RunMemory:
        """What planning learned for the status page, as the publish job's `finish_status` needs it."""
        published = {r.source.repo or "": (r, r.repos) for r in self.up_to_date if r.repos}
        return RunMemory(listed=list(self.listed), remembered=set(self.remembered), published=published)


def plan_matrix(reader: Hub, recipe: Recipe, options: RunOptions) -> MatrixPlan:
    """The plan job: discover and plan like `run` (`plan_step`), then lay the builds out as matrix entries.

    Downloads no weights. On a dry run the entries' builds and the card refreshes are reported as planned.
    """
    report = RunReport(dry_run=options.dry_run)
    requests_before = REQUESTS.count
    state = RunMemory()
    decisions, jobs = plan_step(reader, recipe, options, report, state)
    card_refresh = card_refreshes(decisions)
    entries = _entries(report, group_jobs(jobs).values(), recipe)
    limit = recipe.runners.max_entries
    for entry in entries[limit:]:
        for job in entry.jobs:
            report.deferred.append(job.source)
            reason = f"over the {limit}-entry matrix limit: built by the next run"
            report.add(Outcome(job.source, job.revision, Status.DEFERRED, reason))
    entries = entries[:limit]
    if options.dry_run:
        report_planned(report, [(job, entry.where()) for entry in entries for job in entry.jobs], card_refresh)
    return MatrixPlan(
        recipe=recipe.name,
        recipe_fingerprint=recipe.fingerprint(),
        dry_run=options.dry_run,
        entries=entries,
        card_refresh=card_refresh,
        only=options.only,
        listed=state.listed,
        toolchain_fp=state.memory.fingerprints.toolchain if state.memory else None,
        remembered=sorted(state.remembered),
        up_to_date=[
            built.published_as(repos, built.card.template_fingerprint if built.card else "")
            for built, repos in state.published.values()
        ],
        report=PlanReport(
            outcomes=list(report.outcomes), hub_requests=REQUESTS.count - requests_before, deferred=report.deferred
        ),
    )


def _entries(report: RunReport, groups: Iterable[list[BuildJob]], recipe: Recipe) -> list[MatrixEntry]:
    """One matrix entry per target group (or per draft, when no runner class takes the group whole); a build no
    class takes is skipped with the class to add."""
    entries: list[MatrixEntry] = []
    for members in groups:
        target = members[0].target
        for part, (group, (runner, estimate, why)) in enumerate(_fit(members, recipe)):
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
                    seconds=estimate.seconds,
                )
            )
    return entries


def parse_jobs(text: str) -> list[BuildJob]:
    """A `--job` argument: one matrix entry's jobs (a list), the whole entry, or one job, as `plan --matrix` wrote
    them; all of one target.

    Raises:
        JobError: not JSON, not build jobs (a field missing, unknown or of the wrong type), or jobs of more than
            one target revision.
    """
    jobs: list[BuildJob] | None = None
    errors: list[ValidationError] = []
    for model in (_JobList, MatrixEntry, BuildJob):
        try:
            parsed = model.model_validate_json(text)
        except ValidationError as exc:
            errors.append(exc)
            continue
        jobs = (
            [parsed]
            if isinstance(parsed, BuildJob)
            else list(parsed.root if isinstance(parsed, _JobList) else parsed.jobs)
        )
        break
    if jobs is None:
        first = errors[-1].errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(job)"
        raise JobError(
            f"--job is not a build job from `plan --matrix`: {where}: {first['msg']}", stage=Stage.JOB
        ) from None
    if any(not j.planned for j in jobs):
        raise JobError("--job names a build without output repos: `plan --matrix` never writes one", stage=Stage.JOB)
    if not jobs or len({(j.target, j.target_revision) for j in jobs}) != 1:
        raise JobError("--job must hold the drafts of one target revision", stage=Stage.JOB)
    return jobs


class _JobList(RootModel[list[BuildJob]]):
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
        raise JobError(f"cannot read the plan record: {exc.strerror}", subject=str(path), stage=Stage.PUBLISH) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(plan)"
        raise JobError(
            f"not a plan record of schema {PLAN_SCHEMA}: {where}: {first['msg']}",
            subject=str(path),
            stage=Stage.PUBLISH,
        ) from None
    if planned.schema_version != PLAN_SCHEMA:
        raise JobError(
            f"plan record schema {planned.schema_version}, this bot reads {PLAN_SCHEMA}",
            subject=str(path),
            stage=Stage.PUBLISH,
        )
    if (planned.recipe, planned.recipe_fingerprint) != (recipe.name, recipe.fingerprint()):
        raise JobError(
            f"the plan was made from recipe {planned.recipe} ({planned.recipe_fingerprint}), not from "
            f"{recipe.name} ({recipe.fingerprint()}): nothing published from it",
            subject=str(path),
            stage=Stage.PUBLISH,
        )
    for entry in planned.entries:
        # The artifact names a folder: nothing but the entry's own target may be there.
        base = artifact_name(entry.jobs[0].target)
        if (
            not re.fullmatch(re.escape(base) + r"(-\d+)?", entry.artifact)
            or len({(job.target, job.target_revision) for job in entry.jobs}) != 1
        ):
            raise JobError(
                f"plan entry artifact {entry.artifact!r} does not match its target",
                subject=str(path),
                stage=Stage.PUBLISH,
            )
    return planned


def publish_run(
    writer: Hub,
    recipe: Recipe,
    bundles: Path | None,
    planned: MatrixPlan | None,
    fetch: Fetch | None = None,
    *,
    install: str | None = None,
) -> RunReport:
    """The publish job: `publish_step` (the plan's card refreshes, then every entry's bundles), then `finish_status`;
    returns the whole run's report.

    With a plan, each entry's bundles are looked up in `bundles/<artifact>` and an entry without them is a failure
    (its build job died before uploading anything). With a plan and `fetch`, `bundles` starts empty: each entry's
    artifact is fetched into `bundles/<artifact>`, held to the plan, published and deleted before the next entry's is
    fetched, so the disk holds one group at a time. Without a plan, every artifact folder under `bundles` is
    published (its outcome files name the jobs). Never loads a checkpoint: it reads JSON and uploads files.
    """
    report = planned.run_report() if planned else RunReport()
    requests_before = REQUESTS.count
    if planned is not None and planned.dry_run:
        return report
    state = planned.run_memory() if planned else RunMemory()
    built: Iterable[tuple[list[BuildJob], Path | None]]
    if planned is not None and fetch is not None and bundles is not None:
        publish_step(report, state, writer, recipe, planned.card_refresh, [], install=install)
        for entry in planned.entries:
            folder = bundles / entry.artifact
            _fetch_one(fetch, entry.artifact, folder)
            try:
                held_one = _held_to_plan(report, recipe, [(entry.jobs, folder)])
                publish_step(report, state, writer, recipe, [], held_one, install=install)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    else:
        if planned is not None:
            built = [(entry.jobs, bundles / entry.artifact if bundles else None) for entry in planned.entries]
        else:
            built = _artifacts(report, bundles, recipe)
        held = list(_held_to_plan(report, recipe, built))
        publish_step(report, state, writer, recipe, planned.card_refresh if planned else [], held, install=install)
    if planned is not None:  # the status page needs the plan's view of every listed source
        state.memory = load_memory(
            writer,
            recipe,
            Fingerprints.of(recipe, toolchain=planned.toolchain_fp, card=template_fingerprint()),
            RunOptions(),
        )
        finish_status(report, state, writer, recipe, RunOptions(only=planned.only))
    # The plan's requests and this job's; each build job's downloads are in its own log.
    report.hub_requests += REQUESTS.count - requests_before
    return report


def _fetch_one(fetch: Fetch, artifact: str, folder: Path) -> None:
    """Fetch one entry's artifact into `folder` (emptied first); a failed fetch leaves no folder, so the entry is
    reported as one whose build job left nothing."""
    shutil.rmtree(folder, ignore_errors=True)
    try:
        fetch(artifact, folder)
    except (OSError, subprocess.CalledProcessError) as exc:
        log.step("artifact %s: not downloaded (%s)", artifact, exc)
        shutil.rmtree(folder, ignore_errors=True)


def gh_fetch(run_id: str, repository: str) -> Fetch:
    """`Fetch` on Actions: this workflow run's artifact through the `gh` CLI (`GH_TOKEN` with `actions: read`;
    `run_id` and `repository` from `Settings.actions_context`). The name comes from the checked plan record and
    reaches gh as one argument, never through a shell."""

    def fetch(artifact: str, folder: Path) -> None:
        command = ["gh", "run", "download", run_id, "--repo", repository]
        subprocess.run([*command, "--name", artifact, "--dir", str(folder)], check=True)

    return fetch


def _held_to_plan(
    report: RunReport, recipe: Recipe, built: Iterable[tuple[list[BuildJob], Path | None]]
) -> Iterator[tuple[list[BuildJob], Path | None]]:
    """The target groups with a bundle to publish, each bundle held to its planned job and the recipe's weight
    formats (`bot.run.handoff.read_group`): a group with one bundle that is not what the plan made is not handed
    on at all, and neither is one with nothing to publish; their outcomes go to `report` here. A group without
    an artifact is handed on as it is (`publish_step` reports it)."""
    for jobs, folder in built:
        if folder is None:
            yield jobs, folder
            continue
        seen = RunReport()
        if read_group(seen, jobs, folder, formats=recipe.export.draft_weight_formats):
            yield jobs, folder  # every bundle is the planned build: publish_step reads them again
        else:
            report.outcomes.extend(seen.outcomes)


def _artifacts(report: RunReport, bundles: Path | None, recipe: Recipe) -> Iterator[tuple[list[BuildJob], Path]]:
    """Without a plan: each artifact folder under `bundles` with the jobs its outcome files name (an unreadable one
    is a failure of its own). Those files come from the build job, so each job is held to the recipe instead: the
    repos it names must be the ones the recipe's naming gives its source and target, and its reused or official
    target one of those; an artifact with a job that is not is refused whole."""
    for folder in sorted(bundles.iterdir()) if bundles else []:
        if not folder.is_dir():
            continue
        jobs = []
        for path in sorted(folder.glob("*/" + OUTCOME_FILE)):
            try:
                jobs.append(BuildOutcomeFile.model_validate_json(path.read_bytes()).job)
            except (OSError, ValidationError):
                reason = f"unreadable {OUTCOME_FILE} in a build artifact"
                report.add(Outcome(str(path.parent), None, Status.FAILED, reason))
        foreign = [(job, why) for job in jobs if (why := _not_the_recipes(job, recipe)) is not None]
        if foreign:
            bad, why = foreign[0]
            for job in jobs:
                reason = f"not published: artifact {folder.name} holds a job for {bad.source} that {why}"
                report.add(Outcome(job.source, job.revision, Status.FAILED, reason, stage=Stage.PUBLISH.value))
            continue
        yield jobs, folder


def _not_the_recipes(job: BuildJob, recipe: Recipe) -> str | None:
    """Why a job read from a build artifact is not one the recipe's plan would make (None: it is): its repos."""
    if not job.planned:
        return "names no output repos (a local build's job)"
    try:
        outputs = OutputRepos.named(recipe.publish, job.source, job.target)
    except BotError as error:
        return f"names no valid output repo ({error.message})"
    drafts, target = outputs.drafts, outputs.target
    repos = job.repos
    if repos.target != target or repos.draft not in drafts.values() or job.draft_repos not in ({}, drafts):
        named = sorted({repos.draft, repos.target, *job.draft_repos.values()} - {target, *drafts.values()})
        return f"names repos the recipe does not publish to ({', '.join(named) or 'in other roles'})"
    if job.reuse_target is not None and job.reuse_target.repo != target:
        return f"reuses {job.reuse_target.repo}, not the recipe's target repo"
    official = job.official_target
    if official is not None and official.repo not in recipe.publish.official_target_repos(job.target):
        return f"names {official.repo}, not an official target the recipe names"
    return None


RunnerChoice = tuple[RunnerClass | None, BuildEstimate, str]  # `choose_runner`'s answer


def _runner_for(jobs: list[BuildJob], recipe: Recipe) -> RunnerChoice:
    """`choose_runner` for one entry (a target reused from the Hub is downloaded as its IR, not exported)."""
    pair = pair_of([job.candidate for job in jobs], target_reused=jobs[0].reuse_target is not None)
    return choose_runner(pair, recipe.runners, BuildTime.of(recipe))


def _fit(jobs: list[BuildJob], recipe: Recipe) -> list[tuple[list[BuildJob], RunnerChoice]]:
    """The group as one entry when a runner class takes it whole, else one entry per draft; each with its runner
    choice (estimated once per entry)."""
    whole = _runner_for(jobs, recipe)
    if len(jobs) == 1 or whole[0] is not None:
        return [(jobs, whole)]
    return [([job], _runner_for([job], recipe)) for job in jobs]
