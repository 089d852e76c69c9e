"""A no-op run's Hub requests do not grow with the catalogue (issue 32): the published drafts' heads come from the
one listing of the output namespace, and a record is read only when a head differs from the memory. Hand-made
published repos on a local Hub (bench/noop_seed.py), no export."""

from __future__ import annotations

from bench.noop_seed import seed_published
from bot.core.recipe import load_recipe
from bot.hub.client import Hub
from bot.hub.transport import configure_client
from bot.plan.step import RunOptions
from bot.run.pipeline import run
from hubserver import LocalHub


def noop_requests(tmp_path, count: int) -> tuple[list[dict], list]:
    """Seed `count` published drafts, run once with nothing new; the run's requests (whoami aside) and outcomes."""
    recipe = load_recipe()
    with LocalHub(tmp_path / "hub", user="maintainer", token="hf_write") as server:
        configure_client(server.url)
        hub = Hub(server.url, "hf_write")
        sources = seed_published(hub, recipe, tmp_path / "seed", count)
        server.clear_requests()
        report = run(recipe, hub, hub, RunOptions(work=tmp_path / "w"))
        requests = [r for r in server.requests() if r["path"] != "/api/whoami-v2"]
    assert {o.source: o.status for o in report.outcomes} == dict.fromkeys(sources, "up-to-date")
    assert report.commits == [] and report.status_commit is None and not report.failed
    return requests, report.outcomes


def test_a_noop_run_costs_the_listing_pages_plus_two_with_1_or_12_published_drafts(tmp_path):
    one, _ = noop_requests(tmp_path / "one", 1)
    many, _ = noop_requests(tmp_path / "many", 12)
    pages = [r for r in one if r["path"] == "/api/models" and "search" in r["query"]]
    # Each trusted author's listing for each word, and the radar's one page per word (issue 39).
    watch = load_recipe().watch
    assert len(pages) == len(watch.authored_queries()) + len(watch.radar_queries())
    assert len(one) == len(pages) + 2, [(r["method"], r["path"]) for r in one]  # status.json, namespace listing
    assert [(r["method"], r["path"]) for r in many] == [(r["method"], r["path"]) for r in one]
    assert not any(r["path"].endswith("/openvino_export.json") for r in many)
