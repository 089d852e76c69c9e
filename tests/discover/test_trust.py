"""Who gets published (`bot.discover.trust`, issue 39): trusted authors matched as the Hub matches ids, look-alikes
named, `watch.exclude` patterns, the approvals a dispatch gives, and the recipe's trust section refusing nonsense."""

from __future__ import annotations

import pytest
import yaml

from bot.core.errors import RecipeError, Skip, Stage
from bot.core.recipe import DEFAULT_RECIPE, Recipe, load_recipe
from bot.discover.trust import Trust, edit_distance, excluded_by, lookalike, skeleton

RECIPE = load_recipe()
TRUSTED = RECIPE.watch.trust.draft_authors


def test_the_shipped_recipe_trusts_the_catalogues_publishers_and_the_target_families_owners():
    assert {"z-lab", "deepseek-ai", "RedHatAI", "LiquidAI"} <= set(TRUSTED)
    assert {"Qwen", "google", "openai", "meta-llama"} <= set(RECIPE.watch.trust.target_authors)
    # Each trusted author is listed whole for every search word; the radar searches the whole Hub once per word.
    authored = {(query.author, query.search) for query in RECIPE.watch.authored_queries()}
    words = [query.search for query in RECIPE.watch.radar_queries()]
    assert words == ["dflash", "dspark", "speculator"]
    assert authored == {(author, word) for author in TRUSTED for word in words}


@pytest.mark.parametrize(
    ("author", "imitated"),
    [
        ("z-1ab", "z-lab"),  # a confusable digit
        ("zlab", "z-lab"),  # a separator dropped
        ("z_lab", "z-lab"),
        ("z-labs", "z-lab"),  # one edit
        ("Z-LAB-", "z-lab"),
        ("deepseek-al", "deepseek-ai"),
        ("deepseek_ai1", "deepseek-ai"),  # two edits, a long name
        ("RedHatAl", "RedHatAI"),
        ("LiquidAl", "LiquidAI"),
    ],
)
def test_a_look_alike_author_names_the_trusted_one_it_imitates(author, imitated):
    assert lookalike(author, TRUSTED) == imitated


@pytest.mark.parametrize("author", ["z-lab", "Z-Lab", "mallory", "community", "Qwen", "someone-else"])
def test_the_trusted_themselves_and_plain_strangers_are_no_look_alikes(author):
    assert lookalike(author, TRUSTED) is None


def test_skeleton_and_edit_distance():
    assert skeleton("Z-1ab") == skeleton("zlab") == "zlab"
    assert skeleton("rnodel") == skeleton("model")
    assert edit_distance("kitten", "sitting") == 3 and edit_distance("", "abc") == 3 and edit_distance("a", "a") == 0


def test_trust_matches_ids_case_insensitively_and_a_dispatch_approves_one_repo_and_its_target():
    trust = Trust.of(RECIPE)
    assert trust.approval("Z-LAB/Qwen3-8B-DFlash-b16") == "recipe"
    assert trust.approval("mallory/Qwen3-Mine-DFlash-b16") is None
    dispatched = Trust.of(RECIPE, "Mallory/qwen3-mine-dflash-b16")
    assert dispatched.approval("mallory/Qwen3-Mine-DFlash-b16") == "dispatch"
    assert dispatched.approval("mallory/Another-DFlash") is None
    dispatched.require_target("mallory/Qwen3-Mine-DFlash-b16", "mallory/Qwen3-Mine")  # the dispatch approves the pair
    with pytest.raises(Skip) as caught:
        trust.require_target("z-lab/Qwen3-Mine-DFlash-b16", "mallory/Qwen3-Mine")
    assert caught.value.stage == Stage.APPROVE
    assert "target mallory/Qwen3-Mine is by 'mallory'" in caught.value.message
    assert "watch.trust.target_authors" in caught.value.message
    assert "--only z-lab/Qwen3-Mine-DFlash-b16" in caught.value.message


def test_a_strangers_reason_names_the_author_the_look_alike_and_both_ways_to_approve_it():
    reason = Trust.of(RECIPE).draft_reason("z-1ab/Qwen3-8B-DFlash-b16")
    assert reason.startswith("seen, not approved: author 'z-1ab' (a look-alike of the trusted 'z-lab', and not it)")
    assert "watch.trust.draft_authors" in reason
    assert "dflash-bot run --only z-1ab/Qwen3-8B-DFlash-b16" in reason and "source=z-1ab/Qwen3-8B-DFlash-b16" in reason
    with pytest.raises(Skip):
        Trust.of(RECIPE).require_draft("z-1ab/Qwen3-8B-DFlash-b16")


@pytest.mark.parametrize(
    ("repo", "patterns", "matched"),
    [
        (
            "z-lab/Qwen3-8B-DFlash-b16",
            ["z-lab/qwen3-8b-dflash-b16"],
            "z-lab/qwen3-8b-dflash-b16",
        ),  # as the Hub: any case
        ("Mallory/Anything", ["mallory"], "mallory"),  # an author
        ("someone/Qwen3-DFlash-test", ["someone/*-test"], "someone/*-test"),
        ("spam-042/x-DFlash", ["spam-*"], "spam-*"),  # a pattern of authors
        ("z-lab/Qwen3-8B-DFlash-b16", ["z-lab/Qwen3-4B*", "mallory"], None),
    ],
)
def test_exclude_takes_ids_authors_and_patterns_case_insensitively(repo, patterns, matched):
    assert excluded_by(repo, patterns) == matched


def _recipe(**watch) -> dict:
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text(encoding="utf-8"))
    raw["watch"].update(watch)
    return raw


@pytest.mark.parametrize(
    ("watch", "message"),
    [
        ({"exclude": ["a b"]}, "is not a repo id, an author or a pattern"),
        ({"exclude": ["a/b/c"]}, "is not a repo id, an author or a pattern"),
        ({"trust": {"draft_authors": ["bad author"]}}, "watch.trust.draft_authors"),
        ({"trust": {"drafts": ["z-lab"]}}, "unknown key 'watch.trust.drafts'"),
    ],
)
def test_the_recipes_trust_and_exclude_refuse_what_cannot_be_an_author_or_a_pattern(watch, message, tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(_recipe(**watch)))
    with pytest.raises(RecipeError, match=message):
        load_recipe(path)


def test_trusted_authors_are_deduplicated_as_the_hub_matches_them():
    recipe = Recipe.model_validate(_recipe(trust={"draft_authors": ["z-lab", "Z-Lab"], "target_authors": ["Qwen"]}))
    assert recipe.watch.trust.draft_authors == ["z-lab"]
    assert len(recipe.watch.authored_queries()) == len(recipe.watch.radar_queries())
