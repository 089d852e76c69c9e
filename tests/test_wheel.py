"""The bot as a user installs it: its wheel, in a fresh virtual environment, run from a folder that is not the checkout.

The wheel is built from a copy of the sources with setuptools' own backend (no network, nothing left in the checkout)
and installed with `pip install --no-deps`. The dependencies are not installed again: a `.pth` file puts this
environment's site-packages at the end of the fresh one's `sys.path`. Python reads the `.pth` files of a site folder
only, not of a folder such a line adds, so the checkout's editable-install finder (`__editable__*dflash*`) never runs
there: the `bot`, `hubserver` and `tinymodels` the fresh environment imports are the wheel's, which the test checks
before `dflash-bot demo` (the offline job against a local Hub) runs from it, under strace, in
tests/reliability/test_reliability_egress.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

from bot.core.naming import draft_output_repos
from bot.core.recipe import load_recipe
from bot.run import demo

ROOT = Path(__file__).resolve().parent.parent
DATA = {"workflows": "*.yaml", "templates": "*.j2", "toolchains": "*.yaml", "schemas": "*.json"}


def _env(tmp_path: Path) -> dict[str, str]:
    """This environment's variables, less what would point back at the checkout or hold a token."""
    drop = {"PYTHONPATH", "HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VIRTUAL_ENV"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "HF_HOME": str(tmp_path / "hf")}


def test_the_wheel_holds_the_package_data_inside_the_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, pattern in DATA.items():
        shipped = {f"bot/{folder}/{p.name}" for p in (ROOT / folder).glob(pattern)}
        assert shipped and shipped <= names, sorted(shipped - names)
        assert not any(name.startswith(f"{folder}/") for name in names)  # inside `bot`, not beside it
    assert {
        "bot/cli/__init__.py",
        "bot/cli/__main__.py",
        "bot/publish/card.py",
        "hubserver/__init__.py",
        "tinymodels/__init__.py",
    } <= names


def test_the_installed_bot_is_the_wheels_and_knows_it_is_not_a_checkout(venv, tmp_path):
    code = (
        "import json, sys, bot, hubserver, tinymodels; from bot.core import package_data as d; "
        "from bot.core.profiles import PROFILES_FILE; "
        "print(json.dumps({'files': [m.__file__ for m in (bot, hubserver, tinymodels)], 'checkout': "
        "str(d.checkout()), 'profiles': str(PROFILES_FILE), 'templates': str(d.folder(d.TEMPLATES)), "
        "'finders': [type(f).__module__ if not isinstance(f, type) else f.__module__ for f in sys.meta_path]}))"
    )
    done = subprocess.run(
        [venv / "bin" / "python", "-c", code],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    inside = str(venv.resolve())
    assert all(str(Path(f).resolve()).startswith(inside) for f in seen["files"]), seen["files"]
    assert str(Path(seen["profiles"]).resolve()).startswith(inside) and Path(seen["templates"]).is_dir()
    assert seen["checkout"] == "None"
    assert not [f for f in seen["finders"] if "__editable__" in f], seen["finders"]
    # Writing pins needs the checkout's pyproject.toml: refused up front, saying why.
    refused = subprocess.run(
        [venv / "bin" / "dflash-bot", "toolchain", "check", "--write"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert (
        "this bot is installed" in refused.stderr
        and "run `dflash-bot toolchain check --write` from a checkout" in " ".join(refused.stderr.split())
    )


def assert_the_demo_published(stdout: str) -> None:
    """What `dflash-bot demo` printed shows its draft published under the name of the weight format that measured
    fastest, with its card. The demo from the installed wheel runs once, under strace, in
    tests/reliability/test_reliability_egress.py (it also proves the demo connects to nothing but the local Hub)."""
    printed = [
        (weight_format, repo)
        for weight_format, repo in draft_output_repos(load_recipe().publish, demo.DRAFT_REPO).items()
        if f" published card of {repo} " in stdout
    ]
    assert len(printed) == 1, stdout[-3000:]
    weight_format, draft_out = printed[0]
    card = stdout.split(f" published card of {draft_out} ", 1)[1]
    assert f"base_model: {demo.DRAFT_REPO}" in card and "openvino" in card
    assert f"- {weight_format}\n" in card and f"weight_format: {weight_format}" in card
