"""Issue 33: the local Hub refuses what huggingface.co refuses, and answers as it does, for the calls the bot makes.

Each test names where the Hub's behaviour was seen: a documented API answer, huggingface_hub's own tests of the
release this project pins (1.21.0), or huggingface_hub's handling of the answer. Driven by the real client over
real HTTP; the bot's own cards (draft, target, status page) are rendered from the fixture records and checked.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest
from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile, RepoFolder

from bot.core.errors import Failure
from bot.core.record import TargetRecord
from bot.discover.source_card import HUB_LICENSES
from bot.hub.client import Hub
from bot.publish.card import render_draft_card, render_target_card
from bot.status import page
from hubserver import LocalHub, card_rules, gitignore
from tests.conftest import HUB_TOKEN as TOKEN
from tests.records import REPOS, build_record
from tests.status.test_page import status as status_fixture

HUB_USER = "bot"
BASE = "z-lab/Qwen3-Tiny-DFlash-b16"  # the fixture records' source and target, as the cards name them
TARGET_BASE = "Qwen/Qwen3-Tiny"
GOOD = f"---\nlicense: apache-2.0\nlibrary_name: openvino\npipeline_tag: text-generation\nbase_model: {BASE}\n---\n"


@pytest.fixture(scope="module")
def hub(hub: LocalHub) -> Iterator[LocalHub]:
    """The module's local Hub, holding the models the fixture cards name as `base_model`."""
    for repo_id in (BASE, TARGET_BASE, "bot/Mixed-Case"):
        hub.app.store.create_repo("model", repo_id, private=False, author=HUB_USER)
    yield hub


@pytest.fixture(scope="module")
def api(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.url, token=TOKEN)


def validate(hub: LocalHub, content: str, repo_type: str = "model", **headers: str) -> httpx.Response:
    return httpx.post(f"{hub.url}/api/validate-yaml", json={"content": content, "repoType": repo_type}, headers=headers)


