"""bot.core.toolchain: tracked versions and capabilities read from optimum-intel's exporter source, not imported."""

from __future__ import annotations

from bot.core import toolchain
from bot.core.toolchain import TRACKED_PACKAGES, Toolchain


def test_tracked_fills_in_missing_packages():
    chain = Toolchain(versions={"openvino": "2026.4.1", "other": "1.0"}, capabilities=frozenset())
    tracked = chain.tracked()
    assert set(tracked) == set(TRACKED_PACKAGES)
    assert tracked["openvino"] == "2026.4.1"
    assert tracked["torch"] == "not installed"
    assert "other" not in tracked


def test_defaults():
    chain = Toolchain(versions={}, capabilities=frozenset({"dflash-stateful"}))
    assert chain.profile == "default"
    assert chain.python is None


def test_version_of_a_missing_distribution():
    assert toolchain._version("no-such-distribution-dflash-test") == "not installed"


def test_draft_architectures_from_source(tmp_path):
    (tmp_path / "__main__.py").write_text(
        "import torch  # never imported by the reader\n"
        "OTHER = {'Ignored': 1}\n"
        "_CUSTOM_DRAFT_MODEL_MAP = {\n"
        "    'DFlashDraftModel': object,\n"
        "    'Qwen3DSparkModel': object,\n"
        "}\n",
        encoding="utf-8",
    )
    assert toolchain._draft_architectures(tmp_path) == {"DFlashDraftModel", "Qwen3DSparkModel"}


def test_draft_architectures_without_the_map(tmp_path):
    (tmp_path / "__main__.py").write_text("_CUSTOM_DRAFT_MODEL_MAP = None\n", encoding="utf-8")
    assert toolchain._draft_architectures(tmp_path) == set()


def test_detect_reports_every_tracked_package():
    found = toolchain.detect()
    assert set(found.versions) == set(TRACKED_PACKAGES)
    assert all(isinstance(v, str) and v for v in found.versions.values())
    known = {
        toolchain.CAPABILITY_DFLASH,
        toolchain.CAPABILITY_PER_ROW,
        toolchain.CAPABILITY_DSPARK,
        toolchain.CAPABILITY_DFLASH2,
    }
    assert found.capabilities <= known
    assert toolchain.detect() is found  # cached
