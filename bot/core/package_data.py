"""The files the bot ships beside its code: recipes, card templates, toolchain profiles and the record's schema.

They live at the top of the checkout, where maintainers edit them, and are installed inside the package as
`bot.workflows`, `bot.templates`, `bot.toolchains` and `bot.schemas` (pyproject.toml maps them), so one lookup through
`importlib.resources` finds them from a checkout, an editable install and an installed wheel alike.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

WORKFLOWS = "bot.workflows"
TEMPLATES = "bot.templates"
TOOLCHAINS = "bot.toolchains"
SCHEMAS = "bot.schemas"


def folder(package: str) -> Path:
    """The folder of one data package as a plain path (Jinja2's loader and YAML readers want real files).

    Args:
        package: one of the names above.

    Returns:
        The folder; setuptools installs packages unzipped, so it always exists on disk.
    """
    return Path(str(importlib.resources.files(package)))
