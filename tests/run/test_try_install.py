"""The downloader's install: `pip install` of the built wheel into a fresh venv, without the `build` extra, then
`dflash-bot try` against the local Hub (issue 24's "done when").

Unlike tests/test_wheel.py (the full install, its dependencies borrowed from this environment), the fresh venv here
gets the wheel and its base dependencies from the package index, as `pip install dflash-ov-bot` would (about a
minute here: some 340 MB, most of it OpenVINO), so it holds no torch, optimum, NNCF or transformers. The pair it
measures is published by the real job from this environment (tests/run/test_try_pair.py's `publish_oracle_pair`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bot.cli.context import BUILD_EXTRA
from tests.run.test_try_pair import DRAFT_OUT, TOKEN, publish_oracle_pair

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

PIP_TIMEOUT_S = 1200
REAL_BUILDS = ("plain_venv",)  # slow (tests/conftest.py): the wheel built and installed from the package index


def _name(requirement: str) -> str:
    return requirement.split("==")[0].split(">")[0].split("<")[0].strip().lower().replace("_", "-")


def test_the_build_extra_is_what_the_cli_asks_for_and_the_base_holds_none_of_it(repo_root):
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    build = {_name(r) for r in project["optional-dependencies"]["build"]}
    assert build == set(BUILD_EXTRA)
    base = {_name(r) for r in project["dependencies"]}
    assert {"openvino-genai", "huggingface-hub", "typer", "rich"} <= base and not base & build


@pytest.fixture(scope="module")
def plain_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel (conftest) and its base dependencies from the index (no `build` extra)."""
    root = tmp_path_factory.mktemp("plain")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", str(wheel)],
        env=_env(root),
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This environment's variables, less what would point back at the checkout or hold a token."""
    drop = {"PYTHONPATH", "HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VIRTUAL_ENV"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "HF_HOME": str(home / "hf"), **extra}


def test_the_plain_install_has_no_export_toolchain_and_build_commands_ask_for_the_extra(plain_venv, tmp_path):
    python = plain_venv / "bin" / "python"
    probe = (
        "import importlib.util as u, bot.cli; print([m for m in ('torch', 'optimum', 'nncf', 'transformers') "
        "if u.find_spec(m)])"
    )
    done = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr[-3000:])
    torch = subprocess.run(
        [python, "-c", "import torch"], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert torch.returncode != 0 and "No module named 'torch'" in torch.stderr
    for command in (["run", "--dry-run"], ["demo"], ["build", "--out", str(tmp_path / "b")]):
        refused = subprocess.run(
            [plain_venv / "bin" / "dflash-bot", *command],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
        line = " ".join(refused.stderr.split())
        assert refused.returncode == 2, (command, refused.stderr[-3000:])
        assert f"`dflash-bot {command[0]}` needs the build extra: pip install 'dflash-ov-bot[build]'" in line, line
        assert "Traceback" not in refused.stderr


def test_try_runs_from_the_plain_install_against_the_local_hub(plain_venv, tmp_path):
    from hubserver import LocalHub

    with LocalHub(tmp_path / "data", user="maintainer", token=TOKEN) as server:
        publish_oracle_pair(server, tmp_path / "work")
        done = subprocess.run(
            [
                plain_venv / "bin" / "dflash-bot",
                "try",
                DRAFT_OUT,
                "--max-new-tokens",
                "16",
                "--cache-dir",
                str(tmp_path / "cache"),
            ],
            cwd=tmp_path,
            env=_env(tmp_path, HF_ENDPOINT=server.url),
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    out = " ".join(done.stdout.split())
    assert "accept length" in out and "plain tokens/s" in out and "card: speed-up" in out
    assert "lossless on CPU" in out and "recommended num_assistant_tokens here:" in out
