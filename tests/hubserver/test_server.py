"""The local Hub server, driven by the real huggingface_hub client over real HTTP.

How the client is pointed at the server, whatever imported huggingface_hub first:
huggingface_hub reads HF_ENDPOINT, HF_HUB_DISABLE_XET and HF_HOME once, when it is imported, into
`huggingface_hub.constants`; setting the environment in this module would be too late whenever another test
module (or the bot's code) imported it earlier in the session. So the module-scoped `hub` fixture patches the
constants the client reads at call time, and restores them afterwards:

- `ENDPOINT` and `HUGGINGFACE_CO_URL_TEMPLATE` together: `hf_hub_url` formats the template and swaps an
  explicit `endpoint` in only when the URL starts with `ENDPOINT`, so patching one of them alone sends
  downloads to huggingface.co;
- `HF_HUB_DISABLE_XET = True`: with hf_xet installed the client would upload LFS files through Xet, which
  the server does not speak (`is_xet_available()` reads the constant on every call);
- `HF_HUB_OFFLINE = False`: another test may have switched offline mode on for the build stage;
- `HF_HUB_DISABLE_TELEMETRY = True`: otherwise the client's first call also fetches `/api/agent-harnesses`
  (agent detection for its user agent), an extra request in the counts below;
- `HF_HOME` / `HF_HUB_CACHE`: the download cache goes to a temporary folder.
It also sets the matching environment variables, for subprocesses. Tests still pass `endpoint=` and explicit
tokens (`token=False` for anonymous calls) to `HfApi`, so an HF_TOKEN in the environment cannot leak in.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants, hf_hub_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from hubserver import FaultRule, LocalHub, routes_upload, start_subprocess, stop_subprocess
from hubserver.gitobjects import DEFAULT_GITATTRIBUTES, git_blob_sha1, lfs_patterns, needs_lfs
from hubserver.metadata import CardError, derive_tags, parse_front_matter
from tests.conftest import HUB_TOKEN as TOKEN

# huggingface_hub's own LFS upload passes a file object as `data=`, which httpx deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

HUB_USER = "bot"  # the shared `hub` fixture's user in this module
HUB_PAGE_SIZE = 3  # and its listing page: small, so that pagination is exercised
BIG = 10 * 1024 * 1024 + 4096  # just over the LFS threshold
BASE_MODEL = "z-lab/Qwen3-8B-DFlash-b16"
CARD = """---
license: apache-2.0
library_name: openvino
pipeline_tag: text-generation
base_model: z-lab/Qwen3-8B-DFlash-b16
base_model_relation: quantized
tags: [openvino, int4, dflash]
---
# Draft
"""


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHub]:
    """The shared local Hub (conftest), with huggingface_hub's process-wide settings pointed at it."""
    home = tmp_path_factory.mktemp("hf_home")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "HF_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HOME": str(home),
        }.items():
            patch.setenv(name, value)
        patch.setattr(constants, "ENDPOINT", hub.url)
        patch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", f"{hub.url}/{{repo_id}}/resolve/{{revision}}/{{filename}}"
        )
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        patch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        patch.delenv("HF_HUB_OFFLINE", raising=False)
        patch.setattr(constants, "HF_HOME", str(home))
        patch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
        # The cards here name it as `base_model`, and the Hub refuses a base_model that names no model.
        hub.app.store.create_repo("model", BASE_MODEL, private=False, author=HUB_USER)
        yield hub


@pytest.fixture(scope="module")
def api(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.url, token=TOKEN)


@pytest.fixture(scope="module")
def anon(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.url, token=False)


@pytest.fixture(autouse=True)
def _no_leftover_faults(hub: LocalHub) -> Iterator[None]:
    yield
    hub.clear_faults()


def write_model(folder: Path, *, big: bool = False, config: dict | None = None, card: str = CARD) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(card)
    (folder / "config.json").write_text(json.dumps(config or {"model_type": "qwen3", "architectures": ["X"]}))
    (folder / "openvino_model.xml").write_text("<net/>")
    if big:
        (folder / "model.safetensors").write_bytes(os.urandom(BIG))
    return folder


