"""One live draft repo per source when publishers overlap (`bot.publish.one_repo`, issue 41.1), on the local Hub.

Two publishers of one build, one in int4 and one in int8 (two runs whose measurements chose differently), each with
its own bundle and the source's format repos. Each test publishes under its own namespace.
"""

from __future__ import annotations

import threading

import pytest

from bot.builder.bundle import Bundle
from bot.core.errors import BotError, Skip
from bot.core.naming import DRAFT_WEIGHT_FORMATS
from bot.core.outcome import Status
from bot.core.record import Repos
from bot.hub.client import Hub
from bot.publish.publisher import PublishResult, publish_bundle, publish_group
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN
from tests.publish.handmade import make_bundle, seed_sources
from tests.records import REPOS, build_record

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")


@pytest.fixture(scope="module")
def hub(hub: LocalHub) -> LocalHub:
    seed_sources(hub.url, HUB_TOKEN)
    return hub


def format_repos(namespace: str) -> dict[str, str]:
    """The draft repo of each weight format, and the target repo, under `namespace`."""
    name = REPOS.draft.split("/", 1)[1].removesuffix("-int4-ov")
    return {fmt: f"{namespace}/{name}-{fmt}-ov" for fmt in DRAFT_WEIGHT_FORMATS}


def format_bundle(tmp_path, namespace: str, fmt: str, built_at: str, revision: str | None = None) -> Bundle:
    """A bundle of the fixture build, its draft exported in `fmt`, built at `built_at`, naming its repos there."""
    built = build_record()
    update: dict = {"built_at": built_at, "export": built.export.model_copy(update={"draft_weight_format": fmt})}
    if revision is not None:
        update["source"] = built.source.model_copy(update={"revision": revision})
    repos = Repos(draft=format_repos(namespace)[fmt], target=f"{namespace}/{REPOS.target.split('/', 1)[1]}")
    return make_bundle(tmp_path / f"bundle-{fmt}", built=built.model_copy(update=update), repos=repos)


def publish(hub: LocalHub, bundle: Bundle, namespace: str) -> PublishResult:
    family = tuple(format_repos(namespace).values())
    return publish_bundle(Hub(hub.url, HUB_TOKEN), bundle, bundle.record.repos or REPOS, private=False, family=family)


def card(hub: LocalHub, repo: str) -> str:
    return (Hub(hub.url, HUB_TOKEN).read_file(repo, "README.md") or b"").decode()


def live_repos(hub: LocalHub, namespace: str) -> dict[str, str]:
    """Each format repo that exists -> "live" or the repo its card points to."""
    api = Hub(hub.url, HUB_TOKEN).api
    states = {}
    for repo in format_repos(namespace).values():
        if api.repo_exists(repo):
            text = card(hub, repo)
            states[repo] = text.split("Superseded by [", 1)[1].split("]", 1)[0] if "Superseded by [" in text else "live"
    return states


def test_a_second_format_of_a_build_another_run_published_is_up_to_date_there(hub, tmp_path):
    """Before: the int8 bundle of the build another run had published as int4 was published too, both cards live."""
    namespace = "one-repo-seq"
    hub.add_org(namespace)
    repos = format_repos(namespace)
    first = publish(hub, format_bundle(tmp_path / "a", namespace, "int4", "2026-11-30T12:00:00+00:00"), namespace)
    assert first.status == Status.PUBLISHED
    second = publish(hub, format_bundle(tmp_path / "b", namespace, "int8", "2026-11-30T12:00:05+00:00"), namespace)
    assert (second.status, second.repos.draft, second.commits) == (Status.UP_TO_DATE, repos["int4"], [])
    assert second.record is not None and second.record.draft_weight_format == "int4"
    assert live_repos(hub, namespace) == {repos["int4"]: "live"}


def test_a_newer_build_published_in_another_format_since_planning_makes_the_bundle_stale(hub, tmp_path):
    namespace = "one-repo-stale"
    hub.add_org(namespace)
    repos = format_repos(namespace)
    newer = format_bundle(tmp_path / "a", namespace, "int8", "2026-12-01T12:00:00+00:00", revision="d" * 40)
    assert publish(hub, newer, namespace).status == Status.PUBLISHED
    with pytest.raises(Skip, match=f"{repos['int8']} holds a newer build of .*this bundle is stale"):
        publish(hub, format_bundle(tmp_path / "b", namespace, "int4", "2026-11-30T12:00:00+00:00"), namespace)
    assert live_repos(hub, namespace) == {repos["int8"]: "live"}


def test_two_publishers_that_both_commit_leave_one_live_repo_the_newest_build(hub, tmp_path):
    """Both decide before either draft commit lands (each commit held 4 s by the Hub), so each commits to its own
    repo, which `parent_commit` cannot stop; the read after the commit points the older build's card to the newer
    one's repo. Before: two live repos of one source, both cards saying published."""
    namespace = "one-repo-race"
    hub.add_org(namespace)
    repos = format_repos(namespace)
    bundles = [
        format_bundle(tmp_path / "a", namespace, "int4", "2026-11-30T12:00:00+00:00"),
        format_bundle(tmp_path / "b", namespace, "int8", "2026-11-30T12:00:05+00:00"),  # the newer build
    ]
    hub.set_faults(
        [{"method": "POST", "path": f"^/api/models/{repo}/commit/", "delay": 4, "times": 1} for repo in repos.values()]
    )
    results: list[PublishResult | BotError | None] = [None, None]

    def run(index: int) -> None:
        bundle = bundles[index]
        family = tuple(repos.values())
        assert bundle.record.repos is not None
        (results[index],) = publish_group(
            Hub(hub.url, HUB_TOKEN),
            [(bundle, bundle.record.repos)],
            private=False,
            families={bundle.record.repos.draft: family},
        )

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        hub.clear_faults()
    assert all(isinstance(r, PublishResult) for r in results), results
    api = Hub(hub.url, HUB_TOKEN).api
    committed = [repo for repo in repos.values() if api.repo_exists(repo)]
    assert committed == list(repos.values()), "both publishers committed their draft: the race happened"
    assert live_repos(hub, namespace) == {repos["int4"]: repos["int8"], repos["int8"]: "live"}
    older, newer = results
    assert isinstance(older, PublishResult) and isinstance(newer, PublishResult)
    assert (newer.status, newer.repos.draft) == (Status.PUBLISHED, repos["int8"])
    # The older build's publisher either read after the newer commit (up to date there) or before it (published,
    # and the newer one's publisher pointed its card away).
    assert (older.status, older.repos.draft) in {
        (Status.UP_TO_DATE, repos["int8"]),
        (Status.PUBLISHED, repos["int4"]),
    }, older
    # The target's card lists the live repo only.
    target = Hub(hub.url, HUB_TOKEN).target_record(f"{namespace}/{REPOS.target.split('/', 1)[1]}")
    assert target is not None and [d.repo for d in target.drafts] == [repos["int8"]]
