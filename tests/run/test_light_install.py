"""The Actions plan job's install plans exactly as the full one (issue 30: light jobs).

The plan and publish jobs install the bot without the export toolchain (`make install-light`: `pip install -e
'.[publish]'`, no torch, optimum-intel or NNCF). Planning still compares published builds with the toolchain a build
would run in and picks each target family's profile by optimum-intel's transformers bounds; in the light install both
come from the default profile's pins and `toolchains/exporter.yaml` (bot.core.profiles.planning_toolchain). Here a
fresh virtual environment gets the Makefile's light pip line and runs `dflash-bot plan --matrix` against a local Hub
holding every draft layout the recipe finds (tinymodels.hub_layouts) and published drafts the status repo remembers;
its plan must be the full environment's, byte for byte. Before the snapshot, `import optimum` failed it (exit 70).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.noop_seed import seed_published
from bot.core.recipe import load_recipe
from bot.hub.client import Hub
from tests.conftest import HUB_TOKEN
from tinymodels.hub_layouts import seed_layouts

ROOT = Path(__file__).resolve().parents[2]
REAL_BUILDS = ("light_bin",)  # slow (tests/conftest.py): a fresh venv installed from the package index


@pytest.fixture(scope="module")
def light_bin(tmp_path_factory) -> Path:
    """A fresh venv with the Makefile's `install-light` pip line (pip's own index configuration)."""
    folder = tmp_path_factory.mktemp("light") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    done = subprocess.run(
        [folder / "bin" / "python", "-m", "pip", "install", "--quiet", "-e", ".[publish]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "bin"


@pytest.fixture(scope="module")
def hub(hub, tmp_path_factory):
    work = tmp_path_factory.mktemp("seed")
    seed_layouts(hub.url, HUB_TOKEN, work / "layouts")
    seed_published(Hub(hub.url, HUB_TOKEN), load_recipe(), work / "published", 2)
    return hub


def _plan(bin_dir: Path, hub, out: Path) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GITHUB_", "VIRTUAL_ENV"))}
    env |= {"HF_ENDPOINT": hub.url, "HF_READ_TOKEN": HUB_TOKEN, "HF_HUB_DISABLE_XET": "1"}
    done = subprocess.run(
        [bin_dir / "dflash-bot", "plan", "--matrix", "--out", str(out)],
        env=env,
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return json.loads(out.read_text(encoding="utf-8")), done.stderr  # stdout: the matrix


def _steady(log: str, folder: Path) -> str:
    """The plan's log without what differs between two runs of it: its folder and the seconds each step took."""
    return re.sub(r"\b\d+\.\d+s\b", "<s>", log.replace(str(folder), "<folder>"))


def test_the_light_install_has_no_export_toolchain_and_plans_as_the_full_one(light_bin, hub, tmp_path):
    missing = subprocess.run(
        [light_bin / "python", "-c", "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('nncf'))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.stdout.split() == ["None", "None"], missing.stderr
    (tmp_path / "light").mkdir()
    (tmp_path / "full").mkdir()
    light, light_log = _plan(light_bin, hub, tmp_path / "light" / "plan.json")
    full, full_log = _plan(Path(sys.executable).parent, hub, tmp_path / "full" / "plan.json")
    assert light == full
    # The status memory is read as current (its toolchain fingerprint is the build's) and every layout of a trusted
    # author is planned; SpecForge's community upload is seen, not approved (issue 39).
    assert "2 source(s) unchanged since last examined" in light_log and light_log.count(": build new") == 12
    statuses = [outcome["status"] for outcome in light["report"]["outcomes"]]
    assert len(statuses) == 15 and statuses.count("up-to-date") == 2, statuses
    assert sum(outcome["stage"] == "approve" for outcome in light["report"]["outcomes"]) == 1
    assert _steady(light_log, tmp_path / "light") == _steady(full_log, tmp_path / "full")
