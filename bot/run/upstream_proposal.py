"""Proposing each toolchain profile's candidate pins for the toolchain watch (`bot.run.upstream`).

A candidate is per profile: optimum-intel gates each model type by a transformers range pip does not enforce, so
each profile's transformers pin is the newest release inside the candidate optimum-intel's own bounds for the model
types the profile is for (read from its `model_configs.py`, as `bot.core.exporter` does for the installed one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from bot.core import log
from bot.core.errors import Failure
from bot.core.exporter import bounds_from_source
from bot.core.profiles import Bounds, Profile, ProfileSet, _canonical, transformers_bounds
from bot.run.upstream_index import Index

# The packages the watch follows; every other pin of a profile moves only when a candidate needs it to.
STACK = ("optimum-intel", "optimum", "openvino", "openvino-tokenizers", "openvino-genai", "nncf", "transformers")


@dataclass(frozen=True)
class ProfileProposal:
    """One profile's pins now and the candidate's (None when no release fits the candidate's bounds)."""

    profile: str
    model_types: tuple[str, ...]
    current: dict[str, str]  # every pinned requirement of the profile: name -> version
    candidate: dict[str, str] | None
    transformers_range: str  # what the candidate optimum-intel allows for the profile's model types
    note: str | None = None
    # model type -> (installed optimum-intel's transformers range, the candidate's): where a family moves
    bounds: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def changes(self) -> dict[str, tuple[str, str]]:
        if self.candidate is None:
            return {}
        return {
            name: (self.current.get(name, "-"), version)
            for name, version in self.candidate.items()
            if self.current.get(name) != version
        }


def _pins(profile: Profile) -> dict[str, str]:
    return {
        requirement.partition("==")[0].strip(): profile.pin(requirement.partition("==")[0]) or "-"
        for requirement in profile.requirements
    }


def intersect_bounds(table: Mapping[str, tuple[str | None, str | None]], model_types: Iterable[str]) -> Bounds:
    """The transformers range that serves every one of `model_types` (inclusive ends, None: unbounded)."""
    low: str | None = None
    high: str | None = None
    types = list(model_types)
    for model_type in types:
        minimum, maximum = table.get(model_type, (None, None))
        if minimum is not None and (low is None or Version(minimum) > Version(low)):
            low = minimum
        if maximum is not None and (high is None or Version(maximum) < Version(high)):
            high = maximum
    return Bounds(",".join(types) or "any", low, high, "candidate optimum-intel source")


def transformers_range(bounds: Bounds, declared: Requirement | None) -> str | None:
    """`bounds` and optimum-intel's own transformers requirement as one requirement for pip; None when the
    bounds are empty (their minimum is above their maximum), so no release can satisfy them."""
    if bounds.minimum and bounds.maximum and Version(bounds.minimum) > Version(bounds.maximum):
        return None
    parts = [f">={bounds.minimum}" if bounds.minimum else "", f"<={bounds.maximum}" if bounds.maximum else ""]
    specifiers = [p for p in parts if p] + ([str(s) for s in declared.specifier] if declared else [])
    return "transformers" + ",".join(sorted(specifiers))


def propose(profiles: ProfileSet, index: Index, *, work: Path) -> list[ProfileProposal]:
    """Each profile's candidate pins: the newest mutually consistent stack, transformers per profile.

    Raises:
        Failure: the index could not be asked, or pip found no consistent set for the stack at all.
    """
    default = profiles.profiles[0]
    stack = index.resolve([default.torch, *STACK])
    optimum_intel = stack.version("optimum-intel")
    table = bounds_from_source(index.model_configs(optimum_intel, work))
    declared = stack.requirement_of("optimum-intel", "transformers")
    proposals = []
    for profile in profiles.profiles:
        moved = {
            t: (
                transformers_bounds(t, profiles).requirement(),
                Bounds(t, *table.get(t, (None, None)), "candidate").requirement(),
            )
            for t in profile.model_types
        }
        bounds = intersect_bounds(table, profile.model_types)
        allowed = bounds.requirement().replace("transformers ", "") + (f" and {declared.specifier}" if declared else "")
        current = _pins(profile)
        wanted_range = transformers_range(bounds, declared)
        transformers = index.newest(wanted_range) if wanted_range else None
        if transformers is None:
            note = (
                f"no transformers release satisfies {allowed} (optimum-intel {optimum_intel}, model types "
                f"{list(profile.model_types)})"
            )
            proposals.append(ProfileProposal(profile.name, profile.model_types, current, None, allowed, note, moved))
            continue
        wanted = {name: stack.version(name) for name in STACK if name != "transformers"} | {
            "transformers": transformers
        }
        if all(profile.pin(name) == version for name, version in wanted.items()):
            proposals.append(
                ProfileProposal(profile.name, profile.model_types, current, dict(current), allowed, bounds=moved)
            )
            continue
        proposals.append(
            ProfileProposal(
                profile.name,
                profile.model_types,
                current,
                _resolve_profile(profile, wanted, index),
                allowed,
                bounds=moved,
            )
        )
    return proposals


def _resolve_profile(profile: Profile, wanted: Mapping[str, str], index: Index) -> dict[str, str]:
    """The profile's full pin set around the wanted stack: other pins kept, unless the stack needs them moved."""
    stack_pins = [f"{name}=={version}" for name, version in wanted.items()]
    others = [r for r in profile.requirements if _canonical(r.partition("==")[0]) not in map(_canonical, wanted)]
    try:
        resolution = index.resolve([profile.torch, *stack_pins, *others])
    except Failure:
        log.step("profile %s: its other pins do not fit the candidate stack; letting them move", profile.name)
        resolution = index.resolve([profile.torch, *stack_pins, *(r.partition("==")[0] for r in others)])
    return {name: resolution.version(name) for name in _pins(profile)}
