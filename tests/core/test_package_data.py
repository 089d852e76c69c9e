"""bot.core.package_data: each data package resolves to a real folder holding its files, and the checkout is found."""

from __future__ import annotations

import pytest

from bot.core import package_data

EXPECTED = {
    package_data.WORKFLOWS: "dflash.yaml",
    package_data.TEMPLATES: "draft_card.md.j2",
    package_data.TOOLCHAINS: "profiles.yaml",
    package_data.SCHEMAS: "openvino_export.schema.json",
}


def test_every_data_package_is_listed():
    assert set(package_data.DATA_PACKAGES) == set(EXPECTED)


@pytest.mark.parametrize("package", package_data.DATA_PACKAGES)
def test_folder_holds_the_package_files(package):
    folder = package_data.folder(package)
    assert folder.is_dir()
    assert (folder / EXPECTED[package]).is_file()
    assert (folder / EXPECTED[package]).stat().st_size > 0


def test_bot_folder_is_the_code_package():
    folder = package_data.folder(package_data.PACKAGE)
    assert folder.name == "bot"
    assert (folder / "core" / "package_data.py").is_file()


def test_checkout_is_the_folder_with_this_projects_pyproject():
    root = package_data.checkout()
    assert root is not None
    assert root == package_data.folder(package_data.PACKAGE).parent
    assert 'name = "dflash-ov-bot"' in (root / "pyproject.toml").read_text(encoding="utf-8")
