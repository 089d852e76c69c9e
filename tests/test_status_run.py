"""The status repo and the collection across real runs on the local Hub, wired the way `bot/status_step.py` says.

The first run is the real pipeline (real export and GenAI validation of the demo's oracle pair); the status step
is called after it as the orchestrator will call it. The later runs replay planning with the memory: listing plus
`Memory.remembered`, and the provenance path (`plan.read_published`) for what memory does not cover.
"""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi

from bot import demo, discover, plan
from bot.charts import acceptance_png_from_provenance
from bot.errors import BotError, Skip
from bot.hub import Hub
from bot.pipeline import RunOptions, run
from bot.status import CHART, README, STATUS_JSON, problem_entry, published_entry
from bot.status_step import entries_from_outcomes, load_memory, partition, publish_status
from bot.toolchain import detect
from tests.conftest import fast_recipe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

TOKEN = "hf_status_run_token"
RECIPE = fast_recipe()
DRAFT_OUT = plan.draft_output_repo(RECIPE, demo.DRAFT_REPO)
TARGET_OUT = plan.target_output_repo(RECIPE, demo.TARGET_REPO)
STATUS_REPO = RECIPE.publish.status_repo_id


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from hubserver import LocalHub

    root = tmp_path_factory.mktemp("hub")
    with LocalHub(root / "data", user="maintainer", token=TOKEN) as hub:
        demo.seed(hub.url, TOKEN, root / "seed")
        yield hub


def examine(hub: Hub, memory, listings, skips) -> tuple[list, list, list]:
    """Planning with the memory: (remembered entries, entries of examined sources, sources to build).

    `partition` costs nothing; each source it leaves to examine goes the way plan goes today: its provenance
    (one read), then `discover.resolve` for a build.
    """
    split = partition(memory, listings, skips)
    updates, to_build = list(split.listing_skips), []
    fingerprints = {"toolchain_fp": memory.toolchain_fp, "recipe_fp": memory.recipe_fp, "now": memory.now}
    for listing in split.examine:
        previous = memory.status.entry(listing.repo_id) if memory.status else None
        published = plan.read_published(hub, plan.draft_output_repo(RECIPE, listing.repo_id))
        decision = plan.decide(listing, published, RECIPE, detect(), memory.card_fp or "")
        if decision.action == plan.UP_TO_DATE:
            updates.append(published_entry(published, draft_repo=published["repos"]["draft"],
                                           target_repo=published["repos"]["target"], card_fp=memory.card_fp,
                                           **fingerprints))
            continue
        try:
            discover.resolve(hub, listing, RECIPE, detect())
        except BotError as error:
            updates.append(problem_entry(listing.repo_id, listing.sha,
                                         "skipped" if isinstance(error, Skip) else "failed", error.message,
                                         stage=error.stage, previous=previous, **fingerprints))
            continue
        to_build.append(listing.repo_id)
    return list(split.remembered), updates, to_build


def listing_pages(server) -> int:
    """Source listing pages (every recipe source has a `search`; the namespace listing has none)."""
    return sum(1 for r in server.requests() if r["path"] == "/api/models" and "search" in r["query"])


@pytest.fixture(scope="module")
def first(server, tmp_path_factory):
    """The real first run, then the status step with the memory it started from."""
    from bot.card import template_fingerprint

    hub = Hub(server.url, TOKEN)
    memory = load_memory(hub, RECIPE, card_fp=template_fingerprint())
    assert memory.status is None
    report = run(RECIPE, hub, hub, RunOptions(work=tmp_path_factory.mktemp("w")))
    updates = entries_from_outcomes(hub, RECIPE, memory, report.outcomes)
    watched = [o.source for o in report.outcomes]
    result = publish_status(hub, RECIPE, memory, updates, watched=watched, committed=bool(report.commits))
    return report, result


