"""The files the bot ships beside its code: recipes, card templates, toolchain profiles and the record's schema.

They live at the top of the checkout, where maintainers edit them, and are installed inside the package as
`bot.workflows`, `bot.templates`, `bot.toolchains` and `bot.schemas` (pyproject.toml maps them), so one lookup through
`importlib.resources` finds them from a checkout, an editable install and an installed wheel alike. Nothing in
`bot/` finds them through `__file__`. Only a checkout has `pyproject.toml` (`checkout()`): whatever edits the
project's own files (`dflash-bot toolchain check --write`) asks for it, and says so when the bot is installed.
"""

from __future__ import annotations

import importlib.resources
import tomllib
from pathlib import Path

PACKAGE = "bot"
WORKFLOWS = "bot.workflows"
TEMPLATES = "bot.templates"
TOOLCHAINS = "bot.toolchains"
SCHEMAS = "bot.schemas"
DATA_PACKAGES = (WORKFLOWS, TEMPLATES, TOOLCHAINS, SCHEMAS)
PROJECT = "dflash-ov-bot"


def folder(package: str) -> Path:
    """The folder of one data package (or of `bot` itself) as a plain path (Jinja2's loader and YAML readers want
    real files).

    Args:
        package: one of the names above.

    Returns:
        The folder; setuptools installs packages unzipped, so it always exists on disk.
    """
    return Path(str(importlib.resources.files(package)))


def checkout() -> Path | None:
    """The source checkout this `bot` runs from (an editable install, or the checkout on `sys.path`).

    Returns:
        The folder holding this project's `pyproject.toml` beside the `bot` package; None when the bot is installed
        from a wheel (site-packages holds no `pyproject.toml` of ours).
    """
    root = folder(PACKAGE).parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return root if project.get("name") == PROJECT else None
