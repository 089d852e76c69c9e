"""Toolchain profiles: the pinned sets, the bounds read from optimum-intel, selection, and environment creation.

Creating the second profile's environment installs torch (the local CPU wheel), transformers 5.5.4, optimum-intel
and OpenVINO from the registry: about 2 minutes on two cores the first time (1.6 GB), under a second afterwards,
because it builds into `Settings.profiles_dir` (DFLASH_BOT_PROFILES_DIR, default ~/.cache/dflash-bot/profiles) and
reuses what an earlier run built there. DFLASH_BOT_TEST_PROFILES=0 skips it (offline machines).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from bot.builder.draft_build import Checkout
from bot.builder.group import build_folders
from bot.core.errors import Skip
from bot.core.profiles import (
    Bounds,
    Profile,
    check_transformers,
    child_env,
    detect_in,
    ensure_environment,
    is_current,
    json_from,
    load_profiles,
    select_profile,
    toolchain_for,
    transformers_bounds,
)
from bot.core.record import ToolchainInfo
from bot.core.settings import Settings
from tests.conftest import fast_recipe

# Where the profile environments of this machine live (the test is an entry point: it reads the environment).
PROFILES_DIR = Settings.from_env(os.environ).profiles_dir


def test_profiles_file_has_default_and_gemma4_with_their_transformers():
    profiles = load_profiles()
    assert [p.name for p in profiles.profiles][:2] == ["default", "gemma4"]
    assert profiles.get("default").transformers == "5.2.0"
    assert profiles.get("gemma4").transformers.startswith("5.5.")


def test_default_profile_pins_what_pyproject_pins(repo_root):
    """The default profile is this checkout's environment: the two lists must not drift apart."""
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    pyproject = project["dependencies"] + project["optional-dependencies"]["build"]  # base + the build extra
    pinned = dict(d.split("==") for d in pyproject if "==" in d)
    for requirement in load_profiles().get("default").requirements:
        name, version = requirement.split("==")
        assert pinned.get(name) == version, name
    assert is_current(load_profiles().get("default"))


def test_bounds_are_read_from_the_installed_optimum_intel():
    qwen3_5 = transformers_bounds("qwen3_5")
    assert (qwen3_5.minimum, qwen3_5.maximum) == ("5.2.0", "5.2.99") and "optimum-intel" in qwen3_5.source
    assert (transformers_bounds("gemma4").minimum, transformers_bounds("gemma4").maximum) == ("5.5", None)
    assert transformers_bounds("qwen3_next").maximum == "4.57.6"
    assert (transformers_bounds("qwen3").minimum, transformers_bounds("qwen3").maximum) == (None, None)


def test_fallback_table_when_optimum_source_is_unreadable(tmp_path):
    bounds = transformers_bounds("qwen3_5", model_configs=tmp_path / "missing.py")
    assert (bounds.minimum, bounds.maximum) == ("5.2.0", "5.2.99")
    assert bounds.source == "toolchains/exporter.yaml (optimum-intel 2.2.0)"


def test_bounds_compare_release_numbers():
    bounds = Bounds("qwen3_5", "5.2.0", "5.2.99", "test")
    assert bounds.allows("5.2.0") and bounds.allows("5.2.1+local")
    assert not bounds.allows("5.3.0") and not bounds.allows("5.5.4") and not bounds.allows("not installed")
    assert bounds.requirement() == "transformers >=5.2.0,<=5.2.99"


@pytest.mark.parametrize(
    ("model_type", "profile"),
    [
        ("qwen3", "default"),
        ("qwen3_moe", "default"),
        ("qwen3_5", "default"),
        ("qwen3_5_moe", "default"),
        ("gemma4", "gemma4"),
    ],
)
def test_profile_is_chosen_from_the_model_type(model_type, profile):
    assert select_profile(model_type).name == profile


def test_model_type_no_profile_covers_is_a_skip_naming_the_versions():
    with pytest.raises(
        Skip,
        match=r"no toolchain profile covers model_type 'qwen3_next': it needs transformers "
        r"<=4\.57\.6 .*default \(transformers 5\.2\.0\), gemma4 \(transformers 5\.5",
    ):
        select_profile("qwen3_next")


def test_wrong_transformers_names_the_range_and_the_profile_that_has_it():
    with pytest.raises(
        Skip,
        match=r"'gemma4' needs transformers >=5\.5 .* has transformers 5\.2\.0; build it in "
        r"toolchain profile 'gemma4'",
    ):
        check_transformers("gemma4", "5.2.0")
    assert check_transformers("qwen3", "5.2.0").maximum is None


