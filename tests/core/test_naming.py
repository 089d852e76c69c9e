"""Output repo names are injective, valid Hub ids, and every source repo id is checked where it enters."""

from __future__ import annotations

import itertools
import random
import string
from pathlib import Path
from typing import get_args

import pytest
from huggingface_hub.utils import validate_repo_id as hf_validate_repo_id

from bot.core.errors import RecipeError, Skip
from bot.core.naming import (
    DRAFT_WEIGHT_FORMATS,
    MAX_NAME_LENGTH,
    draft_output_repo,
    draft_output_repos,
    target_output_repo,
    validate_repo_id,
)
from bot.core.recipe import DEFAULT_RECIPE, PublishSettings, WeightFormat, load_recipe

DEFAULTS = PublishSettings(namespace="OpenVINO-drafts")  # draft home z-lab, target home Qwen
NO_HOME = PublishSettings(namespace="OpenVINO-drafts", draft_home_namespace=None, target_home_namespace=None)


def test_same_name_in_two_namespaces_gets_two_outputs():
    """The collision of issue 12.2: before, both were OpenVINO-drafts/Qwen3-Coll-int4-ov."""
    home_qwen = PublishSettings(namespace="OpenVINO-drafts", draft_home_namespace="Qwen")
    assert draft_output_repo(home_qwen, "Qwen/Qwen3-Coll", "int4") == "OpenVINO-drafts/Qwen3-Coll-int4-ov"
    assert (
        draft_output_repo(home_qwen, "other-org/Qwen3-Coll", "int4") == "OpenVINO-drafts/other-org__Qwen3-Coll-int4-ov"
    )
    assert target_output_repo(DEFAULTS, "Qwen/Qwen3-Coll") == "OpenVINO-drafts/Qwen3-Coll-int4-ov"
    assert target_output_repo(DEFAULTS, "other-org/Qwen3-Coll") == "OpenVINO-drafts/other-org__Qwen3-Coll-int4-ov"


def test_home_namespaces_keep_todays_names():
    recipe = load_recipe()
    publish = recipe.publish
    assert (
        draft_output_repo(publish, "z-lab/Qwen3-8B-DFlash-b16", "int4") == "OpenVINO-drafts/Qwen3-8B-DFlash-b16-int4-ov"
    )
    assert target_output_repo(publish, "Qwen/Qwen3-8B") == "OpenVINO-drafts/Qwen3-8B-int4-ov"
    assert target_output_repo(publish, "qwen/Qwen3-8B") == "OpenVINO-drafts/Qwen3-8B-int4-ov"  # Hub ids ignore case
    assert (
        draft_output_repo(recipe.publish, "deepseek-ai/dspark_qwen3_8b_block7", "int4")
        == "OpenVINO-drafts/deepseek-ai__dspark_qwen3_8b_block7-int4-ov"
    )
    assert target_output_repo(recipe.publish, "google/gemma-4-E2B") == "OpenVINO-drafts/google__gemma-4-E2B-int4-ov"
    # No home: every name carries its namespace.
    assert (
        draft_output_repo(NO_HOME, "z-lab/Qwen3-8B-DFlash-b16", "int4")
        == "OpenVINO-drafts/z-lab__Qwen3-8B-DFlash-b16-int4-ov"
    )


def test_a_home_name_holding_the_separator_is_prefixed():
    """Else z-lab/a__b (bare: a__b) and a/b (prefixed: a__b) would meet."""
    assert draft_output_repo(DEFAULTS, "z-lab/a__b", "int4") == "OpenVINO-drafts/z-lab__a__b-int4-ov"
    assert draft_output_repo(DEFAULTS, "a/b", "int4") == "OpenVINO-drafts/a__b-int4-ov"


def test_long_names_are_shortened_deterministically_with_a_hash():
    base = "Qwen3-" + "Very-Long-Model-Name-" * 4  # 91 characters with the last letter: legal as a source
    first, second = f"some-org/{base}A", f"some-org/{base}B"
    out_first, out_second = draft_output_repo(DEFAULTS, first, "int4"), draft_output_repo(DEFAULTS, second, "int4")
    assert out_first != out_second
    assert out_first == draft_output_repo(DEFAULTS, first, "int4")  # deterministic
    for output in (out_first, out_second):
        name = output.split("/")[1]
        assert len(name) <= MAX_NAME_LENGTH and name.startswith("some-org__Qwen3-Very-Long")
        assert name.endswith("-int4-ov")  # the template's suffix stays readable
        hf_validate_repo_id(output)
    # The longest legal source name, in and out of the home namespace.
    longest = "x" * MAX_NAME_LENGTH
    assert len(draft_output_repo(DEFAULTS, f"z-lab/{longest}", "int4").split("/")[1]) == MAX_NAME_LENGTH
    assert len(draft_output_repo(DEFAULTS, f"other/{longest}", "int4").split("/")[1]) == MAX_NAME_LENGTH


