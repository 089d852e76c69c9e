"""The build -> publish hand-off (`bot.run.handoff`): `write_outcome` folders read back by `read_group`, which hands
on only the bundle the job planned and reports every other folder (missing, damaged, another job's, incomplete).
A group of one job here; groups of several are tests/publish/test_plan_bound.py's."""

from __future__ import annotations

from pathlib import Path

from bot.builder.bundle import Bundle
from bot.core import record
from bot.core.outcome import Outcome, Status
from bot.plan.job import BuildJob
from bot.run.handoff import OUTCOME_FILE, BuildOutcomeFile, artifact_name, read_group, write_outcome
from bot.run.report import RunReport
from tests import records
from tests.publish.handmade import TARGET as TARGET_FILES
from tests.publish.handmade import make_bundle
from tests.records import SOURCE_SHA, TARGET_SHA

SOURCE, TARGET = "z-lab/Qwen3-Tiny-DFlash-b16", "Qwen/Qwen3-Tiny"


def job(source: str = SOURCE, revision: str = SOURCE_SHA, target_revision: str = TARGET_SHA) -> BuildJob:
    candidate = records.candidate(
        repo_id=source, revision=revision, target_repo=TARGET, target_revision=target_revision
    )
    return BuildJob(candidate=candidate, reasons=("new",), draft_repo="ns/Tiny-DFlash-int4-ov", target_repo="ns/T")


def read_built(report: RunReport, planned: BuildJob, root: Path | None) -> Bundle | None:
    """The one job's bundle under `root`, read as the publishing side reads a group (`read_group`)."""
    ready = read_group(report, [planned], root)
    return ready[0][1] if ready else None


def bundle_folder(root: Path, planned: BuildJob, *, tokenizer: bool = True) -> Path:
    """A built draft's folder as a build job leaves it (`root/artifact_name(source)`): the record, the IR files,
    and `build-outcome.json`."""
    folder = root / artifact_name(planned.source)
    kept = {k: v for k, v in TARGET_FILES.items() if tokenizer or "okenizer" not in k}
    make_bundle(folder, target=kept, repos=planned.repos_for("int4"))
    write_outcome(folder, planned, Outcome(planned.source, planned.revision, Status.BUILT, "built"))
    return folder


def test_write_outcome_creates_the_folder_and_round_trips(tmp_path):
    folder = tmp_path / "a" / "b"
    outcome = Outcome(SOURCE, SOURCE_SHA, Status.SKIPPED, "unsupported architecture", stage="discover")
    write_outcome(folder, job(), outcome)
    handed = BuildOutcomeFile.model_validate_json((folder / OUTCOME_FILE).read_bytes())
    assert handed.job == job()
    assert handed.outcome == outcome


def test_a_planned_complete_bundle_is_handed_on(tmp_path):
    planned = job()
    folder = bundle_folder(tmp_path, planned)
    report = RunReport()
    bundle = read_built(report, planned, tmp_path)
    assert bundle is not None
    assert bundle.record.source.repo == SOURCE and bundle.draft_dir == folder / "draft"
    assert report.outcomes == []


def test_a_missing_folder_or_outcome_file_fails_the_job(tmp_path):
    report = RunReport()
    assert read_built(report, job(), None) is None
    assert read_built(report, job(), tmp_path / "absent") is None
    assert [(o.source, o.status) for o in report.outcomes] == [(SOURCE, Status.FAILED)] * 2
    assert "left no bundle" in report.outcomes[0].reason


def test_an_unreadable_outcome_file_fails_the_job(tmp_path):
    (tmp_path / artifact_name(SOURCE)).mkdir()
    (tmp_path / artifact_name(SOURCE) / OUTCOME_FILE).write_text("{not json")
    report = RunReport()
    assert read_built(report, job(), tmp_path) is None
    assert report.outcomes[0].status == Status.FAILED
    assert f"unreadable {OUTCOME_FILE}" in report.outcomes[0].reason


def test_a_bundle_for_another_job_is_refused(tmp_path):
    bundle_folder(tmp_path, job(revision="c" * 40))
    report = RunReport()
    assert read_built(report, job(), tmp_path) is None
    (outcome,) = report.outcomes
    assert outcome.status == Status.FAILED and outcome.revision == SOURCE_SHA
    assert f"is for {SOURCE}@ccccccc, not this entry" in outcome.reason


def test_a_bundle_holding_other_revisions_than_planned_is_refused(tmp_path):
    planned = job(target_revision="d" * 40)  # the record says the target was built at b*40
    bundle_folder(tmp_path, planned)
    report = RunReport()
    assert read_built(report, planned, tmp_path) is None
    assert "not the planned revisions" in report.outcomes[0].reason


def test_a_build_that_did_not_build_reports_its_own_outcome(tmp_path):
    skipped = Outcome(SOURCE, SOURCE_SHA, Status.SKIPPED, "target_layer_ids do not fit", stage="build")
    write_outcome(tmp_path / artifact_name(SOURCE), job(), skipped)
    report = RunReport()
    assert read_built(report, job(), tmp_path) is None
    assert report.outcomes == [skipped]


def test_an_incomplete_bundle_is_refused(tmp_path):
    planned = job()
    folder = bundle_folder(tmp_path, planned, tokenizer=False)
    (folder / "draft" / "openvino_model.bin").unlink()
    report = RunReport()
    assert read_built(report, planned, tmp_path) is None
    assert "missing openvino_model.bin" in report.outcomes[0].reason


def test_a_damaged_record_is_refused(tmp_path):
    planned = job()
    folder = bundle_folder(tmp_path, planned)
    (folder / record.PROVENANCE_FILE).write_text("[]")
    report = RunReport()
    assert read_built(report, planned, tmp_path) is None
    assert "is unusable" in report.outcomes[0].reason


def test_artifact_names_are_unique_per_source_and_legal():
    assert artifact_name("z-lab/Qwen3 Tiny:DFlash") == "bundle-z-lab--Qwen3_Tiny_DFlash"
    assert artifact_name("a/b") != artifact_name("a-b")