def test_default_profile_runs_in_this_environment():
    toolchain = toolchain_for("qwen3_5", root=PROFILES_DIR)
    assert toolchain.profile == "default" and toolchain.python is None
    assert ToolchainInfo.of(toolchain, "stateful").profile == "default"


def test_build_of_a_target_no_profile_covers_is_a_skip_before_any_export(tiny, tmp_path):
    pair = tiny("dflash")
    target = tmp_path / "target"
    target.mkdir()
    for path in pair.target.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "model_type": "qwen3_next"}))
    error = build_folders(Checkout(pair.draft), Checkout(target), tmp_path / "out", fast_recipe())
    assert isinstance(error, Skip)
    assert "transformers <=4.57.6" in error.message
    assert not (tmp_path / "out").exists()


def test_profile_that_cannot_be_set_up_is_a_skip_naming_its_pins(tmp_path):
    broken = Profile(name="broken", description="", requirements=("transformers==5.5.4",), torch="torch==0.0.1")
    with pytest.raises(
        Skip,
        match=r"toolchain profile 'broken' could not be set up \(needs torch==0\.0\.1, "
        r"transformers==5\.5\.4\)",
    ):
        ensure_environment(broken, root=tmp_path, pip_args=("--no-index",))


@pytest.mark.skipif(
    os.environ.get("DFLASH_BOT_TEST_PROFILES") == "0",
    reason="DFLASH_BOT_TEST_PROFILES=0: no environment built from the registry",
)
def test_gemma4_profile_environment_is_built_and_detected():
    profile = load_profiles().get("gemma4")
    python = ensure_environment(profile, root=PROFILES_DIR)
    assert Path(python).is_file()
    toolchain = detect_in(python, profile.name)
    assert toolchain.profile == "gemma4" and toolchain.python == str(python)
    assert toolchain.versions["transformers"] == profile.transformers
    assert toolchain.versions["optimum-intel"] == "2.2.0" and "dflash-stateful" in toolchain.capabilities
    assert toolchain.versions["torch"].startswith("2.13.0")
    # Reused, not rebuilt, on the next call; and the selection for a Gemma-4 target lands on it.
    assert ensure_environment(profile, root=PROFILES_DIR) == python
    assert toolchain_for("gemma4", root=PROFILES_DIR).python == str(python)
    # Its children import this bot with its package data (`bot.core.profiles` reads `bot.toolchains` at import),
    # and the tool modules a build child runs there import with the profile's own requirements.
    code = (
        "import json, bot.core.profiles as p, bot.sandbox.child, bot.builder.validate, bot.builder.validate_per_row, "
        "bot.builder.quality, bot.builder.inspect_child; print(json.dumps(p.PROFILES_FILE.is_file()))"
    )
    assert json_from(python, code) == (True, "")
    # A Qwen3.5 target in this environment is refused with the range it needs.
    with pytest.raises(Skip, match=r"transformers >=5\.2\.0,<=5\.2\.99"):
        check_transformers("qwen3_5", toolchain.versions["transformers"], profile="gemma4")


def test_another_environment_imports_this_bot_with_its_package_data_and_nothing_else(tmp_path):
    """A profile's python gets `child_env`'s PYTHONPATH: a folder holding this `bot` laid out as a wheel installs it.
    Simulated with this interpreter without `site` (so no editable-install finder and no .pth file runs) and the
    dependencies' folder appended by hand: `bot.core.profiles` needs `bot.toolchains`, which a checkout keeps beside
    `bot/`, and the folder holding `bot` (site-packages, for a wheel) must not come along."""
    env = child_env({"PATH": os.environ["PATH"]}, str(tmp_path / "python"))
    (folder,) = env["PYTHONPATH"].split(os.pathsep)
    assert sorted(p.name for p in Path(folder).iterdir()) == ["bot"]
    code = (
        "import json, sys; sys.path.append(sys.argv[1]); import bot, bot.core.profiles as p, bot.builder.validate; "
        "print(json.dumps([bot.__file__, str(p.PROFILES_FILE), p.PROFILES_FILE.is_file()]))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, sysconfig.get_paths()["purelib"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    bot_file, profiles_file, exists = json.loads(done.stdout.strip().splitlines()[-1])
    assert bot_file.startswith(folder) and profiles_file.startswith(folder) and exists
