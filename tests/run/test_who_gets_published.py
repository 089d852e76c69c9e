"""Who gets published (issue 39), against a local Hub seeded as the Hub now is: the trusted z-lab draft, a stranger's
pair, a stranger's draft over a trusted target, a trusted draft over a stranger's target, a look-alike author, a
stranger's DSpark draft, and a flood of stranger repos matching "dflash", larger than the radar and newer than the
trusted draft. A scheduled run plans the trusted draft and nothing of the strangers', each stranger's reason saying
how to approve it; a dispatch of the stranger's repo builds it, its card says so, and later scheduled runs keep it
as it is, listed, until the maintainer dispatches it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from bot.core.naming import draft_output_repo
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.run import demo
from bot.run.pipeline import run
from bot.run.report import MAX_TABLE_BYTES
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_KIND, SEEDED_REPOS, fast_recipe
from tinymodels import make_tiny

REAL_BUILDS = ("dispatched",)  # slow (tests/conftest.py): a real build of the stranger's pair
RADAR = 10  # max_candidates in these tests: the flood is larger
FLOOD = 15
STRANGER, STRANGER_TARGET = "mallory/Qwen3-Mine-DFlash-b16", "mallory/Qwen3-Mine"
ON_TRUSTED_TARGET = "mallory/Qwen3-Tiny-DFlash-b16"  # a stranger's draft over Qwen/Qwen3-Tiny
TRUSTED_ON_STRANGER = "z-lab/Qwen3-Mine-DFlash-b16"  # a trusted author's draft over mallory's target
LOOKALIKE = "z-1ab/Qwen3-Tiny-DFlash-b16"
STRANGER_DSPARK = "community/Qwen3-Tiny-DSpark-Mine"
HUGE = "x" * 1_000_000  # a megabyte-long string in a stranger's config
HOSTILE = "hostile/Qwen3-Huge-DFlash"
RECIPE = fast_recipe()
SCHEDULED = RECIPE.model_copy(update={"watch": RECIPE.watch.model_copy(update={"max_candidates": RADAR})})
STRANGERS = (STRANGER, ON_TRUSTED_TARGET, LOOKALIKE, STRANGER_DSPARK, HOSTILE)


def _upload(api: HfApi, repo: str, folder: Path) -> None:
    api.create_repo(repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=folder)


def _flood(hub: LocalHub, folder: Path, first: int) -> None:
    """FLOOD stranger repos matching "dflash", each by another stranger, newer than everything before them."""
    for index in range(first, first + FLOOD):
        hub.seed_folder(f"spam{index:03d}/Qwen3-Spam-DFlash-b16", folder)


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    seed = tmp_path_factory.mktemp("seed")
    api = HfApi(endpoint=hub.url, token=TOKEN)
    # The trusted pair z-lab/Qwen3-Tiny-DFlash-b16 over Qwen/Qwen3-Tiny, and more.
    demo.seed(hub.url, TOKEN, seed, SEEDED_REPOS)
    make_tiny(SEEDED_KIND, seed / "mine", target_repo=STRANGER_TARGET)
    mine = seed / "mine"
    config = json.loads((mine / "draft" / "config.json").read_text())
    spam = seed / "spam"
    spam.mkdir()
    (spam / "config.json").write_text(json.dumps(config))
    _flood(hub, spam, 0)  # newer than the trusted draft: it pushes it out of the radar's "dflash" search
    # The strangers, newest of all (the radar sees them, and the rest of its room goes to the flood).
    _upload(api, STRANGER_TARGET, mine / "target")
    _upload(api, STRANGER, mine / "draft")
    _upload(api, TRUSTED_ON_STRANGER, mine / "draft")
    for repo in (ON_TRUSTED_TARGET, LOOKALIKE):
        _upload(api, repo, seed / SEEDED_KIND / "draft")
    _upload(api, STRANGER_DSPARK, seed / "dspark" / "draft")
    hostile = seed / "hostile"
    hostile.mkdir()
    (hostile / "config.json").write_text(json.dumps({**config, "architectures": [HUGE], "model_type": HUGE}))
    hub.seed_folder(HOSTILE, hostile)
    return hub


@pytest.fixture(scope="module")
def scheduled(hub, tmp_path_factory):
    """A scheduled dry run of the shipped recipe (radar smaller than the flood)."""
    hub_client = Hub(hub.url, TOKEN)
    return run(SCHEDULED, hub_client, hub_client, RunOptions(dry_run=True, work=tmp_path_factory.mktemp("dry")))


def _outcomes(report) -> dict:
    return {outcome.source: outcome for outcome in report.outcomes}


def test_a_scheduled_run_plans_the_trusted_draft_after_the_flood_and_nothing_of_the_strangers(scheduled):
    outcomes = _outcomes(scheduled)
    assert outcomes[demo.DRAFT_REPO].status == "planned", outcomes[demo.DRAFT_REPO]
    planned = {source for source, outcome in outcomes.items() if outcome.status == "planned"}
    assert planned == {demo.DRAFT_REPO}, planned
    for source in (*STRANGERS, TRUSTED_ON_STRANGER):
        outcome = outcomes[source]
        assert (outcome.status, outcome.stage) == ("skipped", "approve"), outcome
        assert outcome.reason.removeprefix("approve: ").startswith("seen, not approved: "), outcome.reason
        assert "watch.trust" in outcome.reason and f"--only {source}" in outcome.reason, outcome.reason
        assert f"source={source}" in outcome.reason


def test_each_strangers_reason_names_the_author_and_a_look_alike_says_whom_it_imitates(scheduled):
    outcomes = _outcomes(scheduled)
    assert "author 'mallory' is not among the recipe's trusted draft authors" in outcomes[STRANGER].reason
    assert "look-alike of the trusted 'z-lab'" in outcomes[LOOKALIKE].reason
    assert "look-alike" not in outcomes[STRANGER].reason
    assert f"its target {STRANGER_TARGET} is by 'mallory'" in outcomes[TRUSTED_ON_STRANGER].reason


def test_the_radar_is_bounded_per_search_and_one_searchs_flood_starves_no_other(scheduled):
    outcomes = _outcomes(scheduled)
    spam = [source for source in outcomes if source.startswith("spam")]
    # The "dflash" search saw its newest RADAR repos: the five "dflash" repos seeded after the flood, then the newest
    # of the flood; never more.
    newer = (STRANGER, TRUSTED_ON_STRANGER, ON_TRUSTED_TARGET, LOOKALIKE, HOSTILE)
    assert len(spam) == RADAR - len(newer) and set(spam) < {f"spam{i:03d}/Qwen3-Spam-DFlash-b16" for i in range(FLOOD)}
    assert STRANGER_DSPARK in outcomes  # the "dspark" search is not starved by the "dflash" flood


def test_a_strangers_megabyte_config_string_stays_out_of_the_summary(scheduled):
    from bot.run.actions import summary_markdown

    summary = summary_markdown(scheduled, title="watch", endpoint="http://hub")
    assert len(summary.encode()) < MAX_TABLE_BYTES + 64 * 1024 < 1024 * 1024
    assert HUGE[:10_000] not in summary and HUGE[:10_000] not in json.dumps(scheduled.to_dict())


@pytest.fixture(scope="module")
def dispatched(hub, scheduled, tmp_path_factory):
    """A maintainer's dispatch of the stranger's repo: a real run, building and publishing it."""
    work = tmp_path_factory.mktemp("dispatch")
    hub_client = Hub(hub.url, TOKEN)
    return run(SCHEDULED, hub_client, hub_client, RunOptions(only=STRANGER, work=work))


def test_a_dispatch_builds_the_strangers_pair_and_its_card_says_a_maintainer_asked(hub, dispatched):
    outcome = _outcomes(dispatched)[STRANGER]
    assert outcome.status == "published", outcome
    draft_repo = draft_output_repo(RECIPE.publish, STRANGER, "int4")
    assert outcome.repos[0] == draft_repo
    reader = Hub(hub.url)
    record = json.loads(reader.read_file(draft_repo, "openvino_export.json"))
    assert record["approved_by"] == "dispatch" and record["target"]["repo"] == STRANGER_TARGET
    card = (reader.read_file(draft_repo, "README.md") or b"").decode()
    assert "on a maintainer's request" in card and "not by the schedule" in card
    target_card = (reader.read_file(outcome.repos[1], "README.md") or b"").decode()
    assert "on a maintainer's request" in target_card


def test_a_later_scheduled_run_keeps_the_dispatched_pair_listed_and_as_it_is(hub, dispatched, tmp_path):
    """No rebuild, no removal: the radar no longer lists the stranger (the flood is newer), yet the run examines it
    from the status memory, finds it current and keeps its line on the status page; after a new commit of the
    source, it is still kept as it is, the reason saying that only another dispatch updates it."""
    draft_repo = _outcomes(dispatched)[STRANGER].repos[0]
    # The trusted authors left out here only to keep this test's run from building them.
    keep_out = SCHEDULED.watch.model_copy(update={"exclude": ["z-lab", "deepseek-ai"]})
    recipe = SCHEDULED.model_copy(update={"watch": keep_out})
    client = Hub(hub.url, TOKEN)
    head = client.head(draft_repo)
    (tmp_path / "spam").mkdir()
    (tmp_path / "spam" / "config.json").write_bytes(client.read_file(STRANGER, "config.json") or b"{}")
    _flood(hub, tmp_path / "spam", FLOOD)  # pushes the stranger out of every listing
    second = run(recipe, client, client, RunOptions(work=tmp_path / "second"))
    assert _outcomes(second)[STRANGER].status == "up-to-date", _outcomes(second)[STRANGER]
    assert client.head(draft_repo) == head and not [c for c in second.commits if c["repo"] == draft_repo]
    status = json.loads(client.read_file(RECIPE.status_repo_id, "status.json", repo_type="dataset"))
    entry = next(entry for entry in status["entries"] if entry["source"] == STRANGER)
    assert entry["status"] == "published" and entry["draft_repo"] == draft_repo
    page = (client.read_file(RECIPE.status_repo_id, "README.md", repo_type="dataset") or b"").decode()
    assert "Seen, not approved" in page and "dflash-bot run --only spam" in page

    HfApi(endpoint=hub.url, token=TOKEN).upload_file(
        path_or_fileobj=b"# a new revision\n", path_in_repo="NOTES.md", repo_id=STRANGER
    )
    third = run(recipe, client, client, RunOptions(work=tmp_path / "third"))
    kept = _outcomes(third)[STRANGER]
    assert kept.status == "up-to-date" and "only another dispatch approves that" in kept.reason, kept
    assert client.head(draft_repo) == head
