"""The hostile suite's network faults: a Hub, proxy or CDN that serves wrong bytes, goes silent, trickles, or answers
404 without the Hub's own error code (issues 20 and 21).

Each scenario runs the bot's own stages (`plan_step`, `fetch_and_build`, `Hub.download`) against the local Hub over
real HTTP and records one row for RELIABILITY.md (`tests/reliability/rows.py`): what was tried, what the bot did (its
real outcome) and the hub's state afterwards, read back from the hub. Timeouts are the recipe's `hub:` settings,
made small so a silent Hub costs a scenario seconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import time

import pytest
from huggingface_hub import HfApi

from bot.core.errors import BotError, Failure, HubError
from bot.core.fingerprints import Fingerprints
from bot.core.recipe import HubSettings
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.run import demo
from bot.run.pipeline import fetch_and_build
from bot.run.report import RunReport
from bot.run.run_side import plan_step
from bot.status.memory import STATUS_JSON, needs_recheck
from bot.status.read import load_status
from bot.status.sync import StatusMemory, entries_for
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_REPOS, fast_recipe
from tests.reliability.rows import record

FAST = HubSettings(connect_timeout_s=2, read_timeout_s=0.5, min_bytes_per_s=2000, download_attempts=2)
BASE = fast_recipe(num_assistant_tokens=[3])
RECIPE = BASE.model_copy(update={"hub": FAST, "publish": BASE.publish.model_copy(update={"namespace": "rel-net"})})
DRAFT_WEIGHTS = f"^/{demo.DRAFT_REPO}/resolve/[^/]+/model.safetensors$"


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The shared local Hub (conftest) with the demo's published pair."""
    demo.seed(hub.url, TOKEN, tmp_path_factory.mktemp("seed"), repos=SEEDED_REPOS[:2])
    return hub


@pytest.fixture()
def under(hub):
    """under(*rules): this scenario's faults, on a fresh request log; checks afterwards that a fault fired."""
    state = {"rules": 0}

    def apply(*rules: dict) -> None:
        hub.clear_requests()
        hub.set_faults(list(rules))
        state["rules"] = len(rules)

    yield apply
    hub.clear_faults()
    assert not state["rules"] or any(r.get("fault") for r in hub.requests()), "the fault never fired"


def reader(hub) -> Hub:
    return Hub(hub.url, TOKEN, max_attempts=2, backoff_s=0.05, settings=FAST)


def repos(hub) -> dict[str, str]:
    return {m.id: str(m.sha) for m in HfApi(endpoint=hub.url, token=TOKEN).list_models(expand=["sha"])}


def hub_state(hub, before: dict[str, str]) -> tuple[str, bool]:
    """The hub after a scenario, compared with before it: every repo at the same commit, nothing published."""
    after = repos(hub)
    if after == before:
        return f"unchanged: {len(after)} repos at the same commits, nothing published", True
    return f"CHANGED: {sorted(set(after.items()) ^ set(before.items()))}", False


def planned_job(hub):
    (job,) = plan_step(reader(hub), RECIPE, RunOptions(only=demo.DRAFT_REPO, dry_run=True), RunReport())[1]
    return job


def test_corrupted_draft_weights_every_time_fail_the_build_naming_both_hashes(hub, tmp_path, under):
    job = planned_job(hub)
    good = hashlib.sha256(Hub(hub.url, TOKEN).read_file(demo.DRAFT_REPO, "model.safetensors", job.revision,
                                                        max_bytes=1 << 30) or b"").hexdigest()  # fmt: skip
    before = repos(hub)
    under({"path": DRAFT_WEIGHTS, "corrupt": True, "times": -1})
    report = RunReport()
    built = fetch_and_build(reader(hub), RECIPE, [job], tmp_path, report)
    (outcome,) = report.outcomes
    assert built == [] and outcome.status == "failed" and outcome.stage == "download", outcome
    assert "model.safetensors" in outcome.reason and good in outcome.reason, outcome.reason
    assert len([r for r in hub.requests() if r.get("fault")]) == 2  # retried once, fresh, then never built
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "corrupted bytes (same length and headers) for a draft's LFS weights, on every download",
        f"{outcome.status} before any export: {outcome.reason[:320]}",
        state,
        whole,
    )


