"""README "Deploy it for your organisation", walked against the local Hub offline: the recipe fields it names are
the recipe's; a token for the maintainer's own organisation passes `dflash-bot check` once they are changed (and is
refused, naming the shipped namespace, before); and `dflash-bot run` with that token stops before any download on
the shipped recipe and publishes a pair in the organisation on the edited one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bot.cli.ending import run_command_line
from bot.core.recipe import DEFAULT_RECIPE, load_recipe
from bot.hub.client import Hub
from bot.run import demo
from tests.conftest import HUB_TOKEN, SEEDED_REPOS

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
    assert run_command_line(["check", "--recipe", str(_edited_recipe(tmp_path))]) == 0
    assert "deployer (write token) may publish to my-org" in capsys.readouterr().out


def _edited_recipe(folder: Path, *, short_sweep: bool = False) -> Path:
    """The shipped recipe with step 1 of the section done. `short_sweep` also shortens the validation sweep to one
    setting and one weight format: the shipped sweep itself runs end to end in the offline demo (`dflash-bot demo`
    builds on the shipped recipe: tests/reliability/test_reliability_egress.py), so here only the edit is walked."""
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    raw["publish"].update(namespace="my-org", bot_user="deployer")  # step 1 of the section
    if short_sweep:
        raw["validation"].update(num_assistant_tokens=[3], repeats=1, timing_budget_s=0.01)
        raw["export"].update(draft_weight_formats=["int4"])
    edited = folder / "dflash.yaml"
    edited.write_text(yaml.safe_dump(raw))
    return edited


def _run(hub, recipe: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """`dflash-bot run` as a maintainer runs it (its own process: it holds the write token the way the job does)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GITHUB_"))}
    env |= {"HF_TOKEN": TOKEN, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
    command = ["run", "--recipe", str(recipe), "--only", demo.DRAFT_REPO, "--work", str(work)]
    return subprocess.run(
        [Path(sys.executable).parent / "dflash-bot", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.mark.slow  # a real `run`: the shipped recipe's refusal, then the edited one's build and publish
def test_a_run_stops_before_any_download_on_the_shipped_recipe_and_publishes_on_the_edited_one(hub, tmp_path):
    hub.add_token(TOKEN, "deployer", write=True, orgs=["my-org"])
    demo.seed(hub.url, HUB_TOKEN, tmp_path / "seed", SEEDED_REPOS[:2])  # the demo's target and DFlash draft
    hub.clear_requests()
    refused = _run(hub, DEFAULT_RECIPE, tmp_path / "work-refused")
    assert refused.returncode == 2, (refused.stdout + refused.stderr)[-3000:]
    assert "'OpenVINO-drafts'" in refused.stderr
    fetched = [r for r in hub.requests() if "/resolve/" in r["path"] or "/tree/" in r["path"]]
    assert fetched == [], fetched  # nothing listed or downloaded before the refusal
    done = _run(hub, _edited_recipe(tmp_path, short_sweep=True), tmp_path / "work")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    published = Hub(hub.url, HUB_TOKEN).api.list_models(author="my-org")
    names = sorted(model.id for model in published)
    assert any(name.startswith("my-org/Qwen3-Tiny-DFlash-b16-") for name in names), names
    assert "my-org/Qwen3-Tiny-int4-ov" in names, names
