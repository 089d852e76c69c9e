"""What the installed toolchain is and what it can do.

Capabilities are detected from the installed optimum-intel itself (its draft-architecture map and the per-row
DFlash export markers), not assumed from a version number: when a release gains per-row export or DSpark, the
next run sees it, the provenance records it, and plan rebuilds what it affects (docs/design.md §5).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

TRACKED_PACKAGES = {
    "optimum-intel": "optimum-intel",
    "openvino": "openvino",
    "openvino-genai": "openvino-genai",
    "openvino-tokenizers": "openvino-tokenizers",
    "nncf": "nncf",
    "transformers": "transformers",
    "torch": "torch",
}

# Draft architectures and the exporter capability each one needs.
CAPABILITY_DFLASH = "dflash-stateful"
CAPABILITY_PER_ROW = "dflash-per-row"
CAPABILITY_DSPARK = "dspark"
CAPABILITY_DFLASH2 = "dflash2"


@dataclass(frozen=True)
class Toolchain:
    """Versions that produced a bundle, plus the exporter capabilities they offer."""

    versions: dict[str, str]
    capabilities: frozenset[str]
    profile: str = "default"
    # The interpreter of the profile's environment; None: this process's own (bot.core.profiles.toolchain_for).
    python: str | None = None

    def tracked(self) -> dict[str, str]:
        """The versions whose change rebuilds a published build."""
        return {name: self.versions.get(name, "not installed") for name in TRACKED_PACKAGES}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _optimum_openvino_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("optimum.exporters")
    except ModuleNotFoundError:  # no `optimum` at all: the light install (bot.core.profiles.planning_toolchain)
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "openvino"
    return folder if folder.is_dir() else None


def _draft_architectures(exporter_dir: Path) -> set[str]:
    """Keys of optimum-intel's `_CUSTOM_DRAFT_MODEL_MAP`, read without importing torch."""
    tree = ast.parse((exporter_dir / "__main__.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_CUSTOM_DRAFT_MODEL_MAP" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return {str(k.value) for k in node.value.keys if isinstance(k, ast.Constant)}
    return set()


@functools.cache
def detect() -> Toolchain:
    """Versions and capabilities of the toolchain installed in this environment."""
    versions = {name: _version(dist) for name, dist in TRACKED_PACKAGES.items()}
    capabilities: set[str] = set()
    exporter_dir = _optimum_openvino_dir()
    if exporter_dir is not None:
        architectures = _draft_architectures(exporter_dir)
        if "DFlashDraftModel" in architectures:
            capabilities.add(CAPABILITY_DFLASH)
        sources = "".join(p.read_text(encoding="utf-8", errors="replace") for p in exporter_dir.glob("*.py"))
        # The per-row export writes this rt_info key; its presence is the marker of that capability.
        if "candidate_position_offset" in sources:
            capabilities.add(CAPABILITY_PER_ROW)
        if architectures & {"Qwen3DSparkModel", "DSparkDraftModel", "Gemma4DSparkModel"}:
            capabilities.add(CAPABILITY_DSPARK)
        if "DFlash2DraftModel" in architectures:
            capabilities.add(CAPABILITY_DFLASH2)
    return Toolchain(versions=versions, capabilities=frozenset(capabilities))