def test_corrupted_bytes_once_are_healed_by_downloading_that_file_again(hub, tmp_path, under):
    job = planned_job(hub)
    before = repos(hub)
    under({"path": DRAFT_WEIGHTS, "corrupt": True})
    download = reader(hub).download(job.source, job.revision, tmp_path / "draft", job.candidate.draft_files)
    weights = download.files["model.safetensors"]
    fetched = [r for r in hub.requests() if r["path"].endswith("/model.safetensors")]
    assert len(fetched) == 2 and weights.sha256 == hashlib.sha256(
        (tmp_path / "draft" / "model.safetensors").read_bytes()).hexdigest()  # fmt: skip
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "corrupted bytes for a draft's LFS weights, once",
        f"hash mismatch caught, that file downloaded again ({len(fetched)} GETs); verified sha256 "
        f"{weights.sha256[:12]}… recorded for the build",
        state,
        whole,
    )


def test_a_hub_that_accepts_and_says_nothing_fails_the_source_within_the_timeouts(hub, under):
    before = repos(hub)
    under({"path": f"^/api/models/{demo.DRAFT_REPO}/revision/", "stall": 5, "times": -1})
    report = RunReport()
    started = time.monotonic()
    plan_step(reader(hub), RECIPE, RunOptions(only=demo.DRAFT_REPO, dry_run=True), report)
    took = time.monotonic() - started
    (outcome,) = [o for o in report.outcomes if o.source == demo.DRAFT_REPO]
    assert outcome.status == "failed" and took < 5, (outcome, took)  # a failure: tried again next run
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "the Hub accepts the connection and says nothing (repo info, every time)",
        f"{outcome.status} after {took:.1f} s (read timeout 0.5 s, 2 attempts; a failure, examined again next "
        f"run): {outcome.reason[:120]}",
        state,
        whole,
    )


def test_a_download_that_stalls_part_way_resumes_from_the_byte_it_had(hub, tmp_path, under):
    job = planned_job(hub)
    before = repos(hub)
    under({"path": DRAFT_WEIGHTS, "stall": 5, "after_bytes": 200_000})
    download = reader(hub).download(job.source, job.revision, tmp_path / "draft", job.candidate.draft_files)
    gets = sorted((r for r in hub.requests() if r["path"].endswith("/model.safetensors")), key=lambda r: r["time"])
    size = download.files["model.safetensors"].size
    assert [r["bytes_out"] for r in gets] == [200_000, size - 200_000]
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "a download that stalls after 200 kB (silence, then hang-up)",
        f"resumed with a Range from byte 200000 ({gets[1]['bytes_out']} more bytes); hash verified",
        state,
        whole,
    )


def test_a_trickling_download_fails_naming_the_repo_file_and_bytes_received(hub, tmp_path, under):
    job = planned_job(hub)
    before = repos(hub)
    under({"path": DRAFT_WEIGHTS, "trickle": 0.1, "times": -1})
    started = time.monotonic()
    with pytest.raises(HubError) as caught:
        reader(hub).download(job.source, job.revision, tmp_path / "draft", job.candidate.draft_files)
    error, took = caught.value, time.monotonic() - started
    assert error.subject == demo.DRAFT_REPO and "model.safetensors" in error.message and took < 8, (error, took)
    assert "bytes received" in error.message
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "a download answered one byte every 0.1 s",
        f"stalled after {took:.1f} s: {error.one_line()[:200]}",
        state,
        whole,
    )


def test_a_404_without_the_hubs_error_code_is_a_failure_not_a_remembered_skip(hub, under):
    before = repos(hub)
    under({"path": f"^/{demo.DRAFT_REPO}/resolve/[^/]+/config.json$", "status": 404, "bare": True, "times": -1})
    report = RunReport()
    plan_step(reader(hub), RECIPE, RunOptions(only=demo.DRAFT_REPO, dry_run=True), report)
    (outcome,) = [o for o in report.outcomes if o.source == demo.DRAFT_REPO]
    assert outcome.status == "failed" and "404" in outcome.reason, outcome
    hub.clear_faults()
    _, jobs = plan_step(reader(hub), RECIPE, RunOptions(only=demo.DRAFT_REPO, dry_run=True), RunReport())
    assert [job.source for job in jobs] == [demo.DRAFT_REPO]  # the next run plans it
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "404 without X-Error-Code (a proxy's or CDN's answer) on a draft's config.json",
        f"{outcome.status} (retried next run, not remembered): {outcome.reason[:120]}; next run: planned",
        state,
        whole,
    )