def test_names_that_could_be_forged_are_shortened_too():
    """A source whose name looks like another source's shortened output, or whose namespace holds `_`, is
    hashed itself, so it cannot take that output."""
    victim = "z-lab/" + "Q" * 95
    victim_out = draft_output_repo(DEFAULTS, victim, "int4")
    forged_name = victim_out.split("/")[1].removesuffix("-int4-ov")
    assert draft_output_repo(DEFAULTS, f"z-lab/{forged_name}", "int4") != victim_out
    assert "-h" in draft_output_repo(DEFAULTS, "my_org/model", "int4").split("/")[1]
    assert draft_output_repo(DEFAULTS, "my_org/model", "int4") != draft_output_repo(DEFAULTS, "my/org__model", "int4")


def _adversarial_sources() -> list[str]:
    rng = random.Random(12)
    namespaces = ["z-lab", "Z-Lab", "Qwen", "qwen", "other-org", "a", "a_b", "a_b_c", "my_org", "org", "x" * 40]
    names = [
        "Qwen3-Coll",
        "qwen3-coll",
        "b",
        "b_c",
        "c",
        "__x",
        "x__y",
        "org__model",
        "model",
        "model-h0123456789ab",
        "Q" * 95,
        "Q" * 96,
        "Q" * 94 + "-h",
        "a.b",
        "a_b__c",
    ]
    for _ in range(300):
        alphabet = string.ascii_letters + string.digits + "_-."
        length = rng.choice([1, 5, 30, 80, 90, 96])
        body = "".join(rng.choice(alphabet) for _ in range(length))
        names.append(f"A{body}Z"[:MAX_NAME_LENGTH] if length > 2 else "Ab")
    sources = []
    for namespace, name in itertools.product(namespaces, names):
        try:
            sources.append(validate_repo_id(f"{namespace}/{name}", what="test source"))
        except Skip:  # `--`, `..` and the like cannot be sources
            continue
    return sources


BARE_TEMPLATE = PublishSettings(namespace="o", draft_home_namespace="a", draft_name="{source_name}")


FORMAT_FIRST = PublishSettings(namespace="o", draft_name="ov-{weight_format}-{source_name}")


@pytest.mark.parametrize(
    "settings",
    [DEFAULTS, NO_HOME, BARE_TEMPLATE, FORMAT_FIRST],
    ids=["homes", "no-home", "bare-template", "format-first"],
)
def test_distinct_sources_and_formats_never_share_an_output(settings):
    """Across namespaces, case variants, separators in names, forged hash tails, over-long names and both weight
    formats: one output per (source, format), unless the template has no {weight_format} (then one per source)."""
    by_format = "{weight_format}" in settings.draft_name
    seen: dict[str, tuple[str, str]] = {}
    sources = _adversarial_sources()
    assert len(sources) > 2000
    for source, weight_format in itertools.product(sources, DRAFT_WEIGHT_FORMATS):
        output = draft_output_repo(settings, source, weight_format)
        hf_validate_repo_id(output)
        key = output.lower()  # the Hub treats ids case-insensitively, so outputs must differ ignoring case
        made = (source.lower(), weight_format if by_format else "any")
        if key in seen:
            assert seen[key] == made, f"{seen[key]} and {made} -> {output}"
        seen[key] = made


def test_the_draft_name_says_its_weight_format_and_the_target_keeps_its_int4_name():
    publish = load_recipe().publish
    assert publish.draft_name == "{source_name}-{weight_format}-ov"
    names = draft_output_repos(publish, "z-lab/Qwen3-8B-DFlash-b16")
    assert names == {
        "int4": "OpenVINO-drafts/Qwen3-8B-DFlash-b16-int4-ov",
        "int8": "OpenVINO-drafts/Qwen3-8B-DFlash-b16-int8-ov",
    }
    assert target_output_repo(publish, "Qwen/Qwen3-8B") == "OpenVINO-drafts/Qwen3-8B-int4-ov"
    # Shortened names keep the format too, and stay apart.
    long_int4, long_int8 = draft_output_repos(publish, "some-org/" + "Q" * 96).values()
    assert long_int4.endswith("-int4-ov") and long_int8.endswith("-int8-ov") and long_int4 != long_int8
    # A template without {weight_format} (a recipe from before it existed) names one repo for every format.
    legacy = PublishSettings(namespace="ns", draft_name="{source_name}-int4-ov")
    assert set(draft_output_repos(legacy, "z-lab/A").values()) == {"ns/A-int4-ov"}