@pytest.fixture(scope="module")
def published(api: HfApi, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, str]:
    """A model repo with an LFS safetensors file, a card and a config: (repo id, source folder, commit id)."""
    folder = write_model(tmp_path_factory.mktemp("src") / "draft", big=True, config={
        "model_type": "qwen3", "architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "x.Y"}})  # fmt: skip
    api.create_repo("bot/draft-a")
    info = api.upload_folder(folder_path=folder, repo_id="bot/draft-a", commit_message="Publish draft")
    return "bot/draft-a", folder, info.oid


def status_of(excinfo: pytest.ExceptionInfo[HfHubHTTPError]) -> int:
    return excinfo.value.response.status_code


def admin_get(hub: LocalHub, path: str, token: str = TOKEN) -> httpx.Response:
    return httpx.get(f"{hub.url}{path}", headers={"Authorization": f"Bearer {token}"})


# Pure rules


def test_git_ids_and_lfs_rules_match_git_and_the_hub() -> None:
    assert git_blob_sha1(b"hello") == "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"  # git hash-object
    patterns = lfs_patterns(DEFAULT_GITATTRIBUTES)
    assert needs_lfs("openvino_model.bin", 10, b"x", patterns)
    assert needs_lfs("sub/w.safetensors", 10, b"x", patterns)
    assert not needs_lfs("openvino_model.xml", 1000, b"<xml/>", patterns)
    assert needs_lfs("big.json", BIG, b"{", patterns)
    assert needs_lfs("blob.dat", 10, b"\0\1", patterns)
    assert not needs_lfs("empty.bin", 0, b"", patterns)


def test_card_metadata_and_tags() -> None:
    card = parse_front_matter(CARD)
    assert card is not None and card["license"] == "apache-2.0"
    assert parse_front_matter("# no metadata") is None
    with pytest.raises(CardError):
        parse_front_matter("---\n- a list\n---\n")
    tags = derive_tags(card, {"model_type": "qwen3", "auto_map": {}}, ["w.safetensors"])
    assert tags[:4] == ["openvino", "safetensors", "qwen3", "text-generation"]
    assert {"int4", "dflash", "license:apache-2.0", "base_model:z-lab/Qwen3-8B-DFlash-b16",
            "base_model:quantized:z-lab/Qwen3-8B-DFlash-b16"} <= set(tags)  # fmt: skip
    assert "custom_code" not in tags  # an empty auto_map does not count


def test_fault_rule_needs_exactly_one_action() -> None:
    assert FaultRule.from_json({"path": "x", "status": 503}).times == 1
    assert FaultRule.from_json({"path": "x", "endless_listing": True}).times == -1
    for bad in ({"path": "x"}, {"path": "x", "status": 500, "drop": True}, {"path": "(", "drop": True},
                {"path": "x", "status": 503, "colour": "red"}, {"path": "x", "stall": 0},
                {"path": "x", "trickle": 1, "after_bytes": 10}, {"path": "x", "corrupt": True, "bare": True},
                {"path": "x", "stall": 1, "after_bytes": -1}):  # fmt: skip
        with pytest.raises(ValueError):
            FaultRule.from_json(bad)


# Identity and repos


def test_create_repo_exist_ok_and_conflict(api: HfApi, hub: LocalHub) -> None:
    url = api.create_repo("bot/created")
    assert url == f"{hub.url}/bot/created" and url.repo_id == "bot/created"
    assert api.create_repo("bot/created", exist_ok=True).repo_id == "bot/created"
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_repo("bot/created")
    assert status_of(excinfo) == 409
    # A new repo holds the Hub's first commit with a default .gitattributes.
    assert [f.rfilename for f in api.model_info("bot/created").siblings] == [".gitattributes"]
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("bot/never-created")


def test_upload_folder_and_model_info(api: HfApi, published: tuple[str, Path, str]) -> None:
    repo_id, _, commit_id = published
    info = api.model_info(repo_id, files_metadata=True)
    assert info.sha == commit_id and info.author == "bot" and info.private is False and info.gated is False
    assert info.last_modified is not None and info.created_at is not None
    assert info.last_modified >= info.created_at
    assert info.card_data["base_model"] == "z-lab/Qwen3-8B-DFlash-b16"
    assert info.library_name == "openvino" and info.pipeline_tag == "text-generation"
    assert info.config == {"model_type": "qwen3", "architectures": ["DFlashDraftModel"],
                           "auto_map": {"AutoModel": "x.Y"}}  # fmt: skip
    assert {"openvino", "safetensors", "qwen3", "dflash", "custom_code", "license:apache-2.0"} <= set(info.tags or [])
    siblings = {s.rfilename: s for s in info.siblings}
    assert set(siblings) == {".gitattributes", "README.md", "config.json", "openvino_model.xml", "model.safetensors"}
    weights = siblings["model.safetensors"]
    assert weights.size == BIG and weights.lfs is not None and weights.lfs.size == BIG
    assert siblings["config.json"].lfs is None and len(siblings["config.json"].blob_id or "") == 40
    # Without files_metadata the Hub lists names only.
    assert api.model_info(repo_id).siblings[0].size is None


def test_list_models_filters_sort_limit_and_pages(api: HfApi, hub: LocalHub, tmp_path: Path) -> None:
    for index in range(5):
        repo_id = f"lister/model-{index}"
        api.create_repo(repo_id)
        if index % 2 == 0:
            api.upload_file(path_or_fileobj=CARD.encode(), path_in_repo="README.md", repo_id=repo_id)
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id="lister/model-1")
    hub.clear_requests()
    ids = [m.id for m in api.list_models(author="lister")]
    assert ids == [f"lister/model-{i}" for i in range(5)]
    pages = [r for r in hub.requests() if r["path"] == "/api/models"]
    assert len(pages) == 2  # 5 repos at 3 per page, followed through the Link header

    newest_first = [m.id for m in api.list_models(author="lister", sort="last_modified")]
    assert newest_first == [f"lister/model-{i}" for i in (1, 4, 3, 2, 0)]
    by_creation = [m.id for m in api.list_models(author="lister", sort="created_at")]
    assert by_creation == [f"lister/model-{i}" for i in (4, 3, 2, 1, 0)]
    assert [m.id for m in api.list_models(author="lister", filter=["dflash", "openvino"])] == [
        "lister/model-0", "lister/model-2", "lister/model-4"]  # fmt: skip
    assert [m.id for m in api.list_models(search="MODEL-3")] == ["lister/model-3"]
    assert len(list(api.list_models(author="lister", limit=2))) == 2

    short = next(iter(api.list_models(author="lister", search="model-0")))
    assert short.sha is None and short.siblings is None and "dflash" in short.tags
    # What the bot asks for (bot/hub/reads.py: _LISTING_EXPAND), and nothing else.
    expand = ["sha", "lastModified", "tags", "gated", "private", "config", "cardData"]
    expanded = next(iter(api.list_models(author="lister", search="model-0", expand=expand)))
    assert expanded.sha == api.model_info("lister/model-0").sha and expanded.gated is False
    assert expanded.card_data["license"] == "apache-2.0" and "dflash" in expanded.tags
    assert expanded.last_modified is not None and expanded.private is False and expanded.siblings is None


def test_downloads_at_branch_tag_and_sha(api: HfApi, hub: LocalHub, tmp_path: Path) -> None:
    repo_id = "bot/revisions"
    api.create_repo(repo_id)
    first = api.upload_folder(folder_path=write_model(tmp_path / "v1"), repo_id=repo_id, commit_message="v1")
    api.create_tag(repo_id, tag="v1")
    second = api.upload_folder(
        folder_path=write_model(tmp_path / "v2", config={"model_type": "qwen3", "v": 2}), repo_id=repo_id,
        commit_message="v2")  # fmt: skip
    cache = tmp_path / "cache"

    def config_at(revision: str) -> dict:
        path = api.hf_hub_download(repo_id, "config.json", revision=revision, cache_dir=cache)
        return json.loads(Path(path).read_text())

    assert config_at("main")["v"] == 2
    assert "v" not in config_at("v1") and "v" not in config_at(first.oid)
    assert api.model_info(repo_id, revision="v1").sha == first.oid
    assert api.model_info(repo_id, revision=first.oid[:10]).sha == first.oid
    fresh = tmp_path / "snapshots"
    snapshot = Path(api.snapshot_download(repo_id, revision="v1", cache_dir=fresh, allow_patterns=["*.json"]))
    assert snapshot.name == first.oid and sorted(p.name for p in snapshot.iterdir()) == ["config.json"]
    snapshot = Path(api.snapshot_download(repo_id, revision=second.oid, cache_dir=fresh, allow_patterns=["*.md"]))
    assert sorted(p.name for p in snapshot.iterdir()) == ["README.md"]
    # The module-level function works too: the patched constants point it here.
    assert Path(hf_hub_download(repo_id, "README.md", cache_dir=tmp_path / "cache2")).read_text() == CARD

    with pytest.raises(RevisionNotFoundError):
        api.model_info(repo_id, revision="nope")
    with pytest.raises(RevisionNotFoundError):
        api.hf_hub_download(repo_id, "config.json", revision="nope", cache_dir=cache)
    with pytest.raises(RemoteEntryNotFoundError):
        api.hf_hub_download(repo_id, "missing.json", cache_dir=cache)
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_tag(repo_id, tag="v1")
    assert status_of(excinfo) == 409
    api.create_tag(repo_id, tag="v1", exist_ok=True)  # what the bot's tagging does
    refs = api.list_repo_refs(repo_id)
    assert [b.name for b in refs.branches] == ["main"] and [(t.name, t.target_commit) for t in refs.tags] == [
        ("v1", first.oid)]  # fmt: skip


def test_commits_refs_and_tree(api: HfApi, hub: LocalHub) -> None:
    repo_id = "bot/tree"
    api.create_repo(repo_id)
    operations = [CommitOperationAdd(f"draft/{name}", name.encode()) for name in ("a.json", "b.json", "c.json")]
    operations.append(CommitOperationAdd("target/sub/d.json", b"{}"))
    commit = api.create_commit(repo_id, operations=operations, commit_message="Add files", commit_description="why")
    api.create_tag(repo_id, tag="release", revision=commit.oid)

    commits = api.list_repo_commits(repo_id)
    assert [c.title for c in commits] == ["Add files", "initial commit"]
    assert commits[0].commit_id == commit.oid and commits[0].message == "why" and commits[0].authors == ["bot"]
    refs = api.list_repo_refs(repo_id)
    assert refs.branches[0].target_commit == commit.oid and refs.tags[0].name == "release"

    hub.clear_requests()
    files = sorted(api.list_repo_files(repo_id))
    assert files == [".gitattributes", "draft/a.json", "draft/b.json", "draft/c.json", "target/sub/d.json"]
    assert len([r for r in hub.requests() if "/tree/" in r["path"]]) == 3  # 8 entries, 3 per page
    top = {entry.path: type(entry).__name__ for entry in api.list_repo_tree(repo_id)}
    assert top == {".gitattributes": "RepoFile", "draft": "RepoFolder", "target": "RepoFolder"}
    assert [e.path for e in api.list_repo_tree(repo_id, path_in_repo="target/sub")] == ["target/sub/d.json"]

    api.create_commit(repo_id, operations=[CommitOperationDelete("draft/")], commit_message="Drop draft")
    assert sorted(api.list_repo_files(repo_id)) == [".gitattributes", "target/sub/d.json"]
    assert "draft/a.json" in api.list_repo_files(repo_id, revision="release")
    with pytest.raises(RemoteEntryNotFoundError):
        next(iter(api.list_repo_tree(repo_id, path_in_repo="draft")))


def test_stale_parent_commit_is_refused(api: HfApi) -> None:
    repo_id = "bot/race"
    api.create_repo(repo_id)
    base = api.model_info(repo_id).sha
    api.upload_file(path_or_fileobj=b"1", path_in_repo="a.txt", repo_id=repo_id, parent_commit=base)
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.upload_file(path_or_fileobj=b"2", path_in_repo="b.txt", repo_id=repo_id, parent_commit=base)
    assert status_of(excinfo) == 412
    assert "b.txt" not in api.list_repo_files(repo_id)


def test_concurrent_commits_on_one_parent_let_exactly_one_win(api: HfApi) -> None:
    repo_id = "bot/concurrent"
    api.create_repo(repo_id)
    base = api.model_info(repo_id).sha
    outcomes: list[object] = []

    def push(index: int) -> None:
        try:
            api.upload_file(path_or_fileobj=str(index).encode(), path_in_repo=f"f{index}.txt", repo_id=repo_id,
                            parent_commit=base)  # fmt: skip
            outcomes.append("ok")
        except HfHubHTTPError as exc:
            outcomes.append(exc.response.status_code)

    threads = [threading.Thread(target=push, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes, key=str) == [412, 412, 412, "ok"]
    assert len(api.list_repo_commits(repo_id)) == 2


def test_unchanged_files_are_not_uploaded_again(api: HfApi, hub: LocalHub, published: tuple[str, Path, str]) -> None:
    repo_id, folder, commit_id = published
    hub.clear_requests()
    again = api.upload_folder(folder_path=folder, repo_id=repo_id, commit_message="Publish draft again")
    assert again.oid == commit_id  # nothing changed: no new commit
    calls = [(r["method"], r["path"]) for r in hub.requests()]
    assert not any(path.startswith("/_lfs/upload/") for _, path in calls)
    assert ("POST", f"/api/models/{repo_id}/commit/main") not in calls
    assert ("POST", f"/{repo_id}.git/info/lfs/objects/batch") in calls  # asked, and told it is stored


def test_writes_without_token_get_401(anon: HfApi) -> None:
    with pytest.raises(HfHubHTTPError) as excinfo:
        anon.create_repo("bot/anonymous")
    assert status_of(excinfo) == 401 and "Invalid username or password." in str(excinfo.value)
    with pytest.raises(HfHubHTTPError) as excinfo:
        anon.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="bot/draft-a")
    assert status_of(excinfo) == 401


def test_unknown_token_is_rejected_even_for_reads(hub: LocalHub) -> None:
    with pytest.raises(HfHubHTTPError) as excinfo:
        HfApi(endpoint=hub.url, token="hf_wrong").model_info("bot/draft-a")
    assert status_of(excinfo) == 401


def test_read_only_token_cannot_write(hub: LocalHub, published: tuple[str, Path, str]) -> None:
    hub.add_token("hf_reader", "reader")
    reader = HfApi(endpoint=hub.url, token="hf_reader")
    assert reader.model_info(published[0]).sha == published[2]
    with pytest.raises(HfHubHTTPError) as excinfo:
        reader.create_repo("reader/mine")
    assert status_of(excinfo) == 403


def test_private_repo_is_invisible_without_token(api: HfApi, anon: HfApi, tmp_path: Path) -> None:
    repo_id = "bot/secret"
    api.create_repo(repo_id, private=True)
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=repo_id)
    with pytest.raises(RepositoryNotFoundError):
        anon.model_info(repo_id)
    with pytest.raises(RepositoryNotFoundError):
        anon.hf_hub_download(repo_id, "config.json", cache_dir=tmp_path)
    assert repo_id not in [m.id for m in anon.list_models(author="bot")]
    assert repo_id in [m.id for m in api.list_models(author="bot")]
    assert api.model_info(repo_id).private is True
    api.update_repo_settings(repo_id, private=False)
    assert anon.model_info(repo_id).private is False


