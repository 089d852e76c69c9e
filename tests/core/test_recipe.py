"""Every recipe in workflows/ loads; bad keys are named with a suggestion."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from bot.core.errors import RecipeError
from bot.core.recipe import ExportSettings, WeightCompression, load_recipe
from bot.core.watch import parse_duration

WORKFLOWS = sorted((Path(__file__).resolve().parents[2] / "workflows").glob("*.yaml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_recipe_loads(path):
    recipe = load_recipe(path)
    assert recipe.validation.min_accept_length >= 1.0
    assert len(recipe.validation.prompts) >= 3
    assert len(recipe.fingerprint()) == 16


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    text = (WORKFLOWS[0]).read_text().replace("min_accept_length:", "min_accept_lenght:")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(RecipeError) as caught:
        load_recipe(bad)
    assert "unknown key 'validation.min_accept_lenght'" in caught.value.message
    assert "did you mean 'min_accept_length'" in caught.value.message


def test_invalid_value_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORKFLOWS[0].read_text().replace("num_assistant_tokens: [3, 7, 15]", "num_assistant_tokens: [0, 7]"))
    with pytest.raises(RecipeError, match="num_assistant_tokens"):
        load_recipe(bad)


def test_fingerprint_follows_export_and_validation_settings():
    recipe = load_recipe()
    changed = recipe.model_copy(update={"export": recipe.export.model_copy(update={"group_size": 64})})
    assert changed.fingerprint() != recipe.fingerprint()
    timeout_only = recipe.model_copy(update={"export": recipe.export.model_copy(update={"timeout_s": 5})})
    assert timeout_only.fingerprint() == recipe.fingerprint()


def test_status_collection_and_recheck_settings(tmp_path):
    recipe = load_recipe()
    assert recipe.status_repo_id == f"{recipe.publish.namespace}/dflash-bot-status"
    assert recipe.publish.collection_namespace == recipe.publish.namespace
    assert recipe.watch.recheck_after == dt.timedelta(days=7)
    assert parse_duration("12h") == dt.timedelta(hours=12) and parse_duration("2w") == dt.timedelta(weeks=2)
    assert parse_duration("none") is None
    never = tmp_path / "never.yaml"
    never.write_text(WORKFLOWS[0].read_text().replace("recheck_after: 7d", "recheck_after: null"))
    assert load_recipe(never).watch.recheck_after is None
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORKFLOWS[0].read_text().replace("recheck_after: 7d", "recheck_after: 7 days"))
    with pytest.raises(RecipeError, match=r"watch.recheck_after.*invalid duration"):
        load_recipe(bad)


def test_hub_settings_load_with_defaults_and_are_checked(tmp_path):
    recipe = load_recipe()
    assert recipe.hub.read_timeout_s == 60 and recipe.hub.download_attempts == 3
    assert recipe.hub.plan_deadline_s == 1200 and recipe.hub.download_deadline_s == 5400
    tight = tmp_path / "tight.yaml"
    tight.write_text(WORKFLOWS[0].read_text().replace("read_timeout_s: 60", "read_timeout_s: 5"))
    assert load_recipe(tight).hub.read_timeout_s == 5
    assert load_recipe(tight).fingerprint() == recipe.fingerprint()  # no built file changes
    for wrong, words in [
        ("read_timout_s: 60", "did you mean 'read_timeout_s'"),
        ("read_timeout_s: 0", "hub.read_timeout_s"),
        ("read_timeout_s: 1e400", "hub.read_timeout_s"),  # an overflowing value is refused, not a traceback
    ]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(WORKFLOWS[0].read_text().replace("read_timeout_s: 60", wrong))
        with pytest.raises(RecipeError, match=words):
            load_recipe(bad)


def test_the_record_keeps_the_recipes_weight_compression_and_names_every_setting():
    from bot.core.record import ExportInfo, ExportSeconds, ExportTasks, export_settings

    recipe = ExportSettings(sym=True, group_size=64, ratio=0.8)
    info = ExportInfo(
        **recipe.compression().model_dump(),
        task=ExportTasks(draft="text-generation-with-past", target="text-generation-with-past"),
        seconds=ExportSeconds(draft=1.0, target=2.0),
    )
    assert info.compression() == recipe.compression() == WeightCompression(sym=True, group_size=64, ratio=0.8)
    assert info.settings() == export_settings(recipe, "text-generation-with-past")
    assert info.settings()[:-1] == ("int4", True, 64, 0.8, "adjust", None)
    data = info.model_dump()
    del data["sym"]
    with pytest.raises(ValueError, match="missing sym"):
        ExportInfo.model_validate(data)
