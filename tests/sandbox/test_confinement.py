"""`bot.sandbox.confinement`: how `DFLASH_BOT_SANDBOX` values become layers, the confinement state for given layers
(what is on, its name, its log line, its provenance), which variable names count as secrets, the builder's
environment, and the write token taken out of a process (in a subprocess of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bot.core.settings import SANDBOX_LAYERS, SANDBOX_VARIABLE, Settings, sandbox_layers
from bot.sandbox.confinement import SECRET_NAME, Confinement, builder_env, confinement, scrubbed_env
from bot.sandbox.isolation import untrusted_env
from bot.sandbox.landlock import abi_version
from bot.sandbox.telemetry import SWITCHES


@pytest.mark.parametrize(
    ("value", "layers"),
    [
        ("auto", ("namespaces", "landlock")),
        ("", ("namespaces", "landlock")),
        ("  AUTO ", ("namespaces", "landlock")),
        ("none", ()),
        ("landlock", ("landlock",)),
        ("namespaces, landlock", ("namespaces", "landlock")),
        ("Namespaces,", ("namespaces",)),
    ],
)
def test_layer_values(value: str, layers: tuple[str, ...]) -> None:
    assert sandbox_layers(value) == layers


@pytest.mark.parametrize("value", ["landlok", "namespaces,seccomp", "off"])
def test_unknown_layer_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="unknown layer"):
        sandbox_layers(value)


def test_settings_read_the_variable() -> None:
    assert Settings.from_env({SANDBOX_VARIABLE: "landlock"}).sandbox_layers == ("landlock",)
    assert Settings.from_env({}).sandbox_layers == SANDBOX_LAYERS


def test_no_layers_means_none_and_says_why() -> None:
    state = confinement(())
    assert state == Confinement(
        namespaces=False, landlock_abi=0, detail=f"namespaces, landlock switched off by {SANDBOX_VARIABLE}"
    )
    assert state.name == "none"
    assert state.describe().startswith("sandbox: no OS confinement (namespaces, landlock switched off")
    assert state.as_provenance() == {"confinement": "none", "landlock_abi": 0}


def test_landlock_only_uses_this_kernels_abi() -> None:
    state = confinement(("landlock",))
    assert state.namespaces is False
    assert state.landlock_abi == abi_version()
    assert f"namespaces switched off by {SANDBOX_VARIABLE}" in state.detail
    assert state.name == ("landlock" if abi_version() else "none")


def test_confinement_names_and_lines() -> None:
    both = Confinement(namespaces=True, landlock_abi=4, detail="")
    assert both.name == "namespaces+landlock"
    assert both.describe() == "sandbox: checkpoint children confined by namespaces+landlock (Landlock ABI 4)"
    ns = Confinement(namespaces=True, landlock_abi=0, detail="Landlock not enabled in this kernel")
    assert ns.name == "namespaces"
    assert ns.describe() == "sandbox: checkpoint children confined by namespaces; Landlock not enabled in this kernel"
    assert ns.as_provenance() == {"confinement": "namespaces", "landlock_abi": 0}


@pytest.mark.parametrize("name", ["HF_TOKEN", "GITHUB_TOKEN", "aws_secret_access_key", "DB_PASSWORD", "OPENAI_API_KEY"])
def test_secret_names(name: str) -> None:
    assert SECRET_NAME.search(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "HOME", "PATH", "HF_HOME", "KEYBOARD"])
def test_not_secret_names(name: str) -> None:
    assert not SECRET_NAME.search(name)


def test_builder_env_keeps_only_the_read_token() -> None:
    env = builder_env({"HF_TOKEN": "w", "HF_READ_TOKEN": "r", "GH_TOKEN": "g", "PATH": "/usr/bin"})
    assert env["HF_READ_TOKEN"] == "r" and env["PATH"] == "/usr/bin"
    assert "HF_TOKEN" not in env and "GH_TOKEN" not in env
    assert env["HF_TOKEN_PATH"] == os.devnull and env["HF_STORED_TOKENS_PATH"] == os.devnull


def test_one_scrubber_removes_credentials_keeps_what_it_is_told_and_sets_the_switches() -> None:
    base = {"HF_TOKEN": "w", "HF_READ_TOKEN": "r", "DB_PASSWORD": "p", "PATH": "/usr/bin", "DO_NOT_TRACK": "0"}
    env = scrubbed_env(base, keep=("HF_READ_TOKEN",), drop=("PATH",), variables={"HF_HUB_OFFLINE": "1"})
    assert env == {"HF_READ_TOKEN": "r", "HF_HUB_OFFLINE": "1", **SWITCHES}
    assert scrubbed_env(base, drop=("HF_READ_TOKEN",), variables={"HF_READ_TOKEN": "mine"})["HF_READ_TOKEN"] == "mine"
    # Both children's environments are this scrubber's: nothing credential-like reaches either.
    for made in (builder_env(base), untrusted_env(base)):
        credentials = {name for name, value in made.items() if SECRET_NAME.search(name) and value != os.devnull}
        assert credentials <= {"HF_READ_TOKEN"} and "HF_TOKEN" not in made
    assert "HF_READ_TOKEN" not in untrusted_env(base)


_HOLDER = """
import json, os
from pathlib import Path
from bot.sandbox.confinement import hold_write_token
token = hold_write_token()
print(json.dumps({"token": token, "left": "HF_TOKEN" in os.environ,
                  "in_proc": b"hf_write_value_123" in Path("/proc/self/environ").read_bytes()}))
"""


def test_hold_write_token_takes_it_out_of_the_process() -> None:
    env = {**os.environ, "HF_TOKEN": "hf_write_value_123"}
    env.pop("HUGGING_FACE_HUB_TOKEN", None)
    result = subprocess.run([sys.executable, "-c", _HOLDER], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["token"] == "hf_write_value_123"
    assert seen["left"] is False
    assert seen["in_proc"] is False