def raw_commit(hub: LocalHub, repo_id: str, path: str, data: bytes) -> httpx.Response:
    """A commit straight to the endpoint, past the client's own checks (as another client or a git push might)."""
    lines = [
        {"key": "header", "value": {"summary": "raw"}},
        {"key": "file", "value": {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64"}},
    ]
    return httpx.post(
        f"{hub.url}/api/models/{repo_id}/commit/main",
        content=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"},
    )


# 1. Card metadata


@pytest.mark.parametrize(
    ("metadata", "refused"),
    [
        # huggingface_hub tests/test_repocard.py::test_validate_repocard sets `license = "asdf"` and matches this.
        ("license: asdf", '"license" must be one of ['),
        ("license: 2024-01-01", '"license" must be one of ['),  # a YAML date is not an identifier
        # huggingface_hub tests/test_hf_api.py INVALID_MODELCARD: create_commit raises "Invalid metadata in README.md".
        ("model-index: foo", '"model-index" must be an array'),
        ("model-index:\n- results: []", '"model-index[0].name"'),
        # The Hub's text for a base_model that names no model, as create_commit failures report it.
        ("base_model: nobody/missing", '"base_model" with value "nobody/missing" is not valid. Use a model id'),
        ("base_model: Kokoro 82M", '"base_model" with value "Kokoro 82M" is not valid'),
        ("base_model: local", '"base_model" with value "local" is not valid'),
        (f"base_model: {BASE}\nbase_model_relation: copy", '"base_model_relation" must be one of [adapter, merge'),
        ("pipeline_tag: text-gen", '"pipeline_tag" must be one of ['),  # huggingface.js tasks/src/pipelines.ts
        ("library_name: [openvino]", '"library_name" must be a string'),
        ("tags: [openvino, 4]", '"tags[1]" must be a string'),
        ("license: other\nlicense_name: [x]", '"license_name" must be a string'),
    ],
)
def test_validate_yaml_refuses_what_the_hub_refuses_naming_the_field(hub: LocalHub, metadata: str, refused: str):
    response = validate(hub, f"---\n{metadata}\n---\n# Card\n")
    assert response.status_code == 400
    assert any(refused in error["message"] for error in response.json()["errors"]), response.json()


def test_validate_yaml_accepts_valid_metadata_and_unknown_keys(hub: LocalHub) -> None:
    other = "license: other\nlicense_name: qwen-research\nlicense_link: LICENSE\nquantization: {bits: 4}"
    for content in (GOOD, f"---\n{other}\n---\n", f"---\nbase_model: [{BASE.upper()}, {TARGET_BASE}]\n---\n"):
        assert validate(hub, content).status_code == 200, validate(hub, content).json()
    assert validate(hub, "---\nlicense: [mit, cc-by-4.0]\n---\n", "dataset").status_code == 200
    assert validate(hub, "---\npipeline_tag: nope\n---\n", "dataset").status_code == 200  # a model-card field


def test_validate_yaml_answers_repocard_validate_in_text(hub: LocalHub) -> None:
    """`RepoCard.validate` sends `Accept: text/plain` and raises the body; huggingface_hub's test_repocard.py
    matches `- Error: "license" must be one of` in it."""
    response = validate(hub, "---\nlicense: asdf\n---\n", Accept="text/plain")
    assert response.status_code == 400 and response.text.startswith('- Error: "license" must be one of')


def test_a_commit_with_a_refused_card_is_refused_by_the_hub_itself(hub: LocalHub, api: HfApi) -> None:
    """The Hub checks the card on the commit, not only when a client asks first (a push is refused)."""
    api.create_repo("bot/raw-card")
    refused = raw_commit(hub, "bot/raw-card", "README.md", b"---\nlicense: asdf\n---\n")
    assert refused.status_code == 400 and '"license" must be one of' in refused.json()["error"]
    assert "README.md" not in api.list_repo_files("bot/raw-card")
    assert raw_commit(hub, "bot/raw-card", "README.md", GOOD.encode()).status_code == 200
    with pytest.raises(ValueError, match='"license" must be one of'):  # the client asks validate-yaml first
        api.upload_file(path_or_fileobj=b"---\nlicense: asdf\n---\n", path_in_repo="README.md", repo_id="bot/raw-card")


def test_the_bot_checks_a_card_before_any_upload_and_names_the_field(hub: LocalHub) -> None:
    bot = Hub(hub.url, TOKEN, max_attempts=1)
    bot.validate_card(GOOD, repo_id="bot/x")
    hub.clear_requests()
    with pytest.raises(Failure, match='"license" must be one of') as refused:
        bot.validate_card("---\nlicense: asdf\n---\n", repo_id="bot/x")
    assert refused.value.subject == "bot/x"
    assert [r["path"] for r in hub.requests() if r["path"] != "/api/agent-harnesses"] == ["/api/validate-yaml"]


def test_a_card_the_client_finds_refused_in_a_commit_is_a_failure_naming_the_field(hub: LocalHub) -> None:
    """`create_commit` asks validate-yaml first and raises ValueError("Invalid metadata in README.md. ..."): the bot
    turns it into a Failure (the status page's commit, `Hub.commit_files`, has no check of its own)."""
    bot = Hub(hub.url, TOKEN, max_attempts=1)
    with pytest.raises(Failure, match='"license" must be one of'):
        bot.commit_files("bot/status-page", {"README.md": b"---\nlicense: asdf\n---\n"}, message="status")


def test_the_bots_own_cards_pass_the_hubs_check(hub: LocalHub) -> None:
    """Draft and target cards (LLM and VLM) and the status page, rendered from the fixture records."""
    bot = Hub(hub.url, TOKEN, max_attempts=1)
    for is_vlm in (False, True):
        built = build_record(is_vlm=is_vlm).published_as(REPOS, "fp")
        target = TargetRecord.from_build(built, [built.summary(REPOS.draft)], "fp")
        bot.validate_card(render_draft_card(built), repo_id=REPOS.draft)
        bot.validate_card(render_target_card(target, target_repo=REPOS.target), repo_id=REPOS.target)
    readme = page.render_readme(status_fixture(), endpoint=hub.url)
    bot.validate_card(readme, repo_id="OV/status", repo_type="dataset")


def test_the_hubs_license_list_is_the_one_the_bot_reads_sources_with() -> None:
    assert card_rules.HUB_LICENSES == HUB_LICENSES


# 2. Repo ids, expand, paths and ignore rules


def test_repo_ids_ignore_case_as_on_the_hub(hub: LocalHub, api: HfApi) -> None:
    assert api.model_info("BOT/mixed-case").id == "bot/Mixed-Case"
    assert api.create_repo("bot/mixed-CASE", exist_ok=True).repo_id == "bot/Mixed-Case"
    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo("Bot/MIXED-case")
    assert conflict.value.response.status_code == 409
    api.upload_file(path_or_fileobj=b"x", path_in_repo="a.txt", repo_id="bot/mixed-case")
    assert "a.txt" in api.list_repo_files("BOT/MIXED-CASE")


def test_expand_values_are_checked_and_only_those_asked_for_come_back(hub: LocalHub, api: HfApi) -> None:
    """huggingface_hub tests/test_hf_api.py `test_list_models_expand_unexpected_value` (400) and "Only the selected
    fields are returned"; `usedStorage` is refused in listings (huggingface_hub PR #3182)."""
    unknown: list = ["foo"]  # not one of the client's Literal values: only the server can refuse it
    for call in (lambda: api.model_info(BASE, expand=unknown), lambda: list(api.list_models(expand=["usedStorage"]))):
        with pytest.raises(HfHubHTTPError) as refused:
            call()
        assert refused.value.response.status_code == 400
    info = api.model_info(BASE, expand=["downloads", "usedStorage"])
    assert info.id == BASE and info.sha is None and info.private is None and info.downloads == 0
    assert api.model_info(BASE).sha is not None


@pytest.mark.parametrize("path", ["..\\x", "a\\..\\b", "a/./b"])
def test_dot_segments_are_refused_with_422(hub: LocalHub, api: HfApi, path: str) -> None:
    """The Hub answers 422 for a path like `..\\x` (huggingface_hub only refuses `../` itself)."""
    api.create_repo("bot/paths", exist_ok=True)
    assert raw_commit(hub, "bot/paths", path, b"x").status_code == 422
    preupload = httpx.post(
        f"{hub.url}/api/models/bot/paths/preupload/main",
        json={"files": [{"path": path, "size": 1, "sample": ""}]},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert preupload.status_code == 422


def test_gitignore_is_honoured_at_preupload(hub: LocalHub, api: HfApi) -> None:
    """huggingface_hub leaves out what preupload marks `shouldIgnore` ("Skipped N file(s) in commit (ignored by
    gitignore file)"); the rules come from the `.gitignore` being committed (`gitIgnore`) or the repo's."""
    repo_id = "bot/ignores"
    api.create_repo(repo_id)
    rules = b"*.log\n!keep.log\nlogs/\n/top.txt\n"
    names = ["a.log", "keep.log", "logs/x.txt", "top.txt", "sub/top.txt", "ok.txt"]
    api.create_commit(
        repo_id,
        [CommitOperationAdd(".gitignore", rules), *(CommitOperationAdd(name, b"x") for name in names)],
        commit_message="with rules",
    )
    kept = {".gitattributes", ".gitignore", "keep.log", "sub/top.txt", "ok.txt"}
    assert set(api.list_repo_files(repo_id)) == kept
    api.create_commit(repo_id, [CommitOperationAdd("b.log", b"x")], commit_message="the repo's rules")
    assert set(api.list_repo_files(repo_id)) == kept


def test_gitignore_rules() -> None:
    rules = gitignore.parse("# c\n*.pyc\nbuild/\n/root.md\ndocs/**/*.tmp\n!important.pyc\n")
    ignored = ["a.pyc", "x/y.pyc", "build/a", "x/build/b", "root.md", "docs/a/b.tmp", "docs/c.tmp"]
    kept = ["important.pyc", "x/root.md", "build", "docs.tmp", "a.py"]
    assert [p for p in ignored if not gitignore.is_ignored(p, rules)] == []
    assert [p for p in kept if gitignore.is_ignored(p, rules)] == []


# 3. Thinner answers


def test_every_answer_names_its_request(hub: LocalHub, api: HfApi) -> None:
    """`hf_raise_for_status` reads `X-Request-Id` into the error (`request_id`, "Request ID: ..." in its text)."""
    assert httpx.get(f"{hub.url}/api/models/{BASE}").headers["X-Request-Id"]
    with pytest.raises(RepositoryNotFoundError) as missing:
        api.model_info("bot/nothing-here")
    assert missing.value.request_id and missing.value.request_id in str(missing.value)


def test_an_id_without_namespace_is_answered_with_the_hubs_error_code(hub: LocalHub, api: HfApi, tmp_path) -> None:
    """A bare 404 is a generic HfHubHTTPError; the Hub's `X-Error-Code: RepoNotFound` makes it
    RepositoryNotFoundError (huggingface_hub `hf_raise_for_status`)."""
    assert httpx.get(f"{hub.url}/api/models/gpt2").headers["X-Error-Code"] == "RepoNotFound"
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("gpt2")
    with pytest.raises(RepositoryNotFoundError):
        api.hf_hub_download("gpt2", "config.json", cache_dir=tmp_path)


def test_paths_info(hub: LocalHub, api: HfApi) -> None:
    repo_id = "bot/paths-info"
    api.create_repo(repo_id)
    api.create_commit(
        repo_id,
        [CommitOperationAdd("README.md", GOOD.encode()), CommitOperationAdd("folder/a.txt", b"a")],
        commit_message="first",
    )
    second = api.upload_file(path_or_fileobj=b"b", path_in_repo="folder/b.txt", repo_id=repo_id).oid
    entries = api.get_paths_info(repo_id, ["README.md", "folder", "missing.txt"], expand=True)
    assert [(type(e), e.path) for e in entries] == [(RepoFile, "README.md"), (RepoFolder, "folder")]
    assert entries[0].last_commit is not None and entries[0].last_commit.oid != second
    assert api.get_paths_info(repo_id, ["folder/b.txt"], expand=True)[0].last_commit.oid == second


def test_branches_and_tags_are_created_and_deleted(hub: LocalHub, api: HfApi) -> None:
    repo_id = "bot/refs"
    api.create_repo(repo_id)
    api.create_branch(repo_id, branch="dev/1")
    api.create_branch(repo_id, branch="dev/1", exist_ok=True)
    with pytest.raises(HfHubHTTPError) as exists:
        api.create_branch(repo_id, branch="dev/1")
    assert exists.value.response.status_code == 409
    api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id, revision="dev/1")
    assert "x.txt" in api.list_repo_files(repo_id, revision="dev/1")
    assert "x.txt" not in api.list_repo_files(repo_id)
    api.delete_branch(repo_id, branch="dev/1")
    with pytest.raises(HfHubHTTPError) as default:
        api.delete_branch(repo_id, branch="main")
    assert default.value.response.status_code == 403
    api.create_tag(repo_id, tag="v1")
    api.delete_tag(repo_id, tag="v1")
    refs = api.list_repo_refs(repo_id)
    assert [b.name for b in refs.branches] == ["main"] and refs.tags == []
    with pytest.raises(RevisionNotFoundError):
        api.delete_tag(repo_id, tag="v1")