def test_gated_repo_needs_a_grant(api: HfApi, hub: LocalHub, anon: HfApi, tmp_path: Path) -> None:
    repo_id = "bot/gated"
    api.create_repo(repo_id)
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=repo_id)
    api.update_repo_settings(repo_id, gated="manual")
    hub.add_token("hf_alice", "alice")
    alice = HfApi(endpoint=hub.url, token="hf_alice")
    listed = next(iter(alice.list_models(author="bot", search="gated", expand=["gated"])))
    assert listed.gated == "manual"
    assert alice.model_info(repo_id).gated == "manual"  # metadata stays visible, as on the Hub
    for client in (alice, anon):
        with pytest.raises(GatedRepoError):
            client.hf_hub_download(repo_id, "config.json", cache_dir=tmp_path / "a")
    hub.grant(repo_id, "alice")
    assert Path(alice.hf_hub_download(repo_id, "config.json", cache_dir=tmp_path / "b")).read_text() == "{}"
    with pytest.raises(GatedRepoError):
        anon.hf_hub_download(repo_id, "config.json", cache_dir=tmp_path / "c")


def test_invalid_card_metadata_is_refused_before_upload(api: HfApi, hub: LocalHub) -> None:
    hub.clear_requests()
    with pytest.raises(ValueError, match="Invalid metadata"):
        api.upload_file(path_or_fileobj=b"---\nlicense: [unclosed\n---\n", path_in_repo="README.md",
                        repo_id="bot/draft-a")  # fmt: skip
    assert [r["path"] for r in hub.requests()] == ["/api/validate-yaml"]


