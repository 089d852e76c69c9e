"""The publisher's rules that need no build (`bot.publish.publisher`): the commit message, a record without file hashes
refused, and, on a real local Hub, a bundle that failed its gates or would overwrite another source's build never
published, and a card refresh of a repo that holds no build committing nothing."""

from __future__ import annotations

import pytest

from bot.builder.bundle import Bundle
from bot.core import record
from bot.core.errors import Failure, Skip
from bot.core.outcome import Status
from bot.core.record import OfficialTarget, Repos
from bot.hub.client import Hub
from bot.publish.publisher import _listed, _message, publish_bundle
from bot.publish.refresh import refresh_cards
from tests.conftest import HUB_TOKEN
from tests.publish.handmade import make_bundle, seed_sources
from tests.records import REPOS, SOURCE_SHA, TARGET_SHA, build_record

# huggingface_hub's own upload passes a file object as `data=`, which httpx deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

OFFICIAL = "OpenVINO/Qwen3-Tiny-int4-ov"


def with_official(used: bool) -> record.BuildRecord:
    official = OfficialTarget(repo=OFFICIAL, revision="c" * 40, used=used, reason=None if used else "too old")
    return build_record().model_copy(update={"official_target": official})


@pytest.fixture(scope="module")
def hub(hub):
    seed_sources(hub.url, HUB_TOKEN)
    return hub


def bundle(tmp_path, built: record.BuildRecord, repos: Repos = REPOS) -> Bundle:
    return make_bundle(tmp_path / "bundle", built=built, repos=repos)


def test_commit_message_names_role_source_short_revision_and_format():
    built = build_record()
    assert _message("draft", built.source, "int8") == (
        f"Export draft z-lab/Qwen3-Tiny-DFlash-b16@{SOURCE_SHA[:7]} to OpenVINO int8 (dflash-bot)"
    )
    assert _message("target", built.target, "int4") == (
        f"Export target Qwen/Qwen3-Tiny@{TARGET_SHA[:7]} to OpenVINO int4 (dflash-bot)"
    )


def test_a_record_without_file_hashes_certifies_nothing():
    with pytest.raises(Failure, match="lists no file hashes for ns/x: not published"):
        _listed(None, "ns/x")


def test_a_bundle_that_failed_its_gates_is_never_published(hub, tmp_path):
    writer = Hub(hub.url, HUB_TOKEN)
    failed = bundle(tmp_path, build_record(status="failed"))
    with pytest.raises(Failure, match="did not pass validation, not published"):
        publish_bundle(writer, failed, REPOS, private=False)
    assert writer.files_or_none(REPOS.draft) is None and writer.files_or_none(REPOS.target) is None


def test_a_draft_repo_holding_another_sources_build_is_not_overwritten(hub, tmp_path):
    writer = Hub(hub.url, HUB_TOKEN)
    repos = Repos(draft="maintainer/Shared-int4-ov", target="maintainer/Shared-target-int4-ov")
    other = build_record().model_copy(
        update={"source": build_record().source.model_copy(update={"repo": "someone/Other-DFlash"})}
    )
    writer.commit_files(
        repos.draft, {record.PROVENANCE_FILE: record.to_json(other).encode()}, message="seed", repo_type="model"
    )
    head = writer.files_or_none(repos.draft)
    with pytest.raises(Skip, match="holds a build of someone/Other-DFlash, not of z-lab/Qwen3-Tiny-DFlash-b16"):
        publish_bundle(writer, bundle(tmp_path, build_record(), repos), repos, private=False)
    assert writer.files_or_none(repos.draft).sha == head.sha
    assert writer.files_or_none(repos.target) is None


def test_refresh_cards_needs_repos_and_commits_nothing_where_no_build_is(hub):
    writer = Hub(hub.url, HUB_TOKEN)
    with pytest.raises(Failure, match="names no repos to refresh"):
        refresh_cards(writer, build_record(), private=False)
    gone = Repos(draft="maintainer/Gone-int4-ov", target="maintainer/Gone-target-int4-ov")
    result = refresh_cards(writer, build_record().model_copy(update={"repos": gone}), private=False)
    assert (result.status, result.repos, result.commits) == (Status.UP_TO_DATE, gone, [])