def test_a_plan_past_its_deadline_stops_at_its_next_request(hub, under):
    before = repos(hub)
    under({"path": "^/api/models$", "delay": 1, "times": -1})  # a slow listing
    recipe = RECIPE.model_copy(update={"hub": FAST.model_copy(update={"plan_deadline_s": 0.3})})
    with pytest.raises(BotError) as caught:
        plan_step(reader(hub), recipe, RunOptions(dry_run=True), RunReport())
    assert isinstance(caught.value, HubError) and "plan deadline" in caught.value.message, caught.value
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "planning that outlives the recipe's plan deadline",
        f"stopped: {caught.value.one_line()}",
        state,
        whole,
    )


def test_a_body_larger_than_the_hub_lists_stops_at_the_listed_size(hub, tmp_path, under):
    """A CDN or mirror that sends far more than the Hub lists for a file (issue 29: 524 MB for a 660 KB file filled
    the disk past the free-space check): refused on the answer's length, nothing past the listed size written."""
    job = planned_job(hub)
    listed = Hub(hub.url, TOKEN).repo_files(demo.DRAFT_REPO, job.revision).sizes["model.safetensors"]
    before = repos(hub)
    under({"path": DRAFT_WEIGHTS, "oversize": 200_000_000, "times": -1})
    with pytest.raises(Failure) as caught:
        reader(hub).download(job.source, job.revision, tmp_path / "draft", job.candidate.draft_files)
    message = caught.value.message
    assert "model.safetensors" in message and str(listed) in message and str(listed + 200_000_000) in message
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert on_disk < listed, on_disk  # the weights never reached the disk
    gets = [r for r in hub.requests() if r["path"].endswith("/model.safetensors")]
    sent = max(r["bytes_out"] for r in gets)
    # One GET, left after its headers: the body was never read (before: read to its end twice, then a hash failure).
    assert len(gets) == 1 and sent < 100_000_000, [r["bytes_out"] for r in gets]
    state, whole = hub_state(hub, before)
    record(
        "fault",
        f"a body of {listed + 200_000_000} bytes for a file the Hub lists at {listed} bytes",
        f"refused on its length, {on_disk} bytes on disk (the server got {sent} bytes out before the hang-up): "
        f"{message[:200]}",
        state,
        whole,
    )


