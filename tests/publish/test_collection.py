"""The recipe's collection kept in sync by `sync_collection`, on a real local Hub over HTTP."""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi

from bot.core.errors import Failure
from bot.hub.client import Hub
from bot.publish.collection import NOTE_MAX_CHARS, PublishedPair, desired_items, draft_note, sync_collection
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import fast_recipe

READ_TOKEN = "hf_collection_reader"
NS = "OpenVINO-drafts"
SETTINGS = fast_recipe().publish.model_copy(update={"namespace": NS})
TITLE = fast_recipe().collection_title


def pair(name: str, target: str = "Qwen3-Tiny", **changes) -> PublishedPair:
    fields = {
        "draft_repo": f"{NS}/{name}-int4-ov",
        "target_repo": f"{NS}/{target}-int4-ov",
        "source": f"z-lab/{name}",
        "target": f"Qwen/{target}",
        "accept_length": 4.0,
        "speedup": 1.75,
        "recommended_k": 3,
        **changes,
    }
    return PublishedPair(**fields)


@pytest.fixture(scope="module")
def server(hub: LocalHub) -> LocalHub:
    """The shared local Hub (conftest) with a reader token and four published repos to collect."""
    hub.add_token(READ_TOKEN, "reader")
    api = HfApi(endpoint=hub.url, token=TOKEN)
    for name in ("A-DFlash", "B-DFlash", "Qwen3-Tiny", "Qwen3-Other"):
        api.create_repo(f"{NS}/{name}-int4-ov")
    return hub


def _items(server: LocalHub, slug: str) -> dict[str, str | None]:
    return {i.item_id: i.note for i in HfApi(endpoint=server.url, token=TOKEN).get_collection(slug).items}


def test_notes_state_target_and_figures_within_the_limit() -> None:
    note = draft_note(pair("A-DFlash"))
    assert f"{NS}/Qwen3-Tiny-int4-ov" in note and "4.00" in note and "1.75x" in note and "=3" in note
    long = draft_note(pair("A-DFlash" + "x" * 600))
    assert len(long) == NOTE_MAX_CHARS
    items = desired_items([pair("B-DFlash"), pair("A-DFlash")])
    assert list(items) == [f"{NS}/A-DFlash-int4-ov", f"{NS}/B-DFlash-int4-ov", f"{NS}/Qwen3-Tiny-int4-ov"]
    assert f"{NS}/A-DFlash-int4-ov" in items[f"{NS}/Qwen3-Tiny-int4-ov"]


def test_sync_adds_updates_and_removes(server: LocalHub) -> None:
    writer = Hub(server.url, TOKEN)
    first = sync_collection(writer, SETTINGS, [pair("A-DFlash")], title=TITLE)
    assert first.added == (f"{NS}/A-DFlash-int4-ov", f"{NS}/Qwen3-Tiny-int4-ov") and first.changed
    assert first.slug.startswith(f"{NS}/") and first.url.endswith(first.slug)
    items = _items(server, first.slug)
    assert items[f"{NS}/A-DFlash-int4-ov"] == draft_note(pair("A-DFlash"))

    server.clear_requests()
    again = sync_collection(writer, SETTINGS, [pair("A-DFlash")], title=TITLE)
    assert again.slug == first.slug and not again.changed
    # create (409) + the client's read of the existing collection; no item calls
    assert [(r["method"], r["path"].split("/")[2]) for r in server.requests()] == [
        ("POST", "collections"),
        ("GET", "collections"),
    ]

    second = sync_collection(
        writer, SETTINGS, [pair("A-DFlash", speedup=2.5), pair("B-DFlash", "Qwen3-Other")], title=TITLE
    )
    assert second.added == (f"{NS}/B-DFlash-int4-ov", f"{NS}/Qwen3-Other-int4-ov")
    assert second.updated == (f"{NS}/A-DFlash-int4-ov",) and second.removed == ()
    assert "2.50x" in _items(server, first.slug)[f"{NS}/A-DFlash-int4-ov"]

    HfApi(endpoint=server.url, token=TOKEN).add_collection_item(first.slug, "2311.12983", "paper")
    third = sync_collection(writer, SETTINGS, [pair("B-DFlash", "Qwen3-Other")], title=TITLE)
    assert third.removed == (f"{NS}/A-DFlash-int4-ov", f"{NS}/Qwen3-Tiny-int4-ov")
    assert set(_items(server, first.slug)) == {
        f"{NS}/B-DFlash-int4-ov",
        f"{NS}/Qwen3-Other-int4-ov",
        "2311.12983",
    }  # a hand-added paper stays


def test_sync_without_write_access_is_a_named_failure(server: LocalHub) -> None:
    with pytest.raises(Failure, match="403"):
        sync_collection(Hub(server.url, READ_TOKEN), SETTINGS, [pair("A-DFlash")], title=TITLE)
