"""Discovery's pure parts (no Hub): kinds from a listing, target resolution in the recipe's order, the size cap."""

from __future__ import annotations

import pytest

from bot.core.errors import Skip
from bot.core.hub_records import RepoListing
from bot.discover.candidates import check_size, kind_from_listing, resolve_target_name
from bot.discover.source_card import read_source_card
from tests.conftest import fast_recipe

RECIPE = fast_recipe()


def source_card(metadata: dict, text: str = ""):
    """The validated card a README with this front matter and body gives (through bot.discover.source_card)."""
    import yaml

    front = f"---\n{yaml.safe_dump(metadata)}---\n" if metadata else ""
    return read_source_card(f"{front}{text}\n", repo_id="z-lab/x")


def listing(architecture: str | None, model_type: str | None = "qwen3") -> RepoListing:
    return RepoListing(
        repo_id="org/x",
        sha="a" * 40,
        last_modified=None,
        tags=(),
        gated=False,
        private=False,
        architectures=(architecture,) if architecture else (),
        model_type=model_type,
    )


@pytest.mark.parametrize(
    "architecture,model_type,kind",
    [
        ("DFlashDraftModel", "qwen3", "dflash"),
        ("DFlashDraftModel", "llama", "dflash-other-base"),
        ("DFlash2DraftModel", "qwen3", "dflash2"),
        ("Qwen3DSparkModel", "qwen3", "dspark"),
        ("Qwen3ForCausalLM", "qwen3", "unknown"),
        (None, None, None),
    ],
)
def test_kind_from_the_listing_alone(architecture, model_type, kind):
    assert kind_from_listing(listing(architecture, model_type)) == kind


@pytest.mark.parametrize(
    "repo,card,text,target,how",
    [
        ("z-lab/Qwen3-8B-DFlash-b16", {"base_model": "Qwen/Qwen3-8B"}, "", "Qwen/Qwen3-8B", "card base_model"),
        (
            "z-lab/Qwen3-8B-DFlash-b16",
            {"base_model": ["Qwen/Qwen3-8B-Base"]},
            "",
            "Qwen/Qwen3-8B-Base",
            "card base_model",
        ),
        (
            "z-lab/Foo",
            {},
            "It is used in conjunction with the target model [Qwen/Qwen3-4B](https://x).",
            "Qwen/Qwen3-4B",
            "card text",
        ),
        ("z-lab/Qwen3-4B-DFlash-b16", {}, "", "Qwen/Qwen3-4B", "repo name"),
        ("z-lab/gemma-3-12b-it-DFlash", {}, "", "google/gemma-3-12b-it", "repo name"),
        ("deepseek-ai/dspark_qwen3_8b_block7", {}, "", "Qwen/Qwen3-8B", "repo name"),
    ],
)
def test_target_resolution_follows_the_recipe_order(repo, card, text, target, how):
    assert resolve_target_name(repo, source_card(card, text), RECIPE) == (target, how)


def test_the_recipe_map_wins_and_no_rule_is_a_skip():
    mapped = RECIPE.model_copy(
        update={"targets": RECIPE.targets.model_copy(update={"map": {"z-lab/Foo": "Qwen/Qwen3-1.7B"}})}
    )
    assert resolve_target_name("z-lab/Foo", source_card({"base_model": "Qwen/Other"}), mapped) == (
        "Qwen/Qwen3-1.7B",
        "recipe map",
    )
    with pytest.raises(Skip, match="cannot tell which target"):
        resolve_target_name("z-lab/Foo", source_card({}), RECIPE)


@pytest.mark.parametrize(
    "repo,text,why",
    [
        ("z-lab/Qwen3.-DFlash-b16", "", "'Qwen/Qwen3.' is not a valid Hub repo id"),
        ("z-lab/Foo", "used in conjunction with the target model Qwen/../etc", "not a valid Hub repo id"),
    ],
)
def test_a_target_name_that_is_not_a_repo_id_is_a_named_skip(repo, text, why):
    with pytest.raises(Skip, match=why):
        resolve_target_name(repo, source_card({}, text), RECIPE)


def test_the_size_cap_is_one_check_with_the_total_in_its_reason():
    # The shipped recipe sets none: the runner classes decide what is downloaded (issue 40).
    assert RECIPE.watch.max_checkpoint_bytes is None
    assert check_size(10**12, 20, RECIPE, subject="a/b", stage="discover") == (10**12, 20)
    cap = 40 * 1024**3
    capped = RECIPE.model_copy(update={"watch": RECIPE.watch.model_copy(update={"max_checkpoint_bytes": cap})})
    assert check_size(10, 20, capped, subject="a/b", stage="discover") == (10, 20)
    with pytest.raises(Skip, match=f"draft \\+ target weights are {cap + 1} bytes"):
        check_size(cap, 1, capped, subject="a/b", stage="discover")