def test_an_upload_the_hub_takes_at_a_crawl_stops_at_the_floor_naming_the_file(hub, tmp_path):
    """An upload read at ~100 B/s (issue 29: 280 B/s held the write-token job until the job's timeout). The server
    logs a request once it answered, which the trickled ones never do: the fault shows in the error instead."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(os.urandom(40_000))
    repo = "rel-net/Trickled-Upload"
    before = repos(hub)
    hub.set_faults([{"method": "PUT", "path": "^/_lfs/upload/", "trickle_upload": 0.01, "times": -1}])
    started = time.monotonic()
    try:
        with pytest.raises(HubError) as caught:
            reader(hub).publish_folder(repo, folder, message="upload", private=False, seen=None)
    finally:
        hub.clear_faults()
    took, message = time.monotonic() - started, caught.value.message
    assert "model.safetensors" in message and "40000 bytes" in message and "2000 bytes/s" in message, message
    assert took < 30, took
    files = Hub(hub.url, TOKEN).repo_files(repo).sizes
    assert "model.safetensors" not in files, files
    state, _ = hub_state(hub, before)
    record(
        "fault",
        "an upload the Hub reads at one byte every 0.01 s (publish, LFS file of 40 kB)",
        f"stopped after {took:.1f} s (read timeout 0.5 s, 2 sends, floor 2000 B/s): {message[:220]}",
        f"{state.split(':')[0]}: the repo was created, no file committed",
        "model.safetensors" not in files,
    )


def test_a_status_json_sent_a_byte_at_a_time_fails_the_read_naming_it_within_one_window(hub, under):
    api = HfApi(endpoint=hub.url, token=TOKEN)
    status_repo = "rel-net/trickled-status"
    api.create_repo(status_repo, repo_type="dataset", exist_ok=True)
    api.upload_file(repo_id=status_repo, repo_type="dataset", path_in_repo=STATUS_JSON, path_or_fileobj=b"{}" * 200)
    before = repos(hub)
    under({"path": f"/{STATUS_JSON}$", "trickle": 0.3, "times": -1})
    started = time.monotonic()
    with pytest.raises(HubError) as caught:
        load_status(reader(hub), status_repo)
    took, message = time.monotonic() - started, caught.value.message
    assert STATUS_JSON in message and "bytes/s" in message and "bytes" in message, message
    reads = [r for r in hub.requests() if r["path"].endswith(STATUS_JSON)]
    assert took < 3 and len(reads) == 1, (took, len(reads))  # one window, not one per attempt
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "status.json answered one byte every 0.3 s (the status memory's read at planning)",
        f"failed after {took:.1f} s, one GET (read timeout 0.5 s, floor 2000 B/s): {message[:160]}",
        state,
        whole,
    )


def test_a_full_disk_during_download_is_the_runners_one_line_and_the_next_plan_retries(hub, tmp_path):
    """The weights' partial file is /dev/full: every write fails with ENOSPC, as on a full runner disk."""
    job = planned_job(hub)
    partial = tmp_path / job.target.replace("/", "--") / ".draft-0.partial" / "model.safetensors"
    partial.parent.mkdir(parents=True)
    partial.symlink_to("/dev/full")
    report = RunReport()
    before = repos(hub)
    assert fetch_and_build(reader(hub), RECIPE, [job], tmp_path, report) == []
    (outcome,) = report.outcomes
    assert outcome.status == "failed" and outcome.stage is None, outcome  # not a stage the memory keeps
    assert outcome.reason.startswith("download: disk full: download of model.safetensors at "), outcome.reason
    assert " more bytes, " in outcome.reason and " bytes free " in outcome.reason and "\n" not in outcome.reason
    assert "unexpected" not in outcome.reason and "runner's fault (disk full)" in outcome.reason
    memory = StatusMemory(status=None, namespace_listing={}, stale=frozenset(), fingerprints=Fingerprints("tc", "rc"),
                    now=dt.datetime.now(dt.UTC), recheck_after=None)  # fmt: skip
    (entry,) = entries_for(memory, [outcome], {})
    assert needs_recheck(entry, revision=job.revision, fingerprints=Fingerprints("tc", "rc"), now=memory.now,
                         recheck_after=dt.timedelta(days=7), recheck=False)  # fmt: skip
    state, whole = hub_state(hub, before)
    record(
        "fault",
        "the runner's disk full (ENOSPC) while the draft's weights download",
        f"{outcome.status}, one line, not remembered (the next plan examines it again): {outcome.reason[:220]}",
        state,
        whole,
    )