def test_the_formats_names_are_made_for_are_the_recipes():
    assert get_args(WeightFormat) == DRAFT_WEIGHT_FORMATS
    with pytest.raises(Skip, match="weight format 'fp16'"):
        draft_output_repo(DEFAULTS, "z-lab/A", "fp16")


@pytest.mark.parametrize(
    "value",
    [
        "https://huggingface.co/Qwen/Qwen3-8B",
        "hf.co/Qwen/Qwen3-8B",
        "Qwen/Qwen3-8B\n",
        "Qwen/Qwen3-8B\nevil: 1",
        "Qwen/Qwen3.",
        "Qwen/.Qwen3",
        "Qwen/Qwen3--8B",
        "Qwen/Qwen3..8B",
        "Qwen/Qwen3-8B.git",
        "Qwen3-8B",
        "a/b/c",
        "",
        "/",
        "Qwen/",
        " Qwen/Qwen3-8B",
        "Qwen/Qwen3 8B",
        "Qwen/Qwen3-8B,z-lab/x",
        "Qwen/Qwén3",
        "Qwen/" + "x" * 97,
        "../etc/passwd",
    ],
)
def test_bad_repo_ids_are_a_named_skip(value):
    with pytest.raises(Skip) as caught:
        validate_repo_id(value, what="card base_model")
    assert caught.value.message.startswith("card base_model") and repr(value) in caught.value.message


@pytest.mark.parametrize("value", [None, 5, ["Qwen/Qwen3-8B"], {"id": "Qwen/Qwen3-8B"}])
def test_a_repo_id_that_is_not_a_string_is_a_skip(value):
    with pytest.raises(Skip, match="--only must be a repo id string"):
        validate_repo_id(value, what="--only")


def test_valid_repo_ids_pass_unchanged():
    for value in (
        "Qwen/Qwen3-8B",
        "z-lab/Qwen3-8B-DFlash-b16",
        "deepseek-ai/dspark_qwen3_8b_block7",
        "Qwen/Qwen3.5-4B",
        "a/" + "x" * 96,
    ):
        assert validate_repo_id(value, what="x") == value


def test_an_invalid_output_is_a_skip_naming_the_source():
    unchecked = PublishSettings.model_construct(**{**DEFAULTS.model_dump(), "namespace": "bad--namespace"})
    with pytest.raises(Skip) as caught:
        draft_output_repo(unchecked, "z-lab/Qwen3-8B", "int4")
    assert caught.value.subject == "z-lab/Qwen3-8B" and "output repo id" in caught.value.message
    with pytest.raises(Skip, match=r"draft repo id 'Qwen/Qwen3\.'"):
        draft_output_repo(DEFAULTS, "Qwen/Qwen3.", "int4")
    with pytest.raises(Skip, match="target repo id"):
        target_output_repo(DEFAULTS, "https://huggingface.co/Qwen/Qwen3-8B")


@pytest.mark.parametrize(
    "template",
    [
        "{source_name}-{source_name}",
        "fixed-name",
        "{target_name}-int4",
        "{source_name!r}",
        "{source_name:>9}",
        "{source_name",
        "{source_name}.",
        "{source_name}--int4",
        "ov/{source_name}",
        "{source_name} int4",
        "{weight_format}-ov",
        "{source_name}-{weight_format}-{weight_format}",
        "{source_name}-{weight_format!r}",
        "{source_name}-{weight_format:>5}",
        "{source_name}-{weight_format}-{other}",
    ],
)
def test_a_name_template_must_hold_its_field_exactly_once(tmp_path: Path, template: str):
    text = DEFAULT_RECIPE.read_text()
    bad = tmp_path / "bad.yaml"
    good = 'draft_name: "{source_name}-{weight_format}-ov"'
    assert good in text
    bad.write_text(text.replace(good, f'draft_name: "{template}"'))
    with pytest.raises(RecipeError, match=r"publish\.draft_name"):
        load_recipe(bad)


@pytest.mark.parametrize("namespace", ["bad--namespace", "with space", "a/b", ""])
def test_the_publish_namespace_must_be_a_hub_namespace(tmp_path: Path, namespace: str):
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEFAULT_RECIPE.read_text().replace("namespace: OpenVINO-drafts", f'namespace: "{namespace}"'))
    with pytest.raises(RecipeError, match=r"publish\.namespace"):
        load_recipe(bad)


def test_a_target_name_cannot_use_the_drafts_weight_format(tmp_path: Path):
    """The target is exported in the recipe's one weight format: its name has no format to fill in."""
    bad = tmp_path / "bad.yaml"
    text = DEFAULT_RECIPE.read_text()
    bad.write_text(text.replace('target_name: "{target_name}-int4-ov"', 'target_name: "{target_name}-{weight_format}"'))
    with pytest.raises(RecipeError, match=r"publish\.target_name"):
        load_recipe(bad)
