"""The fingerprints that say whether published work is still current: the card templates' (here, so planning, below
the publish stage, can compare them), and the three the status memory compares (`Fingerprints`).

A card's fingerprint hashes everything that renders it besides its record: the card templates and the templates they
include, the card and chart code, and the plotting library's version. A change to any of them re-renders the
published cards without a rebuild (`bot.plan.planner.decide`); `bot.publish.card` renders with the same templates.
The status memory reports a source from memory while its toolchain, recipe and card fingerprints are unchanged
(`bot.status.memory.needs_recheck`): the three travel together, as one `Fingerprints`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import jinja2
from jinja2 import nodes

from bot.core import package_data
from bot.core.profiles import load_profiles, planning_toolchain
from bot.core.recipe import Recipe
from bot.core.toolchain import Toolchain

TEMPLATES = package_data.folder(package_data.TEMPLATES)
DRAFT_TEMPLATE = "draft_card.md.j2"
TARGET_TEMPLATE = "target_card.md.j2"
# The code that renders a card besides its templates: the card module and the charts (the acceptance chart is
# published beside the card); found as the package data is (`bot.core.package_data`), from a checkout or a wheel.
CARD_CODE = (("bot.publish", "card.py"), ("bot.publish", "charts.py"))
PLOTTING = "matplotlib"  # the library that draws the charts: its version changes their bytes


def template_fingerprint(folder: Path | None = None) -> str:
    """Hash of everything that renders a card besides its record: the card templates and the ones they include,
    the card module, the chart code and matplotlib's version (`rendered_by`). A change to any of them re-renders the
    published cards without a rebuild; the status page's template is not among them (it has its own fingerprint,
    `bot.status.page.renderer_fingerprint`)."""
    return files_fingerprint(rendered_by(folder), plotting=importlib.metadata.version(PLOTTING))


def rendered_by(folder: Path | None = None) -> list[Path]:
    """The files a card is rendered with: its templates (`card_templates`) and `CARD_CODE`."""
    folder = folder or TEMPLATES
    code = [package_data.folder(package) / name for package, name in CARD_CODE]
    return [folder / name for name in card_templates(folder)] + code


def card_templates(folder: Path | None = None) -> list[str]:
    """The draft and target card templates and every template they include, import or extend, by name."""
    folder = folder or TEMPLATES
    parser = jinja2.Environment()
    names: set[str] = set()
    pending = [DRAFT_TEMPLATE, TARGET_TEMPLATE]
    while pending:
        name = pending.pop()
        if name in names:
            continue
        names.add(name)
        tree = parser.parse((folder / name).read_text(encoding="utf-8"))
        for node in tree.find_all(_LOADS):
            assert isinstance(node, _LOADS)
            # `{% include "a" if x else "b" %}` names both: every string constant of the expression counts.
            found = [node.template, *node.template.find_all(nodes.Const)]
            pending += [c.value for c in found if isinstance(c, nodes.Const) and isinstance(c.value, str)]
    return sorted(names)


_LOADS = (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)  # the tags that load another template


def files_fingerprint(paths: Iterable[Path], *, plotting: str) -> str:
    """Hash of files (each name and its bytes) and the plotting library's version: the renderer of a file."""
    digest = hashlib.sha256(f"{PLOTTING} {plotting}".encode())
    for path in paths:
        digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Fingerprints:
    """What the status memory compares to tell whether a source's last examination still holds, and what each of
    its entries records (`bot.status.memory.StatusEntry`: `toolchain_fingerprint`, `recipe_fingerprint`,
    `card_fingerprint`).

    Attributes:
        toolchain: `toolchain_fingerprint` of the toolchain planning plans with and every profile's pins.
        recipe: `recipe_memory_fingerprint` of the run's recipe.
        card: `template_fingerprint`; a published entry rendered with another template is examined (its cards are
            re-rendered). None: not compared (and not recorded).
    """

    toolchain: str
    recipe: str
    card: str | None = None

    @classmethod
    def of(cls, recipe: Recipe, *, toolchain: str | None = None, card: str | None = None) -> Fingerprints:
        """A run's fingerprints: its recipe's, and the toolchain's given (default: this environment's,
        `current_toolchain_fingerprint`)."""
        return cls(toolchain or current_toolchain_fingerprint(), recipe_memory_fingerprint(recipe), card)


def toolchain_fingerprint(toolchain: Toolchain, profile_fingerprints: Iterable[str] = ()) -> str:
    """What the skip/failure memory compares for "the toolchain changed".

    Args:
        toolchain: this environment's toolchain (`bot.core.toolchain.detect()`).
        profile_fingerprints: `Profile.fingerprint()` of every profile in `toolchains/profiles.yaml`, so a
            changed or added profile re-examines what it might now cover.
    """
    payload = {
        "versions": dict(sorted(toolchain.versions.items())),
        "capabilities": sorted(toolchain.capabilities),
        "profiles": sorted(profile_fingerprints),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def current_toolchain_fingerprint(toolchain: Toolchain | None = None) -> str:
    """The toolchain planning plans with (default: `profiles.planning_toolchain`) together with every profile's pins
    (`toolchains/profiles.yaml`)."""
    profiles = load_profiles()
    planned = toolchain or planning_toolchain(profiles)
    return toolchain_fingerprint(planned, [profile.fingerprint() for profile in profiles.profiles])


def recipe_memory_fingerprint(recipe: Recipe) -> str:
    """What the memory compares for "the recipe changed": the whole recipe (watch rules, target map, runner
    classes and limits can all turn a skip into a build), except the memory's own `recheck_after` and the page's
    `publish.schedule`."""
    payload = recipe.model_dump(mode="json", exclude={"watch": {"recheck_after"}, "publish": {"schedule"}})
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
