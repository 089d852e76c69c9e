"""The Hub's card check before a publish (`bot.publish.card_check`), on a real local Hub that checks cards as the
Hub does (issue 33): a refused card stops its group before the first write, naming the field; the fixture
records' cards pass."""

from __future__ import annotations

import pytest

from bot.core.errors import Failure
from bot.core.fingerprints import template_fingerprint
from bot.hub.client import Hub
from bot.plan.job import OutputRepos
from bot.publish.card_check import refused_card
from bot.publish.publisher import publish_bundle
from tests.conftest import HUB_TOKEN
from tests.publish.handmade import make_bundle, seed_sources
from tests.records import REPOS, build_record

# huggingface_hub's own upload passes a file object as `data=`, which httpx deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")


@pytest.fixture(scope="module")
def hub(hub):
    seed_sources(hub.url, HUB_TOKEN)
    return hub


def test_the_fixture_records_cards_pass(hub, tmp_path):
    bundle = make_bundle(tmp_path / "bundle", repos=REPOS)
    built = bundle.record
    outputs = OutputRepos({built.draft_weight_format: REPOS.draft}, REPOS.target)
    members = [(bundle, outputs.for_build(built.draft_weight_format, built.official_target))]
    assert refused_card(Hub(hub.url, HUB_TOKEN, max_attempts=1), members, template_fingerprint()) is None


def test_a_publish_whose_card_the_hub_refuses_uploads_nothing(hub, tmp_path):
    """A target whose license the Hub does not list: the group fails naming the field before its first write."""
    built = build_record()
    refused = built.model_copy(update={"target": built.target.model_copy(update={"license": "asdf"})})
    writer = Hub(hub.url, HUB_TOKEN, max_attempts=1)
    hub.clear_requests()
    with pytest.raises(Failure, match='"license" must be one of'):
        publish_bundle(writer, make_bundle(tmp_path / "bundle", built=refused, repos=REPOS), REPOS, private=False)
    asked = [r for r in hub.requests() if r["method"] not in ("GET", "HEAD")]
    assert [r["path"] for r in asked if r["path"] != "/api/validate-yaml"] == []
    assert writer.files_or_none(REPOS.target) is None
