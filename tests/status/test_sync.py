"""The status repo and the collection across real `run`s on the local Hub (issue 13's "done when").

The first run is the real pipeline (real export and GenAI validation of the demo's draft); the later runs find
nothing new and must report everything from the status repo's memory for the listing pages + 2 requests, however
many drafts are published (issue 32: a publish is believed while its draft repo's head is the one recorded).
"""

from __future__ import annotations

import datetime as dt

import pytest
from huggingface_hub import HfApi

from bot.core import naming
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.publish.charts import ACCEPTANCE_CHART, acceptance_png
from bot.run import demo
from bot.run.pipeline import run
from bot.status.memory import CHART, README, STATUS_JSON
from bot.status.read import read_status
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_REPOS, fast_recipe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

RECIPE = fast_recipe()
REAL_BUILDS = ("first",)  # slow (tests/conftest.py): the first `run`: real export and GenAI validation
DRAFT_OUT = naming.draft_output_repo(RECIPE.publish, demo.DRAFT_REPO, "int4")
TARGET_OUT = naming.target_output_repo(RECIPE.publish, demo.TARGET_REPO)
STATUS_REPO = RECIPE.status_repo_id


@pytest.fixture(scope="module")
def server(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The shared local Hub (conftest) with the demo's repos."""
    demo.seed(hub.url, TOKEN, tmp_path_factory.mktemp("seed"), SEEDED_REPOS)
    return hub


def listing_pages(server) -> int:
    """Source listing pages (every recipe source has a `search`; the namespace listing has none)."""
    return sum(1 for r in server.requests() if r["path"] == "/api/models" and "search" in r["query"])


def again(server, tmp_path, **options):
    hub = Hub(server.url, TOKEN)
    server.clear_requests()
    return run(RECIPE, hub, hub, RunOptions(work=tmp_path, **options))


@pytest.fixture(scope="module")
def first(server, tmp_path_factory):
    hub = Hub(server.url, TOKEN)
    return run(RECIPE, hub, hub, RunOptions(work=tmp_path_factory.mktemp("w")))


def test_first_run_leaves_collection_status_repo_and_chart(server, first) -> None:
    report = first
    assert {o.source: o.status for o in report.outcomes}[demo.DRAFT_REPO] == "published"
    assert report.status_page and report.status_page.endswith(f"/datasets/{STATUS_REPO}")
    assert report.status_commit and report.collection and "Status page" in report.markdown()
    api = HfApi(endpoint=server.url, token=TOKEN)
    status = read_status(Hub(server.url, TOKEN), STATUS_REPO)
    assert {README, STATUS_JSON, CHART} <= set(api.list_repo_files(STATUS_REPO, repo_type="dataset"))
    entry = status.entry(demo.DRAFT_REPO)
    assert entry.status == "published" and entry.repo_shas[DRAFT_OUT] == api.model_info(DRAFT_OUT).sha
    assert entry.repo_shas[TARGET_OUT] == api.model_info(TARGET_OUT).sha
    assert status.entry(demo.BROKEN_REPO).status == "skipped"
    slug = report.collection.rsplit("/collections/", 1)[-1]
    items = {i.item_id: i.note for i in api.get_collection(slug).items}
    assert set(items) == {DRAFT_OUT, TARGET_OUT}
    assert TARGET_OUT in items[DRAFT_OUT] and "accept length" in items[DRAFT_OUT].lower()
    # The draft card embeds its chart, drawn from the published record: the same bytes a redraw gives.
    published = Hub(server.url, TOKEN).draft_record(DRAFT_OUT)
    chart = api.hf_hub_download(DRAFT_OUT, ACCEPTANCE_CHART)
    with open(chart, "rb") as drawn:
        assert drawn.read() == acceptance_png(published.validation.runs)
    card = Hub(server.url, TOKEN).read_file(DRAFT_OUT, "README.md").decode()
    assert f"]({ACCEPTANCE_CHART})" in card
    assert entry.accept_length == published.validation.accept_length >= RECIPE.validation.min_accept_length


def test_noop_run_costs_listing_pages_plus_two_and_commits_nothing(server, first, tmp_path) -> None:
    report = again(server, tmp_path)
    # Who the write token belongs to is asked once per run for the published repos' authorship, not by the memory.
    requests = [r for r in server.requests() if r["path"] != "/api/whoami-v2"]
    assert report.commits == [] and report.status_commit is None and not report.failed
    # Every source reported again, from memory: what was published is up to date, what was skipped stays so.
    expected = {o.source: ("up-to-date" if o.status == "published" else o.status) for o in first.outcomes}
    assert {o.source: o.status for o in report.outcomes} == expected
    assert sum(o.status == "published" for o in first.outcomes) == 1
    assert not any(r["path"].endswith("/openvino_export.json") for r in requests)  # the head is the recorded one
    assert len(requests) == listing_pages(server) + 2, [(r["method"], r["path"]) for r in requests]
    assert not any(r["path"].endswith((".safetensors", ".bin")) for r in requests)


def test_hand_edited_repo_is_noticed(server, first, tmp_path) -> None:
    api = HfApi(endpoint=server.url, token=TOKEN)
    api.upload_file(path_or_fileobj=b"hand-made note\n", path_in_repo="NOTES.md", repo_id=DRAFT_OUT)
    report = again(server, tmp_path)
    # Examined (its record read), found current: no rebuild, and the status records the new sha.
    assert {o.source: o.status for o in report.outcomes}[demo.DRAFT_REPO] == "up-to-date"
    assert report.commits == [] and report.status_commit is not None
    status = read_status(Hub(server.url, TOKEN), STATUS_REPO)
    assert status.entry(demo.DRAFT_REPO).repo_shas[DRAFT_OUT] == api.model_info(DRAFT_OUT).sha


def test_deleted_status_repo_is_rebuilt_without_rebuilding_models(server, first, tmp_path) -> None:
    api = HfApi(endpoint=server.url, token=TOKEN)
    before = read_status(Hub(server.url, TOKEN), STATUS_REPO)
    api.delete_repo(STATUS_REPO, repo_type="dataset")
    report = again(server, tmp_path)
    assert report.commits == [] and report.status_commit is not None  # no model rebuilt; the page is back
    status = read_status(Hub(server.url, TOKEN), STATUS_REPO)
    assert {e.source: e.status for e in status.entries} == {e.source: e.status for e in before.entries}
    assert status.collection_url == before.collection_url  # the same collection


def test_a_forged_publish_entry_is_checked_against_the_record_once_due(server, first, tmp_path) -> None:
    """Made-up figures on a real published pair (repos and shas as the listing shows them) are believed no longer
    than `watch.recheck_after` (a no-op run reads no record while the heads are the recorded ones): once the entry
    is due, the record at the draft repo's head disagrees, so the source is examined (found current, nothing
    rebuilt) and the figures come back."""
    import json

    api = HfApi(endpoint=server.url, token=TOKEN)
    data = json.loads(Hub(server.url, TOKEN).read_file(STATUS_REPO, STATUS_JSON, repo_type="dataset") or b"")
    entry = next(e for e in data["entries"] if e["source"] == demo.DRAFT_REPO)
    real = (entry["accept_length"], entry["speedup"])
    due = dt.datetime.now(dt.UTC) - RECIPE.watch.recheck_after - dt.timedelta(hours=1)
    entry.update(accept_length=42.0, speedup=99.0, last_checked=due.replace(microsecond=0).isoformat())
    api.upload_file(
        path_or_fileobj=json.dumps(data).encode(), path_in_repo=STATUS_JSON, repo_id=STATUS_REPO, repo_type="dataset"
    )
    report = again(server, tmp_path)
    assert {o.source: o.status for o in report.outcomes}[demo.DRAFT_REPO] == "up-to-date"
    assert report.commits == [] and report.status_commit is not None  # no model rebuilt; the memory repaired
    status = read_status(Hub(server.url, TOKEN), STATUS_REPO)
    fixed = status.entry(demo.DRAFT_REPO)
    assert (fixed.accept_length, fixed.speedup) == real
    slug = report.collection.rsplit("/collections/", 1)[-1]
    assert not any("99.00" in (i.note or "") for i in api.get_collection(slug).items)