def test_commit_referencing_a_missing_lfs_object_is_refused(hub: LocalHub, api: HfApi) -> None:
    repo_id = "bot/raw-commit"
    api.create_repo(repo_id)
    lines = [
        {"key": "header", "value": {"summary": "bad"}},
        {"key": "file", "value": {"path": "ok.txt", "content": base64.b64encode(b"ok").decode(), "encoding": "base64"}},
        {"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "ab" * 32, "size": 5}},
    ]
    response = httpx.post(
        f"{hub.url}/api/models/{repo_id}/commit/main",
        content=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 400 and "never uploaded" in response.json()["error"]
    assert "ok.txt" not in api.list_repo_files(repo_id)  # all or nothing


def test_lfs_protocol_with_chunked_upload(hub: LocalHub, api: HfApi) -> None:
    repo_id = "bot/raw-lfs"
    api.create_repo(repo_id)
    data = os.urandom(3000)
    oid = hashlib.sha256(data).hexdigest()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    batch = httpx.post(
        f"{hub.url}/{repo_id}.git/info/lfs/objects/batch",
        json={"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(data)}]},
        headers=auth,
    ).json()
    actions = batch["objects"][0]["actions"]
    href = actions["upload"]["href"]
    # Only a URL the batch endpoint signed is accepted, for exactly the size it announced, until it expires.
    assert httpx.put(f"{hub.url}/_lfs/upload/{oid}", content=data).status_code == 403
    assert httpx.put(href.replace(f"size={len(data)}", f"size={len(data) + 1}"), content=data).status_code == 403
    assert httpx.put(href.replace(oid, "0" * 64), content=data).status_code == 403
    wrong = httpx.put(href, content=iter([b"x" * len(data)]))
    assert wrong.status_code == 400  # content that does not hash to the oid is refused
    put = httpx.put(href, content=iter([data[:1000], data[1000:]]))  # chunked encoding
    assert put.status_code == 200 and put.request.headers["Transfer-Encoding"] == "chunked"
    assert httpx.put(href, content=data).status_code == 200  # a presigned URL can be used again (a retry)
    assert httpx.post(actions["verify"]["href"], json={"oid": oid, "size": len(data)}, headers=auth).status_code == 200
    again = httpx.post(
        f"{hub.url}/{repo_id}.git/info/lfs/objects/batch",
        json={"operation": "upload", "objects": [{"oid": oid, "size": len(data)}]},
        headers=auth,
    ).json()
    assert "actions" not in again["objects"][0]


def test_expired_upload_url_is_refused(hub: LocalHub, api: HfApi, monkeypatch: pytest.MonkeyPatch) -> None:
    repo_id = "bot/raw-lfs-expired"
    api.create_repo(repo_id)
    data = os.urandom(100)
    monkeypatch.setattr(routes_upload, "UPLOAD_URL_LIFETIME", -1)  # URLs issued already expired
    batch = httpx.post(
        f"{hub.url}/{repo_id}.git/info/lfs/objects/batch",
        json={"operation": "upload", "objects": [{"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}]},
        headers={"Authorization": f"Bearer {TOKEN}"},
    ).json()
    put = httpx.put(batch["objects"][0]["actions"]["upload"]["href"], content=data)
    assert put.status_code == 403 and "expired" in put.json()["error"]


def test_range_requests(hub: LocalHub, published: tuple[str, Path, str]) -> None:
    url = f"{hub.url}/{published[0]}/resolve/main/openvino_model.xml"
    response = httpx.get(url, headers={"Range": "bytes=1-3"})
    assert response.status_code == 206 and response.content == b"net"
    assert response.headers["Content-Range"] == "bytes 1-3/6"
    head = httpx.head(f"{hub.url}/{published[0]}/resolve/main/model.safetensors")
    assert head.headers["Content-Length"] == str(BIG) and head.headers["X-Repo-Commit"] == published[2]
    assert httpx.get(url, headers={"Range": "bytes=9-"}).status_code == 416


# Faults and the request log


def test_fault_status_once_and_delay(api: HfApi, hub: LocalHub, published: tuple[str, Path, str]) -> None:
    hub.set_faults([{"method": "GET", "path": f"^/api/models/{published[0]}$", "status": 503}])
    hub.clear_requests()
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.model_info(published[0])
    assert status_of(excinfo) == 503
    assert api.model_info(published[0]).sha == published[2]
    records = hub.requests()
    assert [(r["status"], r["fault"]) for r in records] == [(503, "status=503"), (200, None)]

    hub.set_faults([FaultRule(path=f"^/api/models/{published[0]}$", delay=0.2)])
    hub.clear_requests()
    assert api.model_info(published[0]).sha == published[2]
    (record,) = hub.requests()
    assert record["fault"] == "delay=0.2" and record["status"] == 200 and record["duration"] >= 0.2


def test_dropped_lfs_upload_is_retried(api: HfApi, hub: LocalHub) -> None:
    repo_id = "bot/flaky-upload"
    api.create_repo(repo_id)
    hub.set_faults([{"method": "PUT", "path": "^/_lfs/upload/", "drop": True}])
    hub.clear_requests()
    api.upload_file(path_or_fileobj=os.urandom(1024), path_in_repo="w.bin", repo_id=repo_id)
    uploads = [r for r in hub.requests() if r["path"].startswith("/_lfs/upload/")]
    assert [(r["status"], r["fault"]) for r in uploads] == [(None, "drop"), (200, None)]
    assert api.model_info(repo_id, files_metadata=True).siblings[-1].lfs.size == 1024


def test_endless_listing_fault(api: HfApi, hub: LocalHub, published: tuple[str, Path, str]) -> None:
    hub.set_faults([{"path": "^/api/models$", "endless_listing": True}])
    listed = [m.id for m in api.list_models(author="bot", search="draft-a", limit=7)]
    assert listed == ["bot/draft-a"] * 7  # the same page again and again, until the client's own limit


def test_network_faults_look_like_a_bad_network_to_the_client(hub: LocalHub, published: tuple[str, Path, str]) -> None:
    """Wrong bytes with the right headers, a proxy's bare 404, silence, a trickle, and a stall part-way."""
    small, big = (f"{hub.url}/{published[0]}/resolve/main/{n}" for n in ("openvino_model.xml", "model.safetensors"))
    clean = httpx.get(small)
    try:
        hub.set_faults([{"path": "openvino_model.xml$", "corrupt": True}])
        corrupt = httpx.get(small)
        assert corrupt.content != clean.content and len(corrupt.content) == len(clean.content)
        assert {k: v for k, v in corrupt.headers.items() if k not in ("date", "x-request-id")} == {
            k: v for k, v in clean.headers.items() if k not in ("date", "x-request-id")
        }
        hub.set_faults([{"path": "openvino_model.xml$", "status": 404, "bare": True}])
        bare = httpx.get(small)
        assert bare.status_code == 404 and not {"x-error-code", "x-error-message"} & set(bare.headers)
        hub.set_faults([{"path": "openvino_model.xml$", "stall": 2}])
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(small, timeout=0.3)
        hub.set_faults([{"path": "openvino_model.xml$", "trickle": 0.3}])
        with httpx.stream("GET", small) as response:
            assert [len(chunk) for _, chunk in zip(range(2), response.iter_raw(), strict=False)] == [1, 1]
        hub.set_faults([{"path": "model.safetensors$", "stall": 2, "after_bytes": 1000}])
        received = 0
        with pytest.raises(httpx.ReadTimeout), httpx.stream("GET", big, timeout=0.3) as response:
            for chunk in response.iter_raw():
                received += len(chunk)
        assert received == 1000
    finally:
        hub.clear_faults()


def test_request_log_over_http(hub: LocalHub, api: HfApi) -> None:
    hub.add_token("hf_carol", "carol", write=True)
    assert admin_get(hub, "/api/_admin/requests", token="hf_carol").status_code == 403
    assert httpx.get(f"{hub.url}/api/_admin/requests").status_code == 401
    httpx.delete(f"{hub.url}/api/_admin/requests", headers={"Authorization": f"Bearer {TOKEN}"})
    list(api.list_models(author="nobody", limit=1))
    records = admin_get(hub, "/api/_admin/requests").json()
    assert [(r["method"], r["path"], r["status"], r["user"]) for r in records] == [
        ("GET", "/api/models", 200, "bot")]  # fmt: skip
    assert records[0]["bytes_out"] > 0 and TOKEN not in json.dumps(records)


# Persistence and processes


def test_state_persists_across_restart(tmp_path: Path) -> None:
    data = tmp_path / "hub"
    with LocalHub(data, HUB_USER, TOKEN) as first:
        api = HfApi(endpoint=first.url, token=TOKEN)
        api.create_repo("bot/kept", private=True)
        api.create_repo("bot/open")
        commit = api.upload_file(path_or_fileobj=b"payload", path_in_repo="w.bin", repo_id="bot/kept")
        api.create_tag("bot/kept", tag="v1")
        first.add_token("hf_dave", "dave")
        with pytest.raises(RuntimeError, match="already served"):
            LocalHub(data, HUB_USER, TOKEN).start()
    with LocalHub(data, HUB_USER, TOKEN) as second:
        api = HfApi(endpoint=second.url, token=TOKEN)
        info = api.model_info("bot/kept", revision="v1")
        assert info.sha == commit.oid and info.private is True
        path = api.hf_hub_download("bot/kept", "w.bin", cache_dir=tmp_path / "cache")
        assert Path(path).read_bytes() == b"payload"
        assert HfApi(endpoint=second.url, token="hf_dave").model_info("bot/open").id == "bot/open"  # token kept
        with pytest.raises(HfHubHTTPError) as excinfo:
            HfApi(endpoint=second.url, token="hf_unknown").model_info("bot/open")
        assert status_of(excinfo) == 401


def test_subprocess_server_and_cli_faults(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"path": "^/api/models$", "status": 429, "retry_after": 0}]))
    process, url = start_subprocess(tmp_path / "hub", HUB_USER, TOKEN, page_size=2, faults_file=faults)
    try:
        api = HfApi(endpoint=url, token=TOKEN)
        api.create_repo("bot/remote")
        with pytest.raises(HfHubHTTPError) as excinfo:
            list(api.list_models())
        assert status_of(excinfo) == 429 and excinfo.value.response.headers["Retry-After"] == "0"
        assert [m.id for m in api.list_models()] == ["bot/remote"]
        records = admin_get_url(url, "/api/_admin/requests").json()
        assert [(r["path"], r["fault"]) for r in records][-2:] == [
            ("/api/models", "status=429"), ("/api/models", None)]  # fmt: skip
    finally:
        stop_subprocess(process)
    assert process.returncode == 0  # SIGTERM ends it cleanly


def admin_get_url(url: str, path: str) -> httpx.Response:
    return httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {TOKEN}"})


# Two writers racing on one LFS object (issue 12.3)


def _publish_at_once(writers: list[HfApi], repo_id: str, data: bytes, parents: list[str | None]) -> list[object]:
    """Each writer commits `data` as openvino_model.bin on its parent, all released together; "ok", the HTTP
    status of a refusal, or the exception raised."""
    start = threading.Barrier(len(parents))
    outcomes: list[object] = [None] * len(parents)

    def publish(index: int) -> None:
        start.wait()
        try:
            writers[index].create_commit(
                repo_id,
                operations=[CommitOperationAdd("openvino_model.bin", data)],
                commit_message=f"writer {index}",
                parent_commit=parents[index],
            )
            outcomes[index] = "ok"
        except HfHubHTTPError as exc:
            outcomes[index] = exc.response.status_code
        except Exception as exc:  # the failure under test is the client's RuntimeError
            outcomes[index] = exc

    threads = [threading.Thread(target=publish, args=(index,)) for index in range(len(parents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_two_writers_upload_one_lfs_object_and_commit_concurrently(hub: LocalHub) -> None:
    """Two clients publish the same bytes at once, as two overlapping `dflash-bot run`s do.

    The upload PUTs are held for a moment so that both writers are told to upload the object (their batch calls
    land while the first PUT is still open); both uploads must succeed, as on the real Hub. The commits share a
    parent, so exactly one wins and the other gets 412; that loser re-reads the head and commits again, which is
    then a no-op because the file is already there.
    """
    repo_id = "bot/race-lfs"
    writers = [HfApi(endpoint=hub.url, token=TOKEN) for _ in range(2)]
    writers[0].create_repo(repo_id)
    hub.set_faults([{"method": "PUT", "path": "^/_lfs/upload/", "delay": 0.3, "times": -1}])
    for round_number in range(10):
        data = os.urandom(64 * 1024)  # fresh content each round: a new LFS object, not yet stored
        oid = hashlib.sha256(data).hexdigest()
        base = writers[0].model_info(repo_id).sha
        hub.clear_requests()
        outcomes = _publish_at_once(writers, repo_id, data, [base, base])
        assert sorted(outcomes, key=str) == [412, "ok"], f"round {round_number}: {outcomes}"
        puts = [r["status"] for r in hub.requests() if r["path"] == f"/_lfs/upload/{oid}"]
        assert puts == [200, 200], f"round {round_number}: both writers uploaded the object"
        loser = outcomes.index(412)
        head = writers[loser].model_info(repo_id).sha
        assert _publish_at_once([writers[loser]], repo_id, data, [head]) == ["ok"]  # the refreshed retry
        assert writers[0].model_info(repo_id).sha == head  # ... changed nothing: the file was already there
        info = writers[0].model_info(repo_id, files_metadata=True)
        (weights,) = [s for s in info.siblings if s.rfilename == "openvino_model.bin"]
        assert weights.lfs is not None and weights.lfs.sha256 == oid
    assert len(writers[0].list_repo_commits(repo_id)) == 11  # the initial commit and one winner per round


def test_concurrent_writers_without_parent_commit_both_succeed(hub: LocalHub, tmp_path: Path) -> None:
    """Without `parent_commit` both commits of the same new object go through (the second may be a no-op)."""
    repo_id = "bot/race-lfs-unlocked"
    writers = [HfApi(endpoint=hub.url, token=TOKEN) for _ in range(2)]
    writers[0].create_repo(repo_id)
    hub.set_faults([{"method": "PUT", "path": "^/_lfs/upload/", "delay": 0.3, "times": -1}])
    for round_number in range(10):
        data = os.urandom(64 * 1024)
        outcomes = _publish_at_once(writers, repo_id, data, [None, None])
        assert outcomes == ["ok", "ok"], f"round {round_number}: {outcomes}"
        path = writers[0].hf_hub_download(repo_id, "openvino_model.bin", cache_dir=tmp_path)
        assert Path(path).read_bytes() == data
