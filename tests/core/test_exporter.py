"""The exporter snapshot (`toolchains/exporter.yaml`) that a light install plans with is this environment's truth.

The Actions plan and publish jobs install the bot without optimum-intel or torch (`make install-light`). They plan
with the default profile's pins plus the snapshot; if it drifted from what a build job detects, every plan would see
published builds as made with another toolchain (a rebuild of everything) or pick the wrong profile for a family.
tests/run/test_light_install.py runs the plan in such an install.
"""

from __future__ import annotations

import pytest

from bot.core import exporter, profiles
from bot.core.errors import RecipeError
from bot.core.toolchain import detect


def test_the_snapshot_is_what_this_environment_reports():
    here = exporter.snapshot_of_this_environment()
    assert here is not None
    assert exporter.load_snapshot() == here, "run `.venv/bin/python -m bot.core.exporter --write` and commit it"
    assert exporter.main([]) == 0


def test_a_light_install_plans_with_the_toolchain_a_build_detects():
    light = profiles.light_toolchain()
    assert (light.versions, light.capabilities, light.profile) == (detect().versions, detect().capabilities, "default")
    assert profiles.planning_toolchain() == detect()  # the full install: what is installed


def test_every_model_type_gets_the_same_profile_from_the_snapshot_as_from_the_source():
    configs = exporter.optimum_model_configs()
    assert configs is not None
    for model_type in exporter.bounds_from_source(configs):
        from_source = profiles.transformers_bounds(model_type)
        from_snapshot = profiles.transformers_bounds(model_type, model_configs=configs.parent / "missing.py")
        assert (from_source.minimum, from_source.maximum) == (from_snapshot.minimum, from_snapshot.maximum)
        assert "exporter.yaml" in from_snapshot.source


def test_a_snapshot_of_another_exporter_release_is_refused_with_the_fix(tmp_path):
    stale = exporter.ExporterSnapshot("2.1.0", "2.13.0+cpu", frozenset(), {})
    other = profiles.ProfileSet(profiles.load_profiles().profiles, stale)
    with pytest.raises(RecipeError, match=r"made with optimum-intel 2\.1\.0.*python -m bot\.core\.exporter --write"):
        profiles.light_toolchain(other)
    (tmp_path / "broken.yaml").write_text("optimum-intel: 2.2.0\n", encoding="utf-8")
    with pytest.raises(ValueError, match="is not a snapshot"):
        exporter.load_snapshot(tmp_path / "broken.yaml")