def test_first_run_leaves_collection_status_repo_and_chart(server, first) -> None:
    report, result = first
    assert {o.source: o.status for o in report.outcomes}[demo.DRAFT_REPO] == "published"
    assert result.commit is not None and result.collection is not None
    api = HfApi(endpoint=server.url, token=TOKEN)
    items = {i.item_id: i.note for i in api.get_collection(result.collection.slug).items}
    assert set(items) == {DRAFT_OUT, TARGET_OUT}
    assert TARGET_OUT in items[DRAFT_OUT] and "accept length" in items[DRAFT_OUT].lower()
    assert {README, STATUS_JSON, CHART} <= set(api.list_repo_files(STATUS_REPO, repo_type="dataset"))
    entry = result.status.entry(demo.DRAFT_REPO)
    assert entry.status == "published" and entry.repo_shas[DRAFT_OUT] == api.model_info(DRAFT_OUT).sha
    assert entry.repo_shas[TARGET_OUT] == api.model_info(TARGET_OUT).sha
    assert result.status.entry(demo.BROKEN_REPO).status == "skipped"
    assert result.collection_url in result.summary_markdown() and STATUS_REPO in result.summary_markdown()
    # The draft card's chart draws from the published provenance of a real build, the same bytes every time.
    validation = plan.read_published(Hub(server.url, TOKEN), DRAFT_OUT)["validation"]
    chart = acceptance_png_from_provenance(validation)
    assert chart.startswith(b"\x89PNG") and chart == acceptance_png_from_provenance(validation)
    assert entry.accept_length == validation["accept_length"] >= RECIPE.validation.min_accept_length


def test_noop_run_costs_listing_pages_plus_two_and_commits_nothing(server, first) -> None:
    from bot.card import template_fingerprint

    hub = Hub(server.url, TOKEN)
    server.clear_requests()
    listings, skips = discover.list_sources(hub, RECIPE, detect())
    memory = load_memory(hub, RECIPE, card_fp=template_fingerprint())
    remembered, updates, to_build = examine(hub, memory, listings, skips)
    requests = server.requests()
    assert updates == [] and to_build == []
    assert {e.source for e in remembered} == {o.source for o in first[0].outcomes}
    assert len(requests) == listing_pages(server) + 2, [(r["method"], r["path"]) for r in requests]
    assert not any(r["path"].endswith((".safetensors", ".bin")) for r in requests)

    server.clear_requests()
    result = publish_status(hub, RECIPE, memory, updates, watched=[e.source for e in remembered], committed=False)
    assert result.commit is None and result.collection is None and server.requests() == []


def test_hand_edited_repo_is_noticed(server, first) -> None:
    from bot.card import template_fingerprint

    api = HfApi(endpoint=server.url, token=TOKEN)
    api.upload_file(path_or_fileobj=b"hand-made note\n", path_in_repo="NOTES.md", repo_id=DRAFT_OUT)
    hub = Hub(server.url, TOKEN)
    listings, skips = discover.list_sources(hub, RECIPE, detect())
    memory = load_memory(hub, RECIPE, card_fp=template_fingerprint())
    assert memory.stale == {DRAFT_OUT}
    remembered, updates, to_build = examine(hub, memory, listings, skips)
    assert [e.source for e in updates] == [demo.DRAFT_REPO] and to_build == []  # examined, found current
    result = publish_status(hub, RECIPE, memory, updates, watched=[l.repo_id for l in listings] +
                            [s.repo_id for s in skips], committed=False)
    assert result.status.entry(demo.DRAFT_REPO).repo_shas[DRAFT_OUT] == api.model_info(DRAFT_OUT).sha


def test_deleted_status_repo_is_rebuilt_without_rebuilding_models(server, first) -> None:
    from bot.card import template_fingerprint

    api = HfApi(endpoint=server.url, token=TOKEN)
    api.delete_repo(STATUS_REPO, repo_type="dataset")
    hub = Hub(server.url, TOKEN)
    listings, skips = discover.list_sources(hub, RECIPE, detect())
    memory = load_memory(hub, RECIPE, card_fp=template_fingerprint())
    assert memory.status is None
    remembered, updates, to_build = examine(hub, memory, listings, skips)
    assert remembered == [] and to_build == []  # every source examined again; nothing to build
    result = publish_status(hub, RECIPE, memory, updates,
                            watched=[l.repo_id for l in listings] + [s.repo_id for s in skips], committed=False)
    assert result.commit is not None
    assert {e.source: e.status for e in result.status.entries} == {
        e.source: e.status for e in first[1].status.entries}
    assert api.get_collection(result.collection.slug).slug == first[1].collection.slug  # the same collection
