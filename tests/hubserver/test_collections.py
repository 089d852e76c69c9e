"""The local Hub's collections API, driven by the unmodified huggingface_hub client over real HTTP."""

from __future__ import annotations

import re

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN

HUB_USER = "bot"  # the shared `hub` fixture's user in this module
HUB_PAGE_SIZE = 2  # and its listing page: small, so that pagination is exercised
READ_TOKEN = "hf_collections_reader"
NS = "OpenVINO-drafts"


@pytest.fixture(scope="module")
def hub(hub: LocalHub) -> LocalHub:
    """The shared local Hub (conftest) with a reader token and four repos to collect, one of them private."""
    hub.add_token(READ_TOKEN, "reader")
    api = HfApi(endpoint=hub.url, token=TOKEN)
    for name in ("draft-a", "draft-b", "target"):
        api.create_repo(f"{NS}/{name}")
    api.create_repo(f"{NS}/hidden", private=True)
    return hub


@pytest.fixture(scope="module")
def api(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.url, token=TOKEN)


@pytest.fixture(scope="module")
def reader(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.url, token=READ_TOKEN)


def _status(excinfo: pytest.ExceptionInfo[HfHubHTTPError]) -> int:
    return excinfo.value.response.status_code


def test_create_get_and_exists_ok(api: HfApi) -> None:
    created = api.create_collection("DFlash drafts (OpenVINO)", namespace=NS, description="pairs")
    assert re.fullmatch(rf"{NS}/dflash-drafts-openvino-[0-9a-f]{{24}}", created.slug)
    assert created.title == "DFlash drafts (OpenVINO)" and created.items == [] and created.private is False
    assert created.url.endswith(f"/collections/{created.slug}")
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_collection("DFlash drafts (OpenVINO)", namespace=NS)
    assert _status(excinfo) == 409
    again = api.create_collection("DFlash drafts (OpenVINO)", namespace=NS, exists_ok=True)
    assert again.slug == created.slug
    fetched = api.get_collection(created.slug)
    assert fetched.description == "pairs" and fetched.owner["name"] == NS
    api.delete_collection(created.slug)
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.get_collection(created.slug)
    assert _status(excinfo) == 404
    api.delete_collection(created.slug, missing_ok=True)


def test_items_add_duplicate_note_position_delete(api: HfApi) -> None:
    slug = api.create_collection("Items", namespace=NS).slug
    collection = api.add_collection_item(slug, f"{NS}/draft-a", "model", note="target: x")
    assert [(i.item_id, i.item_type, i.position, i.note) for i in collection.items] == [
        (f"{NS}/draft-a", "model", 0, "target: x")
    ]
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.add_collection_item(slug, f"{NS}/draft-a", "model")
    assert _status(excinfo) == 409
    same = api.add_collection_item(slug, f"{NS}/draft-a", "model", exists_ok=True)
    assert len(same.items) == 1
    api.add_collection_item(slug, f"{NS}/target", "model")
    with pytest.raises(RepositoryNotFoundError):
        api.add_collection_item(slug, f"{NS}/missing", "model")
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.add_collection_item(slug, f"{NS}/draft-b", "model", note="x" * 501)
    assert _status(excinfo) == 400

    items = {i.item_id: i for i in api.get_collection(slug).items}
    api.update_collection_item(slug, items[f"{NS}/target"].item_object_id, note="for draft-a", position=0)
    after = api.get_collection(slug).items
    assert [(i.item_id, i.position, i.note) for i in after] == [
        (f"{NS}/target", 0, "for draft-a"),
        (f"{NS}/draft-a", 1, "target: x"),
    ]
    api.delete_collection_item(slug, items[f"{NS}/draft-a"].item_object_id)
    assert [i.item_id for i in api.get_collection(slug).items] == [f"{NS}/target"]
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.delete_collection_item(slug, items[f"{NS}/draft-a"].item_object_id)
    assert _status(excinfo) == 404
    api.delete_collection_item(slug, items[f"{NS}/draft-a"].item_object_id, missing_ok=True)


