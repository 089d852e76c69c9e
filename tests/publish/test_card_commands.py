"""Every command a draft card gives runs as written (issue 31): rendered from a pair the real job published on the
local Hub, its install line resolved offline to this checkout at that commit, its `dflash-bot try` line and its Python
snippet run against the local Hub."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from bot.hub.client import Hub
from bot.publish.card import render_draft_card
from bot.publish.install import install_line
from bot.run.try_pair import pin_pair
from tests.conftest import REPO_ROOT
from tests.run.test_try_pair import DRAFT_OUT, TOKEN, publish_oracle_pair

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

GITHUB_REPOSITORY = "someone/dflash-bot"
REAL_BUILDS = ("server",)  # slow (tests/conftest.py): the server holds a real build of the oracle pair


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from hubserver import LocalHub

    root = tmp_path_factory.mktemp("hub")
    with LocalHub(root / "data", user="maintainer", token=TOKEN) as hub:
        publish_oracle_pair(hub, root / "work")
        yield hub


def _downloader_env(server, home: Path) -> dict[str, str]:
    drop = {"HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"HF_ENDPOINT": server.url, "HOME": str(home), "HF_HOME": str(home / "hf-home")})
    return env


def _check_install(command: list[str], sha: str) -> None:
    """`pip install "<requirement>"`, resolved offline: the requirement is this project at a commit this checkout
    holds, and the project at that commit is the one named."""
    assert command[:2] == ["pip", "install"] and len(command) == 3, command
    requirement = Requirement(command[2])
    assert requirement.name == "dflash-ov-bot" and not requirement.extras  # `try` needs only the base install
    assert requirement.url == f"git+https://github.com/{GITHUB_REPOSITORY}@{sha}"
    git = ["git", "-C", str(REPO_ROOT)]
    subprocess.run([*git, "cat-file", "-e", f"{sha}^{{commit}}"], check=True)
    pyproject = subprocess.run([*git, "show", f"{sha}:pyproject.toml"], capture_output=True, text=True, check=True)
    assert 'name = "dflash-ov-bot"' in pyproject.stdout


def test_every_command_on_the_card_runs_as_written(server, tmp_path):
    sha = _head()
    actions = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": GITHUB_REPOSITORY, "GITHUB_SHA": sha}
    pair = pin_pair(Hub(server.url), DRAFT_OUT, None)
    card = render_draft_card(
        pair.record,
        install=install_line(actions, None),
        target_commit=pair.target_commit,
        draft_revision=pair.draft_commit,
    )
    shell = re.findall(r"```bash\n(.*?)```", card, flags=re.S)
    python = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    assert len(shell) == 1 and len(python) == 1, card
    env = _downloader_env(server, tmp_path / "home")
    ran = []
    for line in filter(None, shell[0].splitlines()):
        command = shlex.split(line)
        if command[0] == "pip":
            _check_install(command, sha)
        elif command[0] == "dflash-bot":
            done = subprocess.run(
                [sys.executable, "-m", "bot.cli", *command[1:]], env=env, capture_output=True, text=True, timeout=900
            )
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            assert "the card x" in done.stdout and "overlap" in done.stdout, done.stdout
        else:
            pytest.fail(f"a command the test does not know how to run: {line}")
        ran.append(command[0])
    assert ran == ["pip", "dflash-bot"]
    # The snippet pins both repos to the commits validated together, and runs against the local Hub.
    assert f'revision="{pair.target_commit}"' in python[0] and f'revision="{pair.draft_commit}"' in python[0]
    snippet = tmp_path / "snippet.py"
    snippet.write_text(python[0], encoding="utf-8")
    done = subprocess.run([sys.executable, str(snippet)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()
