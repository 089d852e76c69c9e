"""Draft repos named after the weight format they hold, against the local Hub with real builds (issue 24.4).

One seeded hub (the demo's target and draft) and a sequence of real `run`s share the module, in file order: the
int8 draft published as `…-int8-ov`, an unchanged re-run that exports nothing, a re-validation of both formats (the
recipe's formats changed: the draft is rebuilt against the reused target) whose int4 figures are within the margin
(the int8 repo is kept), and one where int8 is no longer measured (the
draft moves to `…-int4-ov` and the int8 card points there). The margin itself, below and above, is decided on
plain records in tests/builder/test_weight_formats.py: a real run cannot be told which format measures faster.
"""

from __future__ import annotations

import re

import pytest
from huggingface_hub import HfApi, ModelCard

from bot.core.naming import draft_output_repo, target_output_repo
from bot.core.recipe import Recipe
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.run import demo
from bot.run.pipeline import run
from bot.status.memory import README
from bot.status.read import read_status
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_REPOS, fast_recipe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")
REAL_BUILDS = ("int8_run",)  # slow (tests/conftest.py): a real `run`: exports and GenAI validation in int8


def recipe_with(formats: list[str], margin: float = 0.1) -> Recipe:
    """The fast test recipe measuring the draft in `formats`, with the format switch margin given."""
    recipe = fast_recipe(num_assistant_tokens=[3, 7])
    return recipe.model_copy(
        update={
            "export": recipe.export.model_copy(update={"draft_weight_formats": formats}),
            "publish": recipe.publish.model_copy(update={"format_switch_margin": margin}),
        }
    )


INT8_ONLY = recipe_with(["int8"])
INT4_ONLY = recipe_with(["int4"])
BOTH_WIDE_MARGIN = recipe_with(["int4", "int8"], margin=1.0)  # int4 would have to be twice as fast to replace int8
INT8_OUT = draft_output_repo(INT8_ONLY.publish, demo.DRAFT_REPO, "int8")
INT4_OUT = draft_output_repo(INT8_ONLY.publish, demo.DRAFT_REPO, "int4")
TARGET_OUT = target_output_repo(INT8_ONLY.publish, demo.TARGET_REPO)


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The shared local Hub (conftest) with the demo's target and draft (the broken and DSpark drafts left out)."""
    demo.seed(hub.url, TOKEN, tmp_path_factory.mktemp("seed"), repos=SEEDED_REPOS[:2])
    return hub


def run_with(server: LocalHub, recipe: Recipe, tmp_path, **options):
    hub = Hub(server.url, TOKEN)
    server.clear_requests()
    return run(recipe, hub, hub, RunOptions(work=tmp_path, **options))


def draft_outcome(report):
    (outcome,) = [o for o in report.outcomes if o.source == demo.DRAFT_REPO]
    return outcome


def card_of(server: LocalHub, repo: str) -> ModelCard:
    return ModelCard(Hub(server.url).read_file(repo, "README.md").decode())


@pytest.fixture(scope="module")
def int8_run(hub, tmp_path_factory):
    return run_with(hub, INT8_ONLY, tmp_path_factory.mktemp("w"))


def test_the_int8_draft_is_published_as_int8_with_int8_tags_and_metadata(hub, int8_run):
    outcome = draft_outcome(int8_run)
    assert outcome.status == "published", outcome
    assert outcome.repos == [INT8_OUT, TARGET_OUT] and INT8_OUT.endswith("-DFlash-b16-int8-ov")
    api = HfApi(endpoint=hub.url)
    assert not api.repo_exists(INT4_OUT)
    card = card_of(hub, INT8_OUT)
    meta = card.data.to_dict()
    assert "int8" in meta["tags"] and "int4" not in meta["tags"]
    assert meta["quantization"] == {"weight_format": "int8", "bits": 8, "library": "nncf"}
    assert "weights compressed to INT8" in card.text and "--weight-format int8" in card.text
    assert Hub(hub.url).draft_record(INT8_OUT).export.draft_weight_format == "int8"
    # The target keeps its int4 name, tags and metadata.
    assert TARGET_OUT.endswith("-int4-ov")
    target_meta = card_of(hub, TARGET_OUT).data.to_dict()
    assert "int4" in target_meta["tags"] and target_meta["quantization"]["weight_format"] == "int4"
    commits = [c.title for c in api.list_repo_commits(INT8_OUT)]
    assert any("to OpenVINO int8" in title for title in commits), commits