def test_an_upload_the_hub_takes_steadily_too_slowly_stops_at_the_upload_deadline_and_spends_it_for_all(hub, tmp_path):
    """Issue 41: a Hub that reads an LFS upload at 2500 B/s, above the floor (so no window and no send stalls), for a
    file that would take 80 s. The publish stops at `upload_deadline_s` (2 s here), naming the file, its bytes and the
    limit; the deadline is one budget for every upload of the client, so the next commit (the status page's) stops at
    once. Before: the commit ran under the download deadline (90 min, the publish job's own timeout), per commit."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(os.urandom(200_000))
    writer = Hub(
        hub.url, TOKEN, max_attempts=2, backoff_s=0.05, settings=FAST.model_copy(update={"upload_deadline_s": 2})
    )
    before = repos(hub)
    hub.set_faults([{"method": "PUT", "path": "^/_lfs/upload/", "upload_rate": 2500, "times": -1}])
    started = time.monotonic()
    try:
        with pytest.raises(HubError) as caught:
            writer.publish_folder("rel-net/Slow-Upload", folder, message="upload", private=False, seen=None)
        took, message = time.monotonic() - started, caught.value.message
        started = time.monotonic()
        with pytest.raises(HubError) as status:
            writer.commit_files("rel-net/slow-upload-status", {"status.json": b"{}"}, message="status")
        after = time.monotonic() - started
    finally:
        hub.clear_faults()
    assert "model.safetensors" in message and "200000 bytes" in message, message
    assert "the upload deadline of 2 s passed" in message, message
    assert took < 2 + 3, took  # the deadline, and huggingface_hub's one back-off before the send that found it
    assert "the upload deadline of 2 s passed" in status.value.message and after < 2, (after, status.value.message)
    files = Hub(hub.url, TOKEN).repo_files("rel-net/Slow-Upload").sizes
    assert "model.safetensors" not in files, files
    state, _ = hub_state(hub, before)
    record(
        "fault",
        "an upload the Hub reads steadily at 2500 B/s, above the floor (publish, LFS file of 200 kB: 80 s), then the "
        "status page's commit",
        f"stopped after {took:.1f} s at the upload deadline (2 s here, hub.upload_deadline_s: one budget for every "
        f"upload of the job): {message[:200]}; the next commit stopped after {after:.2f} s",
        f"{state.split(':')[0]}: the repos were created, no file committed",
        "model.safetensors" not in files,
    )


def test_a_publish_process_on_a_slow_hub_fails_at_the_upload_deadline_with_its_report_written(hub, tmp_path):
    """Issue 41, the publish job as Actions runs it: `dflash-bot publish --bundle` in a process of its own, its LFS
    uploads read at 2500 B/s, its recipe's `hub.upload_deadline_s` 2 s. It ends by itself, non-zero, its report
    naming the file, the bytes and the limit (before: 90 min per commit, past the job's timeout: no report)."""
    import json
    import subprocess
    import sys

    import yaml

    from bot.core.naming import draft_output_repo, target_output_repo
    from bot.core.record import Repos
    from tests.publish.handmade import DRAFT, TARGET, make_bundle

    namespace = "rel-slow-publish"
    hub.add_org(namespace)
    recipe = RECIPE.model_copy(
        update={
            "publish": RECIPE.publish.model_copy(update={"namespace": namespace}),
            "hub": FAST.model_copy(update={"upload_deadline_s": 2}),
        }
    )
    outputs = Repos(
        draft=draft_output_repo(recipe.publish, demo.DRAFT_REPO, "int4"),
        target=target_output_repo(recipe.publish, demo.TARGET_REPO),
    )
    weights = {"openvino_model.bin": os.urandom(200_000)}  # fresh bytes: the LFS store has never seen them
    make_bundle(tmp_path / "bundle", draft={**DRAFT, **weights}, target={**TARGET, **weights}, repos=outputs)
    recipe_file, report = tmp_path / "recipe.yaml", tmp_path / "report.json"
    recipe_file.write_text(yaml.safe_dump(json.loads(recipe.model_dump_json())))
    hub.set_faults([{"method": "PUT", "path": "^/_lfs/upload/", "upload_rate": 2500, "times": -1}])
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", "publish", "--bundle", str(tmp_path / "bundle"),
             "--recipe", str(recipe_file), "--report", str(report)],
            env={**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        hub.clear_faults()
    took = time.monotonic() - started
    assert done.returncode != 0, done.stdout[-2000:]
    outcomes = json.loads(report.read_text())["outcomes"]
    reasons = " | ".join(str(o.get("reason")) for o in outcomes)
    assert "the upload deadline of 2 s passed" in reasons and "openvino_model.bin" in reasons, reasons
    assert "200000 bytes" in reasons, reasons
    assert TOKEN not in report.read_text() + done.stdout + done.stderr
    record(
        "fault",
        "`dflash-bot publish --bundle` (its own process) while the Hub reads every LFS upload at 2500 B/s, "
        "hub.upload_deadline_s 2 s",
        f"exit {done.returncode} after {took:.1f} s, report written: {reasons[:240]}",
        "no weights committed",
    )
