"""README "Deploy it for your organisation", walked against the local Hub offline: the recipe fields it names are
the recipe's, and a token for the maintainer's own organisation passes `dflash-bot check` once they are changed
(and is refused, naming the shipped namespace, before).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bot.cli import run_command_line
from bot.core.recipe import DEFAULT_RECIPE, load_recipe

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_deploy_my_org"


def deploy_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("### Deploy it for your organisation", 1)[1].split("\n### ", 1)[0]


def test_the_fields_the_section_names_are_recipe_fields():
    named = set(re.findall(r"`(publish\.[\w.]+)`", deploy_section()))
    assert {"publish.namespace", "publish.bot_user", "publish.status_repo", "publish.collection.namespace"} <= named
    recipe = load_recipe(DEFAULT_RECIPE)
    for field in named:
        value = recipe
        for part in field.split("."):
            assert hasattr(value, part), field
            value = getattr(value, part)


def test_the_check_the_section_gives_refuses_the_shipped_recipe_and_passes_the_edited_one(
    hub, tmp_path, monkeypatch, capsys, own_logger
):
    hub.add_token(TOKEN, "deployer", write=True, orgs=["my-org"])
    assert "dflash-bot check --recipe workflows/dflash.yaml" in deploy_section()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_READ_TOKEN", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert run_command_line(["check", "--recipe", str(DEFAULT_RECIPE)]) == 2
    assert "'OpenVINO-drafts'" in capsys.readouterr().err
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    raw["publish"].update(namespace="my-org", bot_user="deployer")  # step 1 of the section
    edited = tmp_path / "dflash.yaml"
    edited.write_text(yaml.safe_dump(raw))
    assert run_command_line(["check", "--recipe", str(edited)]) == 0
    assert "deployer (write token) may publish to my-org" in capsys.readouterr().out