def test_an_unchanged_source_is_found_under_its_format_name_and_exported_nowhere(hub, int8_run, tmp_path):
    report = run_with(hub, INT8_ONLY, tmp_path)
    outcome = draft_outcome(report)
    assert (outcome.status, outcome.repos) == ("up-to-date", [INT8_OUT, TARGET_OUT])
    assert report.commits == []
    paths = [r["path"] for r in hub.requests()]
    assert not [p for p in paths if re.search(r"\.(safetensors|bin)$", p)]
    # The status memory's namespace listing shows no int4 repo: its name costs no request.
    assert not [p for p in paths if INT4_OUT in p]


def test_a_revalidation_of_both_formats_within_the_margin_keeps_the_format_and_the_repo(hub, int8_run, tmp_path):
    report = run_with(hub, BOTH_WIDE_MARGIN, tmp_path)
    outcome = draft_outcome(report)
    assert (outcome.status, outcome.repos) == ("published", [INT8_OUT, TARGET_OUT]), outcome
    assert not HfApi(endpoint=hub.url).repo_exists(INT4_OUT)
    formats = Hub(hub.url).draft_record(INT8_OUT).draft_formats.model_dump()
    speedups = {f["weight_format"]: f["speedup"] for f in formats["formats"]}
    assert set(speedups) == {"int4", "int8"}, formats  # both measured again, against one baseline
    # Not asserted: that the point estimates fall within the margin. On a busy 2-core machine they measured int4
    # x4.676 and int8 x1.766 and the run kept int8 all the same: the decision is the intervals', held below.
    assert (formats["chosen"], formats["published_before"], formats["switch_margin"]) == ("int8", "int8", 1.0)
    if speedups["int4"] > speedups["int8"] * 1.02:  # int4 measured faster (beyond a tie): kept all the same
        assert formats["reason"].startswith("int8: kept as published"), formats["reason"]
    assert "Superseded" not in card_of(hub, INT8_OUT).text


def test_a_switch_publishes_the_new_repo_and_points_the_old_card_to_it(hub, int8_run, tmp_path):
    """The published int8 is no longer measured (the recipe's formats changed): the draft moves to its int4 name."""
    report = run_with(hub, INT4_ONLY, tmp_path)
    outcome = draft_outcome(report)
    assert (outcome.status, outcome.repos) == ("published", [INT4_OUT, TARGET_OUT]), outcome
    assert f"replaces {INT8_OUT}" in outcome.reason
    reader = Hub(hub.url)
    assert reader.draft_record(INT4_OUT).draft_weight_format == "int4"
    assert "int4" in card_of(hub, INT4_OUT).data.to_dict()["tags"]
    # The old repo keeps its int8 build and its record; its card says where the draft went, at the top.
    old = card_of(hub, INT8_OUT)
    assert old.text.strip().startswith(f"> **Superseded by [{INT4_OUT}](https://huggingface.co/{INT4_OUT}).**")
    assert old.data.to_dict()["base_model"] == demo.DRAFT_REPO and "int8" in old.data.to_dict()["tags"]
    assert reader.draft_record(INT8_OUT).draft_weight_format == "int8"
    assert any(title == f"Superseded by {INT4_OUT}" for title in _titles(hub, INT8_OUT))
    # The target's card, the status page and the collection list the new repo, and not the old one.
    assert [d.repo for d in reader.target_record(TARGET_OUT).drafts] == [INT4_OUT]
    status_repo = INT4_ONLY.status_repo_id
    entry = read_status(reader, status_repo).entry(demo.DRAFT_REPO)
    assert (entry.draft_repo, entry.status) == (INT4_OUT, "published")
    assert INT8_OUT not in entry.repo_shas
    page = reader.read_file(status_repo, README, repo_type="dataset").decode()
    assert INT4_OUT in page and INT8_OUT not in page
    slug = report.collection.rsplit("/collections/", 1)[-1]
    items = {i.item_id for i in HfApi(endpoint=hub.url, token=TOKEN).get_collection(slug).items}
    assert INT4_OUT in items and INT8_OUT not in items


def test_after_a_switch_the_plan_finds_the_newest_repo_and_exports_nothing(hub, int8_run, tmp_path):
    """Both names now hold a record of the source: the newer build (int4) is the published one."""
    for options in ({}, {"recheck": True}):  # from the status memory, and examined again (both records read)
        report = run_with(hub, INT4_ONLY, tmp_path, **options)
        outcome = draft_outcome(report)
        assert (outcome.status, outcome.repos) == ("up-to-date", [INT4_OUT, TARGET_OUT]), (options, outcome)
        assert report.commits == []
        assert not [r for r in hub.requests() if re.search(r"\.(safetensors|bin)$", r["path"])]


def _titles(server: LocalHub, repo: str) -> list[str]:
    return [c.title for c in HfApi(endpoint=server.url).list_repo_commits(repo)]