def test_metadata_update_keeps_the_id(api: HfApi) -> None:
    slug = api.create_collection("Old title", namespace=NS).slug
    updated = api.update_collection_metadata(slug, title="New title", description="d", theme="pink", private=True)
    assert updated.slug == slug.replace("old-title", "new-title")
    assert (updated.title, updated.description, updated.theme, updated.private) == ("New title", "d", "pink", True)
    assert api.get_collection(slug).slug == updated.slug  # the old slug still names it, by its id


def test_permissions_and_private_collections(api: HfApi, reader: HfApi, hub: LocalHub) -> None:
    anon = HfApi(endpoint=hub.url, token=False)
    slug = api.create_collection("Private one", namespace=NS, private=True).slug
    api.add_collection_item(slug, f"{NS}/hidden", "model")
    with pytest.raises(HfHubHTTPError) as excinfo:
        anon.get_collection(slug)
    assert _status(excinfo) == 404
    with pytest.raises(HfHubHTTPError) as excinfo:
        anon.create_collection("Nope", namespace=NS)
    assert _status(excinfo) == 401
    with pytest.raises(HfHubHTTPError) as excinfo:
        reader.create_collection("Nope", namespace=NS)
    assert _status(excinfo) == 403
    public = api.create_collection("Public with a private item", namespace=NS).slug
    api.add_collection_item(public, f"{NS}/hidden", "model")
    api.add_collection_item(public, f"{NS}/draft-b", "model")
    assert [i.item_id for i in anon.get_collection(public).items] == [f"{NS}/draft-b"]
    with pytest.raises(HfHubHTTPError) as excinfo:
        reader.add_collection_item(public, f"{NS}/draft-a", "model")
    assert _status(excinfo) == 403


def test_items_of_deleted_repos_disappear(api: HfApi) -> None:
    api.create_repo(f"{NS}/short-lived")
    slug = api.create_collection("Deleted repo", namespace=NS).slug
    api.add_collection_item(slug, f"{NS}/short-lived", "model")
    api.delete_repo(f"{NS}/short-lived")
    assert api.get_collection(slug).items == []


def test_list_collections_filters_pages_and_truncates(api: HfApi, hub: LocalHub) -> None:
    slug = api.create_collection("Many items", namespace=NS).slug
    for name in ("draft-a", "draft-b", "target", "hidden"):
        api.add_collection_item(slug, f"{NS}/{name}", "model")
    api.add_collection_item(slug, "2311.12983", "paper")
    listed = list(api.list_collections(owner=NS))  # page size 2: several pages, followed through `Link`
    assert slug in [c.slug for c in listed] and len(listed) > 2
    mine = next(c for c in listed if c.slug == slug)
    assert len(mine.items) == 4 and len(api.get_collection(slug).items) == 5
    with_item = list(api.list_collections(item=f"models/{NS}/draft-a"))
    assert slug in [c.slug for c in with_item]
    assert all(f"{NS}/draft-a" in [i.item_id for i in api.get_collection(c.slug).items] for c in with_item)
    assert list(api.list_collections(owner="nobody")) == []
    assert len(list(api.list_collections(owner=NS, limit=1))) == 1


def test_collections_persist_across_restarts(tmp_path) -> None:
    with LocalHub(tmp_path, HUB_USER, TOKEN) as server:
        api = HfApi(endpoint=server.url, token=TOKEN)
        api.create_repo(f"{NS}/kept")
        slug = api.create_collection("Kept", namespace=NS).slug
        api.add_collection_item(slug, f"{NS}/kept", "model", note="n")
    with LocalHub(tmp_path, HUB_USER, TOKEN) as server:
        items = HfApi(endpoint=server.url, token=TOKEN).get_collection(slug).items
        assert [(i.item_id, i.note) for i in items] == [(f"{NS}/kept", "n")]


def test_namespace_listing_with_sha(api: HfApi) -> None:
    """The one listing the bot uses to cross-check published repos: id and sha of each, nothing else."""
    listed = {m.id: m for m in api.list_models(author=NS, expand=["sha", "lastModified"])}
    assert {f"{NS}/draft-a", f"{NS}/draft-b", f"{NS}/target", f"{NS}/hidden"} <= set(listed)
    assert listed[f"{NS}/draft-a"].sha == api.model_info(f"{NS}/draft-a").sha
    assert listed[f"{NS}/draft-a"].last_modified is not None
